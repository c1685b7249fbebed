"""A GPU the catalogue lacks, on the page: the GPU select's custom choice, its capacity and the GPU it is like."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Page, expect

from app import core
from app.main import app
from app.web import links
from app.web.compare import what_changed
from app.web.form import parse_form
from app.web.imports import config_state
from app.web.view import format_bytes

client = TestClient(app)
GIB = 1 << 30
SETUP = "preset=llama-3-8b&micro_batch_size=1&seq_len=2048&zero_stage=3&data=8"


def _summary(html: str) -> str:
    start = html.index('id="summary"')
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html[start:start + 4000]))


def _api(gpu: object) -> dict:
    body = {"model": {"preset": "llama-3-8b"}, "training": {"micro_batch_size": 1, "seq_len": 2048},
            "parallelism": {"data": 8, "zero_stage": 3}, "gpu": gpu}
    response = client.post("/api/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    return response.json()["gpu"]


@pytest.mark.parametrize("written", ["24 GiB", "24GiB", "25757220864", "25,769,803,776"])
def test_the_page_gives_the_apis_verdict_for_a_custom_capacity(written: str):
    capacity = 24 * GIB if "," in written or "GiB" in written else int(written)
    gpu = _api({"capacity_bytes": capacity})
    response = client.get(f"/?{SETUP}&gpu=custom&{urlencode({'gpu_capacity': written})}")
    assert response.status_code == 200
    said = _summary(response.text)
    headroom = format_bytes(abs(gpu["headroom"]), "GiB")
    assert ("Fits" if gpu["fits"] else "Does not fit") in said
    assert headroom in said
    assert format_bytes(capacity, "GiB") in said


def test_decimal_gigabytes_and_the_gpu_it_is_like_reach_the_estimate():
    form = parse_form({"preset": "llama-3-8b", "gpu": "custom", "gpu_capacity": "96 GB", "gpu_like": "a100-80gb"})
    assert form.ok and form.estimate is not None and form.estimate.gpu is not None
    assert form.estimate.gpu.gpu.capacity_bytes == 96 * 10**9
    assert form.estimate.gpu.gpu.context_bytes == core.get_gpu("a100-80gb").context_bytes
    form = parse_form({"gpu": "custom", "gpu_capacity": "96 GB", "gpu_like": "a100-80gb", "preset": "llama-3-8b",
                       "micro_batch_size": "1", "seq_len": "2048", "zero_stage": "3", "data": "8"})
    assert form.estimate is not None and form.estimate.gpu is not None
    assert form.estimate.gpu.headroom_bytes == _api({"capacity_bytes": 96 * 10**9, "like": "a100-80gb"})["headroom"]


@pytest.mark.parametrize(("written", "said"), [
    ("lots", "Enter a number, e.g. 24 GiB or 96 GB (got 'lots')."),
    ("512 MiB", "GPU memory must be between 1 GiB and 4 TiB (got 512 MiB)."),
    ("8 TiB", "GPU memory must be between 1 GiB and 4 TiB (got 8 TiB)."),
])
def test_a_bad_capacity_is_the_fields_own_message(written: str, said: str):
    response = client.get(f"/?{SETUP}&gpu=custom&{urlencode({'gpu_capacity': written})}")
    assert response.status_code == 422
    slot = re.search(r'<p class="field-error" id="error-gpu_capacity"[^>]*>(.*?)</p>', response.text, re.S)
    assert slot is not None
    assert said.replace("'", "&#39;") in slot.group(1)
    assert 'id="f-gpu_capacity"' in response.text and 'aria-invalid="true"' in response.text


def test_an_empty_capacity_is_waited_for_not_an_error():
    response = client.get(f"/?{SETUP}&gpu=custom&gpu_capacity=")
    assert re.search(r'<p class="field-error" id="error-gpu_capacity"[^>]*></p>', response.text)
    assert not re.search(r'id="f-gpu_capacity"[^>]*aria-invalid', response.text)
    status = re.sub(r"\s+", " ", response.text[response.text.index('id="results-status"'):][:800])
    assert "Waiting for:" in status and "Enter the GPU&#39;s memory, e.g. 24 GiB or 96 GB." in status


def test_an_htmx_update_with_a_bad_capacity_keeps_the_address():
    response = client.get(f"/?{SETUP}&gpu=custom&gpu_capacity=lots", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.headers["HX-Reswap"] == "none" and response.headers["HX-Push-Url"] == "false"
    assert "Enter a number, e.g. 24 GiB or 96 GB" in response.text


def test_a_fix_that_names_a_catalogue_gpu_drops_the_custom_fields():
    state = {"gpu": "custom", "gpu_capacity": "24 GiB", "gpu_like": "a100-80gb", "seq_len": "4096"}
    assert links.changed(state, {"gpu": "h100-80gb"}) == {"seq_len": "4096", "gpu": "h100-80gb"}
    assert links.changed(state, {"training.seq_len": 2048})["gpu_capacity"] == "24 GiB"


def test_a_pinned_catalogue_gpu_compares_with_a_custom_one_in_words():
    pinned = parse_form({"preset": "llama-3-8b", "gpu": "h100-80gb"})
    custom = parse_form({"preset": "llama-3-8b", "gpu": "custom", "gpu_capacity": "24 GiB"})
    assert pinned.request is not None and custom.request is not None
    assert what_changed(pinned.request, custom.request) == (
        "GPU: NVIDIA H100 80GB HBM3 (SXM5) → custom, 24 GiB (as on the NVIDIA H100 80GB HBM3 (SXM5))",)


def test_a_body_with_a_custom_gpu_sets_the_custom_controls():
    request = {"gpu": {"capacity_bytes": 24 * GIB, "like": "a100-80gb"}}
    state, not_carried = config_state(request, {"gpu", "gpu.capacity_bytes", "gpu.like"}, {"gpu": "h100-80gb"})
    assert not_carried == []
    assert state == {"gpu": "custom", "gpu_capacity": "24 GiB", "gpu_like": "a100-80gb"}


def test_export_takes_a_custom_gpu():
    response = client.get(f"/export/deepspeed?{SETUP}&gpu=custom&gpu_capacity=24+GiB")
    assert response.status_code == 200
    assert '"train_micro_batch_size_per_gpu": 1' in response.text


@pytest.mark.browser
def test_choosing_a_custom_capacity_updates_the_verdict(watched: Page, base_url: str):
    page = watched
    page.goto(f"{base_url}/?{SETUP}")
    capacity = page.locator("#f-gpu_capacity")
    expect(capacity).to_be_hidden()
    page.select_option("#f-gpu", "custom")
    expect(capacity).to_be_visible()
    expect(page.locator("#results-status")).to_contain_text("Enter the GPU's memory")
    expect(page.locator("#error-gpu_capacity")).to_have_text("")
    capacity.fill("24 GiB")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("gpu_capacity") == ["24 GiB"])
    gpu = _api({"capacity_bytes": 24 * GIB})
    verdict = page.locator("#summary")
    expect(verdict).to_contain_text(format_bytes(abs(gpu["headroom"]), "GiB"))
    expect(verdict).to_contain_text("Custom GPU")
    expect(page.locator("#error-gpu_capacity")).to_have_text("")

    capacity.fill("lots")  # refused: the message at the field, and the address keeps 24 GiB
    expect(page.locator("#error-gpu_capacity")).to_contain_text("Enter a number, e.g. 24 GiB or 96 GB")
    assert parse_qs(urlparse(page.url).query)["gpu_capacity"] == ["24 GiB"]
    page.reload()
    expect(page.locator("#f-gpu_capacity")).to_have_value("24 GiB")
    expect(page.locator("#summary")).to_contain_text(format_bytes(abs(gpu["headroom"]), "GiB"))
