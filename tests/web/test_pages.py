"""The page over HTTP: full page, htmx fragments, history restores, inline errors, and never a 500."""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app import core
from app.main import app
from app.web import imports
from app.web.form import ALL_CONTROLS
from tests.budget import examples

HX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(app)


class _Controls(HTMLParser):
    """Collects form controls, labels' targets, ids and every URL the page would load."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[dict[str, str]] = []
        self.label_for: set[str] = set()
        self.ids: list[str] = []
        self.urls: list[str] = []
        self.segments: list[dict[str, str]] = []
        self._label_depth = 0

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "label":
            self._label_depth += 1
            if "for" in a:
                self.label_for.add(a["for"])
        if tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append(a | {"_wrapped": "1" if self._label_depth else ""})
        for key in ("src", "href", "action", "hx-get"):
            if key in a:
                self.urls.append(a[key])
        if "data-category" in a:
            self.segments.append(a)

    def handle_endtag(self, tag):
        if tag == "label":
            self._label_depth -= 1


def _parse(html: str) -> _Controls:
    parser = _Controls()
    parser.feed(html)
    return parser


def test_first_view_says_something(client):
    response = client.get("/")
    assert response.status_code == 200
    assert "HX-Request" in response.headers["vary"]
    page = _parse(response.text)
    assert "results" in page.ids
    assert "Llama 3 8B" in response.text and "NVIDIA H100 80GB" in response.text
    assert re.search(r"(Fits, with|Does not fit, by) [\d,]+\.\d\d GiB", response.text)
    categories = [s["data-category"] for s in page.segments]
    # the tensors by category, then the allocator's cached blocks and what lies outside it (the CUDA context)
    assert set(categories) == set(core.CATEGORIES) | {"cached", "outside"}
    assert all(s["data-bytes"].isdigit() for s in page.segments)


def test_every_control_is_labelled_and_named_like_the_api(client):
    page = _parse(client.get("/").text)
    names = {control["name"] for control in page.controls}
    assert {"optimizer", "seq_len", "zero_stage", "preset", "num_params", "hf_config", "micro_batch_size",
            "precision", "activation_checkpointing", "attention", "data", "tensor", "pipeline",
            "sequence_parallel", "gpu", "hidden_size", "unit", "source"} <= names
    assert names <= ALL_CONTROLS | imports.NAMES  # the paste box's fields are its own form's, not controls
    for control in page.controls:
        assert control.get("_wrapped") or control.get("id") in page.label_for, control


def test_ids_are_unique_and_nothing_loads_from_elsewhere(client):
    page = _parse(client.get("/").text)
    assert len(page.ids) == len(set(page.ids))
    for url in page.urls:
        assert url.startswith(("/", "#", "data:")), url
    assert "/static/htmx-2.0.11.min.js" in page.urls
    assert client.get("/static/htmx-2.0.11.min.js").status_code == 200


def test_htmx_gets_the_fragments_with_out_of_band_parts(client):
    response = client.get("/?optimizer=sgd", headers=HX)
    assert response.status_code == 200
    assert "HX-Request" in response.headers["vary"]
    assert "hx-reswap" not in response.headers
    assert response.text.lstrip().startswith('<div id="summary"')
    assert "<html" not in response.text
    for oob in ('id="breakdown"', 'id="timeline"', 'id="attention-kernel"', 'id="explanation"', 'id="error-tensor"',
                'id="arch-fields"'):
        assert re.search(oob + r'[^>]*hx-swap-oob="true"', response.text), oob
    fragment = _parse(response.text)
    optimizer = [s for s in fragment.segments if s["data-category"] == "optimizer_states"]
    assert optimizer and all(s["data-bytes"] == "0" for s in optimizer)


def test_out_of_band_targets_exist_on_the_page(client):
    page_ids = set(_parse(client.get("/").text).ids)
    for query in ("?optimizer=sgd", "?tensor=3", "?source=custom", "?source=custom&fill=preset", "?precision=custom"):
        fragment = client.get("/" + query, headers=HX).text
        for oob_id in re.findall(r'id="([^"]+)"[^>]*hx-swap-oob', fragment):
            assert oob_id in page_ids, (query, oob_id)


def test_history_restore_gets_the_full_page(client):
    response = client.get("/?optimizer=sgd", headers=HX | {"HX-History-Restore-Request": "true"})
    assert response.status_code == 200
    assert "<html" in response.text and 'id="results"' in response.text


def test_invalid_input_from_htmx_keeps_the_last_result(client):
    response = client.get("/?tensor=3", headers=HX)
    assert response.status_code == 200
    assert response.headers["hx-reswap"] == "none"
    assert 'id="summary"' not in response.text.split("hx-swap-oob")[0]
    assert "Out of date" in response.text
    slot = re.search(r'<p class="field-error" id="error-tensor"[^>]*>(.*?)</p>', response.text, re.S)
    assert slot and "divisible by the tensor-parallel degree (3)" in slot.group(1)


def test_invalid_input_without_javascript_is_a_page_with_the_message(client):
    response = client.get("/?seq_len=0")
    assert response.status_code == 422
    assert "<html" in response.text
    assert re.search(r'id="f-seq_len"[^>]*aria-invalid="true"', response.text)
    assert "Sequence length must be at least 1." in response.text


def test_the_url_reopens_the_same_state(client):
    query = "?source=custom&preset=mistral-7b&num_hidden_layers=16&optimizer=lion&data=4&zero_stage=2&unit=GB"
    html = client.get("/" + query).text
    assert re.search(r'<option value="lion" selected>', html)
    assert re.search(r'name="num_hidden_layers" type="text" value="16"', html)
    assert re.search(r'<option value="2" selected>', html)
    assert re.search(r'value="GB" checked', html)
    assert " GB" in html


def test_zero_and_offload_are_on_screen_at_one_gpu_expert_parallelism_with_data_parallelism(client):
    # ZeRO-Offload runs on one GPU: a newcomer's cheapest fix needs both controls there.
    single = client.get("/").text
    assert re.search(r'<select id="f-zero_stage"', single) and re.search(r'<select id="f-offload"', single)
    assert not re.search(r'data-show-when="data&gt;1"[^>]*>\s*<legend class="sr-only">ZeRO', single)
    assert re.search(r'data-show-when="data&gt;1" hidden disabled>\s*<legend class="sr-only">Expert parallelism', single)
    multi = client.get("/?data=4").text
    assert not re.search(r'data-show-when="data&gt;1" hidden', multi)


def test_offload_at_one_gpu_is_estimated(client):
    html = client.get("/?preset=llama-3-8b&seq_len=4096&gpu=h100-80gb&zero_stage=2&offload=optimizer").text
    assert "Fits, with" in html


QUERY_VALUES = ["", "0", "-1", "1", "3", "7", "1e9", "abc", "99999999999999999999", "true", "custom", "{", "%00", "null"]


@pytest.mark.search  # a search over generated queries, which make test runs in full
def test_no_query_gives_a_500(client):
    rng = random.Random(20241130)
    names = sorted(ALL_CONTROLS | {"fill"})
    for _ in range(examples(300)):
        params = {name: rng.choice(QUERY_VALUES) for name in rng.sample(names, rng.randint(1, 6))}
        for headers in ({}, HX):
            response = client.get("/", params=params, headers=headers)
            assert response.status_code in (200, 422), (params, response.status_code)


PARTIALS = Path(__file__).resolve().parents[2] / "templates" / "partials"
SVG_BUDGET_BYTES = 8_000


def test_each_partial_root_id_matches_its_file_name():
    for partial in sorted(PARTIALS.glob("*.html")):
        markup = re.sub(r"\{#.*?#\}", "", partial.read_text(), flags=re.S).lstrip()
        root = re.match(r"<(\w+)\s[^>]*?\bid=\"([^\"]+)\"", markup)
        assert root and root.group(2) == partial.stem, partial.name


def _timeline(html: str) -> str:
    found = re.search(r'<figure id="timeline".*?</figure>', html, re.S)
    assert found
    return found.group(0)


def test_the_timeline_chart_is_inline_svg_with_a_text_alternative(client):
    result = core.estimate(architecture=core.get_preset("llama-3-8b").architecture,
                           training=core.Training(seq_len=2048), gpu=core.get_gpu("h100-80gb"))
    figure = _timeline(client.get("/").text)
    found = re.search(r"<svg.*?</svg>", figure, re.S)
    assert found
    svg = found.group(0)
    assert re.search(r'<svg[^>]*viewBox="0 0 \d+ \d+"[^>]*role="img"', svg)
    assert "<title" in svg and "<desc" in svg
    assert len(svg.encode()) < SVG_BUDGET_BYTES
    assert re.search(r'class="capacity-mark is-over"', svg)  # H100 80GB is below this peak
    label = re.search(r'<text class="peak-label"[^>]*><tspan>(.*?)</tspan> <tspan[^>]*>(.*?)</tspan>', svg)
    assert label and label.group(1).startswith("peak: ") and label.group(2) == f"at {result.peak.event}, step {result.peak.step}"
    # The table lists every point of the timeline, the peak marked.
    rows = re.findall(r"<tr(?: class=\"is-peak\")?><td>", figure)
    assert len(rows) == len(result.timeline)
    assert figure.count('class="is-peak"') == 1


def test_the_summary_and_bar_follow_the_peak(client):
    html = client.get("/?gpu=b200-180gb").text
    assert re.search(r"<dt>Peak per GPU</dt><dd[^>]*>[\d,.]+ GiB</dd>", html)
    assert "Per GPU at the peak" in html and "Sum of every buffer:" in html
    assert re.search(r"is less than the [\d,.]+ GiB sum of every buffer", html)
    assert re.search(r"<th scope=\"col\">At peak</th>", html)


def test_the_attention_kernel_is_named(client):
    assert "Kernel assumed: sdpa → flash" in client.get("/?attention=sdpa").text
    fragment = client.get("/?attention=eager", headers=HX).text
    assert re.search(r'id="attention-kernel"[^>]*hx-swap-oob="true">Kernel assumed: eager', fragment)


def test_the_htmx_update_stays_small(client):
    fragment = client.get("/?seq_len=8192", headers=HX).text
    assert len(_timeline(fragment).encode()) < 2 * SVG_BUDGET_BYTES
