"""The page in a real Chromium: live updates without navigation, the URL as state, errors inline, no JavaScript needed."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, Request, expect

pytestmark = pytest.mark.browser

OPTIMIZER = '#results [data-category="optimizer_states"]'
ACTIVATIONS = '#results [data-category="activations"]'
PEAK_LABEL = "#timeline .peak-label"


def _bytes(page: Page, selector: str) -> int:
    value = page.locator(selector).first.get_attribute("data-bytes")
    assert value is not None, selector
    return int(value)


def _mark_document(page: Page) -> None:
    """Leave a mark on this document; a navigation (full page load) would lose it."""
    page.evaluate("window.__sameDocument = true")


def _same_document(page: Page) -> bool:
    return page.evaluate("window.__sameDocument === true")


def test_first_load_desktop(watched: Page, base_url: str, artifacts_dir):
    page = watched
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "/")
    expect(page.locator("#results .verdict")).to_contain_text("fit")
    expect(page.locator("#f-preset")).to_have_value("llama-3-8b")
    expect(page.locator("#f-gpu")).to_have_value("h100-80gb")
    for category in ("weights", "gradients", "master_weights", "optimizer_states", "activations", "temporary"):
        expect(page.locator(f'#results [data-category="{category}"]').first).to_be_attached()
    expect(page.locator("#results .capacity").first).to_be_visible()
    expect(page.locator("#results")).to_have_attribute("aria-live", "polite")
    page.screenshot(path=artifacts_dir / "page-desktop.png", full_page=True)


def test_first_load_phone(watched: Page, base_url: str, artifacts_dir):
    page = watched
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(base_url + "/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # The verdict in its bar over the inputs, which come first (tests/web/test_phone_layout.py).
    bar = page.locator("#verdict-bar").bounding_box()
    assert bar is not None and bar["y"] < 300
    expect(page.locator("#verdict-bar")).to_contain_text("fit")
    chart = page.locator("#timeline svg").bounding_box()
    assert chart is not None and chart["x"] >= 0 and chart["x"] + chart["width"] <= 390
    page.screenshot(path=artifacts_dir / "page-phone.png", full_page=True)
    page.screenshot(path=artifacts_dir / "page-phone-top.png")


def test_dark_scheme(watched: Page, base_url: str, artifacts_dir):
    page = watched
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "/")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(255, 255, 255)"
    page.screenshot(path=artifacts_dir / "page-desktop-dark.png")


def test_sgd_shrinks_the_optimizer_segment_without_navigation_and_the_url_follows(watched: Page, base_url: str, browser):
    page = watched
    page.goto(base_url + "/")
    adamw = _bytes(page, OPTIMIZER)
    _mark_document(page)
    page.select_option("#f-optimizer", "sgd")
    expect(page.locator(OPTIMIZER).first).to_have_attribute("data-bytes", "0")
    assert _bytes(page, OPTIMIZER) < adamw
    assert _same_document(page)
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("optimizer") == ["sgd"])

    # A copied URL reopens the same calculation.
    reopened = browser.new_page()
    reopened.goto(page.url)
    expect(reopened.locator("#f-optimizer")).to_have_value("sgd")
    assert _bytes(reopened, OPTIMIZER) == 0
    assert reopened.locator("#results .totals").inner_text() == page.locator("#results .totals").inner_text()
    reopened.close()

    # Back and forward restore both the form and the result.
    page.go_back()
    expect(page.locator("#f-optimizer")).to_have_value("adamw")
    expect(page.locator(OPTIMIZER).first).to_have_attribute("data-bytes", str(adamw))
    page.go_forward()
    expect(page.locator("#f-optimizer")).to_have_value("sgd")
    expect(page.locator(OPTIMIZER).first).to_have_attribute("data-bytes", "0")


def test_typing_is_debounced_and_keyboard_only_works(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/")
    before = _bytes(page, ACTIVATIONS)
    requests: list[str] = []

    def on_request(request: Request) -> None:
        if request.url.startswith(base_url + "/?"):
            requests.append(request.url)

    page.on("request", on_request)
    page.focus("#f-seq_len")
    page.keyboard.press("Control+A")
    page.keyboard.type("8192", delay=30)
    expect(page.locator(ACTIVATIONS).first).not_to_have_attribute("data-bytes", str(before))
    assert _bytes(page, ACTIVATIONS) > before
    assert len(requests) == 1, requests
    # Moving on with Tab fires a change event with the same value: no second request, no extra history entry.
    page.keyboard.press("Tab")
    page.wait_for_timeout(600)
    assert len(requests) == 1, requests


def test_invalid_input_shows_its_message_and_keeps_the_last_result(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/")
    good = _bytes(page, OPTIMIZER)
    page.fill("#f-tensor", "3")
    message = page.locator("#error-tensor")
    expect(message).to_contain_text("divisible by the tensor-parallel degree (3)")
    expect(page.locator("#f-tensor")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#results-status")).to_contain_text("Out of date")
    assert _bytes(page, OPTIMIZER) == good
    page.fill("#f-tensor", "2")
    expect(message).to_be_empty()
    expect(page.locator("#results-status")).not_to_contain_text("Out of date")
    expect(page.locator("#f-tensor")).not_to_have_attribute("aria-invalid", "true")


def test_controls_appear_when_they_matter(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/")
    expect(page.locator("#f-zero_stage")).to_be_visible()  # ZeRO-Offload runs on one GPU too
    expect(page.locator("#f-expert")).to_be_hidden()
    page.fill("#f-data", "8")
    expect(page.locator("#f-expert")).to_be_visible()
    page.select_option("#f-zero_stage", "3")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("zero_stage") == ["3"])

    # Architecture: the fields start from the preset, and a new base model refills them.
    expect(page.locator("#f-num_hidden_layers")).to_be_hidden()
    page.locator("label.pill", has_text="Architecture").click()
    expect(page.locator("#f-num_hidden_layers")).to_be_visible()
    expect(page.locator("#f-num_hidden_layers")).to_have_value("32")
    page.select_option("#f-preset", "gpt2")
    expect(page.locator("#f-num_hidden_layers")).to_have_value("12")
    expect(page.locator("#results .totals")).to_contain_text("124,439,808")


def test_tooltips_open_on_tap(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/")
    tip = page.locator(".tip", has=page.locator("summary", has_text="About Sequence length"))
    tip.locator("summary").click()
    expect(tip.locator("p")).to_be_visible()


def test_without_javascript_the_form_submits_as_a_page(browser, base_url: str):
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(base_url + "/")
    assert _bytes(page, OPTIMIZER) > 0
    expect(page.locator(".submit-row button")).to_be_visible()
    page.select_option("#f-optimizer", "sgd")
    with page.expect_navigation():
        page.click(".submit-row button")
    assert parse_qs(urlparse(page.url).query)["optimizer"] == ["sgd"]
    assert _bytes(page, OPTIMIZER) == 0

    page.fill("#f-tensor", "3")
    with page.expect_navigation():
        page.click(".submit-row button")
    expect(page.locator("#error-tensor")).to_contain_text("divisible")
    context.close()


def _peak_size(label: str) -> str:
    found = re.search(r"peak: ([\d,]+\.\d\d GiB)", label)
    assert found, label
    return found.group(1)


def test_the_timeline_marks_the_peak_the_verdict_speaks_of_and_follows_the_form(watched: Page, base_url: str):
    page = watched
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "/")
    chart = page.locator('#timeline svg[role="img"]')
    expect(chart).to_be_visible()
    label = page.locator(PEAK_LABEL)
    expect(label).to_contain_text("peak: ")
    before = label.text_content()
    assert before is not None
    peak = _peak_size(before)
    expect(page.locator("#results .verdict-detail")).to_contain_text(f"its tensors take {peak}")
    expect(page.locator("#results .totals")).to_contain_text(peak)

    # A longer sequence: the chart is swapped in place (no navigation) and names a higher peak.
    _mark_document(page)
    page.fill("#f-seq_len", "8192")
    expect(label).not_to_have_text(before)
    assert _same_document(page)
    after = label.text_content()
    assert after is not None
    assert float(_peak_size(after).split()[0].replace(",", "")) > float(peak.split()[0].replace(",", ""))
    expect(page.locator("#results .verdict-detail")).to_contain_text(f"its tensors take {_peak_size(after)}")
    expect(page.locator(".attention-kernel")).to_contain_text("sdpa → flash")

    # The text alternative: every point as a table, reachable from the keyboard.
    page.locator("#timeline details summary").focus()
    page.keyboard.press("Enter")
    rows = page.locator("#timeline details tbody tr")
    expect(rows.first).to_be_visible()
    expect(page.locator("#timeline details tr.is-peak")).to_have_count(1)
    assert rows.count() == int(page.evaluate("document.querySelector('#timeline .total').points.numberOfItems"))


def test_the_memory_convention_is_refused_at_the_zero_stage_then_explained(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?data=8&zero_stage=1")
    expect(page.locator("#f-framework")).to_be_visible()
    page.select_option("#f-framework", "fsdp2")
    expect(page.locator("#error-zero_stage")).to_contain_text("choose ZeRO stage 3")
    expect(page.locator("#results-status")).to_contain_text("Out of date")
    page.select_option("#f-zero_stage", "3")
    expect(page.locator("#error-zero_stage")).to_be_empty()
    expect(page.locator("#explanation")).to_contain_text("FSDP2 convention")
    query = parse_qs(urlparse(page.url).query)
    assert (query["framework"], query["zero_stage"]) == (["fsdp2"], ["3"])


def test_expert_controls_appear_with_their_degrees(watched: Page, base_url: str):
    """The expert load shows once experts are split over GPUs; the expert-tensor degree once tensors are; both feed
    the answer and the URL."""
    page = watched
    page.goto(base_url + "/?preset=mixtral-8x7b&seq_len=4096&gpu=h100-80gb")
    expect(page.locator("#f-expert_load")).to_be_hidden()
    expect(page.locator("#f-expert_tensor")).to_be_hidden()
    page.fill("#f-data", "8")
    page.fill("#f-expert", "8")
    expect(page.locator("#f-expert_load")).to_be_visible()
    page.fill("#f-expert_load", "1.5")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("expert_load") == ["1.5"])
    expect(page.locator("#caveats")).to_contain_text("1.5 × the token copies of balanced routing")
    page.fill("#f-tensor", "8")
    expect(page.locator("#f-expert_tensor")).to_be_visible()
    page.fill("#f-expert_tensor", "1")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("expert_tensor") == ["1"])
    expect(page.locator("#explanation")).to_contain_text("expert tensor parallelism")
