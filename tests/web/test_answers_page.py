"""The answers over HTTP: the make-it-fit panel in the page and in the htmx answer, and the whole page for a link
that applies one."""

from __future__ import annotations

import re
from html import unescape

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


def test_the_htmx_answer_refreshes_the_panel_out_of_band(client):
    fragment = client.get(OVER + "&precision=bf16", headers=HX).text
    assert re.search(r'<section id="answers"[^>]*hx-swap-oob="true"', fragment)
    assert "How far it goes on the" in fragment
    assert "Ways to fit" not in fragment  # it fits


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
        svg = re.search(r"<svg.*?</svg>", figure, re.S).group(0)
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
