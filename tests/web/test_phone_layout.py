"""On a phone the inputs come first, under the verdict bar, which stays in view while they are edited; the details
follow them. On a desktop the inputs stay on the left of the result."""

from __future__ import annotations

import pytest
from playwright.sync_api import FloatRect, Locator, Page, ViewportSize, expect

pytestmark = pytest.mark.browser

PHONE: ViewportSize = {"width": 390, "height": 844}
SMALL_PHONE: ViewportSize = {"width": 320, "height": 568}
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
FIRST_INPUT = '#inputs input[name="source"]'


def _box(locator: Locator) -> FloatRect:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def _page_y(locator: Locator) -> float:
    return locator.evaluate("e => e.getBoundingClientRect().top + window.scrollY")


def _inside(box: FloatRect, viewport: ViewportSize) -> bool:
    return box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 0.5 \
        and box["y"] + box["height"] <= viewport["height"] + 0.5


def _apart(a: FloatRect, b: FloatRect) -> bool:
    return a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"]


@pytest.mark.parametrize("viewport", [PHONE, SMALL_PHONE], ids=["390", "320"])
def test_on_a_phone_the_inputs_come_first_under_the_verdict(watched: Page, base_url: str, viewport, artifacts_dir):
    page = watched
    page.set_viewport_size(viewport)
    page.goto(base_url + "/?gpu=h100-80gb")
    first = page.locator(FIRST_INPUT).first
    bar = page.locator("#verdict-bar")
    # The first input and the verdict, in the first screen.
    assert _page_y(first) + _box(first)["height"] <= viewport["height"], _page_y(first)
    expect(bar).to_be_visible()
    expect(bar).to_contain_text("fit")
    assert _inside(_box(bar), viewport) and _apart(_box(bar), _box(first))
    # The details follow the inputs.
    inputs_end = page.locator("#inputs").evaluate("e => e.getBoundingClientRect().bottom + window.scrollY")
    for details in ("#summary", "#answers", "#breakdown", "#timeline", "#explanation"):
        assert _page_y(page.locator(details)) >= inputs_end, details
    page.screenshot(path=artifacts_dir / f"phone-inputs-first-{viewport['width']}.png")

    # Further down the inputs, the verdict bar is still at the top of the screen, over no input, and follows edits.
    gpu = page.locator("#f-gpu")
    gpu.scroll_into_view_if_needed()
    gpu.focus()
    assert _inside(_box(bar), viewport) and _box(bar)["y"] < 5, _box(bar)
    assert _inside(_box(gpu), viewport) and _apart(_box(bar), _box(gpu))
    expect(bar).to_contain_text("Does not fit")
    gpu.select_option("b200-180gb")
    expect(bar).to_contain_text("Fits, with")
    expect(bar).to_be_visible()
    assert _inside(_box(bar), viewport)
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]


def test_on_a_desktop_the_inputs_stay_left_of_the_result(watched: Page, base_url: str):
    page = watched
    page.set_viewport_size(DESKTOP)
    page.goto(base_url + "/")
    inputs, results = _box(page.locator("#inputs")), _box(page.locator("#results"))
    assert inputs["x"] + inputs["width"] <= results["x"]
    assert abs(inputs["y"] - results["y"]) < 2
    expect(page.locator("#summary .verdict")).to_be_in_viewport()
    expect(page.locator("#verdict-bar")).to_be_hidden()


def test_the_keyboard_meets_the_inputs_in_the_order_they_are_shown(watched: Page, base_url: str):
    """Reordered in the markup, not by CSS: the first field is a few Tabs in, before any result's link."""
    page = watched
    page.set_viewport_size(PHONE)
    page.goto(base_url + "/")
    page.locator("body").focus()
    for _ in range(11):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.name === 'source'"):
            break
        assert not page.evaluate("!!document.activeElement.closest('#results')")
    else:
        pytest.fail("no input within 11 Tabs")
