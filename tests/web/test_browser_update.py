"""The smaller update in a real Chromium: after each change the page shows exactly what a fresh load of its new
address shows, though the update sent only what changed."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, Response, expect

pytestmark = pytest.mark.browser

# What an update may touch: the result's regions, and the form's parts that the server refreshes.
REGIONS = ("verdict-bar", "explanation", "attention-kernel", "checkpointing-cost", "arch-fields", "dtype-fields")
SNAPSHOT = """(regions) => {
  const out = {results: document.getElementById('results').innerHTML};
  for (const id of regions) out[id] = document.getElementById(id).outerHTML;
  for (const slot of document.querySelectorAll('#calc [data-error-for]')) out[slot.id] = slot.outerHTML;
  return out;
}"""
SETTLED = "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')"


def _settle(page: Page, field: str, value: str) -> None:
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get(field) == [value])
    page.wait_for_function(SETTLED)


def _same_as_a_fresh_load(page: Page) -> None:
    live = page.evaluate(SNAPSHOT, list(REGIONS))
    fresh = page.context.new_page()
    try:
        fresh.goto(page.url)
        loaded = fresh.evaluate(SNAPSHOT, list(REGIONS))
    finally:
        fresh.close()
    assert live.keys() == loaded.keys()
    for region, html in loaded.items():
        assert live[region] == html, region


def _update(page: Page, action, field: str, value: str, *, valid: bool = True) -> Response:
    with page.expect_response(lambda r: r.request.headers.get("hx-request") == "true"
                              and parse_qs(urlparse(r.url).query).get(field) == [value]) as answer:
        action()
    if valid:
        _settle(page, field, value)
    else:  # the address keeps the last valid setup
        page.wait_for_function(SETTLED)
    return answer.value


def test_each_change_shows_what_a_fresh_load_of_its_address_shows(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?preset=llama-3-8b&seq_len=4096")
    page.evaluate("window.__sameDocument = true")

    first = _update(page, lambda: page.fill("#f-seq_len", "4104"), "seq_len", "4104")
    assert first.request.headers["hx-current-url"].endswith("/?preset=llama-3-8b&seq_len=4096")
    sent = first.text()
    assert 'id="summary"' in sent and 'id="arch-fields"' not in sent and 'id="error-seq_len"' not in sent
    _same_as_a_fresh_load(page)

    second = _update(page, lambda: page.select_option("#f-optimizer", "sgd"), "optimizer", "sgd")
    assert "seq_len=4104" in second.request.headers["hx-current-url"]
    assert 'id="explain-optimizer_states-group"' in second.text() and 'id="explain-weights-group"' not in second.text()
    assert len(second.body()) < len(first.body()) * 2
    _same_as_a_fresh_load(page)

    # An invalid value keeps the last result, marked out of date; the next valid one brings the whole result back.
    _update(page, lambda: page.fill("#f-tensor", "3"), "tensor", "3", valid=False)
    expect(page.locator("#error-tensor")).to_contain_text("divisible")
    expect(page.locator("#f-tensor")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#results-status")).to_contain_text("Out of date")
    _update(page, lambda: page.fill("#f-tensor", "1"), "tensor", "1")
    expect(page.locator("#error-tensor")).to_be_empty()
    expect(page.locator("#f-tensor")).not_to_have_attribute("aria-invalid", "true")
    _same_as_a_fresh_load(page)

    for action, field, value in (
        (lambda: page.locator('#breakdown input[name="unit"][value="GB"]').check(), "unit", "GB"),
        (lambda: page.select_option("#f-gpu", "a100-40gb"), "gpu", "a100-40gb"),
        (lambda: page.fill("#f-data", "8"), "data", "8"),
        (lambda: page.select_option("#f-precision", "fp32"), "precision", "fp32"),
        (lambda: page.select_option("#f-preset", "gpt2"), "preset", "gpt2"),
    ):
        _update(page, action, field, value)
        _same_as_a_fresh_load(page)
    assert page.evaluate("window.__sameDocument === true")  # all of it in place, no page load

    # The way back asks the server for the whole page of the earlier address; the next change leans on it.
    page.go_back()
    _settle(page, "precision", "fp32")
    expect(page.locator("#f-preset")).to_have_value("llama-3-8b")
    _same_as_a_fresh_load(page)
    _update(page, lambda: page.fill("#f-seq_len", "2048"), "seq_len", "2048")
    _same_as_a_fresh_load(page)


def test_the_address_holds_the_last_valid_setup_and_typing_adds_no_history(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?seq_len=2048")
    start = page.evaluate("history.length")

    # An invalid value gets its message, and the address keeps the setup that gave the answer on screen.
    with page.expect_response(lambda response: "seq_len=abc" in response.url):
        page.fill("#f-seq_len", "abc")
    expect(page.locator("#error-seq_len")).not_to_be_empty()
    assert parse_qs(urlparse(page.url).query)["seq_len"] == ["2048"]

    # Typing valid values replaces the entry rather than adding one per pause.
    for value in ("4096", "8192"):
        page.fill("#f-seq_len", value)
        _settle(page, "seq_len", value)
    assert page.evaluate("history.length") == start

    # A choice made adds one, so the way back steps through choices.
    page.select_option("#f-gpu", "a100-80gb")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("gpu") == ["a100-80gb"])
    assert page.evaluate("history.length") == start + 1
