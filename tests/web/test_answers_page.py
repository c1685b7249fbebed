"""The answers over HTTP: the make-it-fit panel in the page and in the htmx answer, and the whole page for a link
that applies one."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs, urlparse

import pytest
from fastapi.testclient import TestClient

from app.main import app

HX = {"HX-Request": "true"}
OVER = "/?preset=llama-3-8b&seq_len=4096&gpu=h100-80gb"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app)


def _section(html: str, element: str, ident: str) -> str:
    found = re.search(rf'<{element} id="{ident}".*?</{element}>', html, re.S)
    assert found, ident
    return found.group(0)


def _found(pattern: str, text: str, group: int = 0, flags: int = 0) -> str:
    found = re.search(pattern, text, flags)
    assert found, pattern
    return found.group(group)


def _headline(html: str) -> str:
    found = re.search(r'<strong class="verdict-headline">([^<]+)</strong>', html)
    assert found
    return found.group(1)


def _apply_links(html: str) -> list[str]:
    return [unescape(href) for href in re.findall(r'<a class="apply" href="([^"]+)" hx-get="\1" data-apply>', html)]


def test_the_page_offers_ways_to_fit_as_links(client):
    html = client.get(OVER).text
    panel = _section(html, "section", "answers")
    assert "Make it fit on the NVIDIA H100" in panel
    assert "Single changes that fit, cheapest first" in panel
    hrefs = _apply_links(panel)
    assert hrefs and all(href.startswith("/?") for href in hrefs)
    # Followed, each link's page says it fits.
    for href in hrefs:
        assert _headline(client.get(href).text).startswith("Fits, with"), href
    # The panel targets the whole form, so the fields come back with the change.
    assert re.search(r'<section id="answers"[^>]*hx-target="#calc" hx-select="#calc" hx-swap="outerHTML" hx-push-url="true"', html)
    # The verdict bar points to them.
    assert re.search(r'<div id="verdict-bar".*?href="#answers">Ways to fit</a>', html, re.S)


def test_the_htmx_answer_refreshes_the_panel_out_of_band_and_fills_it_in_a_request_of_its_own(client):
    # The solver and its fixes replay the allocator a dozen times: the update sends the verdict at once and a
    # placeholder that asks for the panel as it lands (GET /answers, the same setup).
    fragment = client.get(OVER + "&precision=bf16&gpu=h200-141gb", headers=HX).text
    placeholder = re.search(r'<section id="answers"[^>]*hx-swap-oob="true"[^>]*>', fragment)
    assert placeholder and 'hx-trigger="load"' in placeholder.group(0)
    assert "How far it goes on the" not in fragment and "Ways to fit" not in fragment  # it fits
    found = re.search(r'hx-get="(/answers\?[^"]+)"', placeholder.group(0))
    assert found
    href = unescape(found.group(1))
    assert parse_qs(urlparse(href).query)["precision"] == ["bf16"]
    panel = client.get(href).text
    assert panel.lstrip().startswith('<section id="answers"') and "How far it goes on the" in panel
    assert "hx-swap-oob" not in panel and 'hx-target="#calc"' in panel


def test_the_panel_alone_without_a_gpu_is_empty(client):
    assert re.fullmatch(r'\s*<section id="answers"[^>]*>\s*</section>\s*', client.get("/answers?gpu=").text)


def test_a_link_that_applies_an_answer_gets_the_whole_page(client):
    response = client.get(OVER + "&precision=bf16", headers=HX | {"HX-Target": "calc"})
    assert response.status_code == 200
    assert "<html" in response.text and '<form id="calc"' in response.text
    assert "HX-Target" in response.headers["vary"]
    assert re.search(r'<option value="bf16" selected>', response.text)


def test_without_a_gpu_there_is_no_panel(client):
    html = client.get("/?gpu=").text
    assert re.search(r'<section id="answers"[^>]*></section>', html)


SVG_BUDGET_BYTES = 8_000


def _figure(html: str, ident: str) -> str:
    found = re.search(rf'<figure class="sweep" id="{ident}".*?</figure>', html, re.S)
    assert found, ident
    return found.group(0)


def test_the_sweep_charts_are_inline_svg_with_their_numbers_as_a_table(client):
    html = client.get("/?preset=llama-3-8b&seq_len=4096&gpu=h100-80gb&data=8&zero_stage=1").text
    for ident, rows in (("seq-chart", 25), ("data-chart", 11)):
        figure = _figure(html, ident)
        svg = _found(r"<svg.*?</svg>", figure, flags=re.S)
        assert re.search(r'<svg[^>]*viewBox="0 0 \d+ \d+"[^>]*role="img"', svg)
        assert f'<title id="{ident}-title">' in svg and f'<desc id="{ident}-desc">' in svg
        assert 'class="capacity-mark' in svg and 'class="now-mark"' in svg
        assert len(svg.encode()) < SVG_BUDGET_BYTES
        assert "<details" in figure and len(re.findall(r"<tr(?: class=\"is-current\")?><th scope=\"row\">", figure)) == rows
        assert figure.count('class="is-current"') == 1
    assert re.findall(r'class="series zero-(\d)"', _figure(html, "data-chart")) == ["0", "1", "2", "3"]
    assert "now: 4,096" in _figure(html, "seq-chart") and "now: 8" in _figure(html, "data-chart")


def test_the_sweeps_follow_the_form_in_the_htmx_answer(client):
    fragment = client.get("/?preset=llama-3-8b&seq_len=8192&gpu=h100-80gb", headers=HX).text
    assert re.search(r'<div id="sweeps"[^>]*hx-swap-oob="true"', fragment)
    assert "now: 8,192" in fragment


def test_no_sweeps_without_an_architecture(client):
    html = client.get("/?source=params&num_params=7B&gpu=h100-80gb").text
    assert re.search(r'<div id="sweeps"[^>]*></div>', html)


PIN = "/?preset=llama-3-8b&seq_len=8192&gpu=h100-80gb&pin=" + "source%3Dpreset%26seq_len%3D4096%26gpu%3Dh100-80gb"


def test_a_pinned_url_opens_the_comparison(client):
    response = client.get(PIN)
    assert response.status_code == 200
    section = _section(response.text, "section", "compare")
    assert "Compared with the pinned setup" in section
    assert "Sequence length: 4,096 → 8,192" in section
    assert re.search(r'<tr data-compare="activations">.*?class="delta delta-more">\+[\d,.]+ GiB</td>', section)
    assert re.search(r'<tr data-compare="total">', section)
    # The pin travels with the form.
    assert '<input type="hidden" name="pin" value="source=preset&amp;seq_len=4096&amp;gpu=h100-80gb">' in section
    unpin = unescape(_found(r'<a class="apply" href="([^"]+)"[^>]*data-unpin>Unpin</a>', section, 1))
    assert "pin=" not in unpin and "seq_len=8192" in unpin
    # The ways to fit keep the pin, so applying one compares it with the pinned setup.
    fixes = _apply_links(_section(response.text, "section", "answers"))
    assert fixes and all("pin=source%3Dpreset" in href for href in fixes)


def test_the_comparison_follows_the_form_in_the_htmx_answer(client):
    fragment = client.get(PIN.replace("seq_len=8192", "seq_len=2048"), headers=HX).text
    assert re.search(r'<section id="compare"[^>]*hx-swap-oob="true"', fragment)
    assert "Sequence length: 4,096 → 2,048" in fragment and 'name="pin"' in fragment


def test_the_pin_link_pins_the_current_setup(client):
    html = client.get("/?seq_len=4096&gpu=h100-80gb").text
    href = unescape(_found(r'<a class="apply" href="([^"]+)"[^>]*data-pin>Pin this setup</a>', html, 1))
    pinned = client.get(href).text
    assert "Pinned. Change any input" in pinned


BAD_PINS = ["", "%", "%zz", "seq_len=abc", "tensor=3", "gpu=nope", "pin=pin%3Dpin", "source=config&hf_config=%7B",
            "a" * 20_000, "seq_len=99999999999999999999999999", "=&=&&", "\x00", "source=params&num_params=0"]


def test_a_bad_pin_is_a_message_never_a_500(client):
    for raw in BAD_PINS:
        for headers in ({}, HX):
            response = client.get("/", params={"seq_len": "4096", "pin": raw}, headers=headers)
            assert response.status_code == 200, (raw, response.status_code)
    message = _section(client.get("/", params={"pin": "tensor=3"}).text, "section", "compare")
    assert "The pinned setup cannot be estimated:" in message and "Unpin" in message
    # A pin with invalid input beside it: the page's own 422, the pin kept for the next submission.
    response = client.get("/", params={"tensor": "3", "pin": "seq_len=4096"})
    assert response.status_code == 422 and 'name="pin" value="seq_len=4096"' in response.text


def test_recomputation_costs_sit_beside_the_checkpointing_control(client):
    html = client.get("/?seq_len=4096&precision=bf16&attention=eager").text
    control = html.index('id="f-activation_checkpointing"')
    note = html.index('<div id="checkpointing-cost"')
    assert control < note < html.index('name="attention"')
    assert re.search(r"<strong>Full \(layer inputs only\)</strong>: \+\d+\.\d% compute, \u2212[\d,.]+ GiB at the peak", html)
    fragment = client.get("/?seq_len=4096&precision=bf16&attention=eager&activation_checkpointing=full", headers=HX).text
    assert re.search(r'<div id="checkpointing-cost"[^>]*hx-swap-oob="true"', fragment)
    assert re.search(r"<strong>None</strong>: \u2212\d+\.\d% compute, \+[\d,.]+ GiB at the peak", fragment)
