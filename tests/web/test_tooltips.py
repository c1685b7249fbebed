"""The help beside each label ("?"): on screen on a phone, closed by Escape or a click elsewhere, out of the tab order
until opened yet read by a screen reader and opened from the keyboard, and written in the page's words."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

EVERY_FIELD = "/?source=custom"  # the architecture's fields too


def _tip(page: Page, label: str):
    return page.locator("details.tip", has=page.locator("summary", has_text=re.compile(f"About {re.escape(label)}$")))


@pytest.mark.parametrize("width", [320, 360, 390])
def test_every_help_text_opens_on_screen_on_a_phone(watched: Page, base_url: str, width: int):
    page = watched
    page.set_viewport_size({"width": width, "height": 844})
    page.goto(base_url + EVERY_FIELD)
    page.evaluate("document.querySelectorAll('#inputs details.more').forEach(d => { d.open = true; })")
    boxes = page.evaluate("""() => [...document.querySelectorAll('#inputs details.tip')]
        .filter(tip => tip.offsetParent !== null)
        .map(tip => { tip.open = true; const r = tip.querySelector('p').getBoundingClientRect(); tip.open = false;
                      return [tip.querySelector('.sr-only').textContent, r.left, r.right]; })""")
    assert len(boxes) > 40
    assert [box for box in boxes if box[1] < 0 or box[2] > width] == []
    # Tapped, the one beside the sequence length opens within the screen.
    tip = _tip(page, "Sequence length")
    tip.locator("summary").click()
    box = tip.locator("p").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_escape_and_a_click_elsewhere_close_the_help(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/")
    seq = _tip(page, "Sequence length")
    seq.locator("summary").click()
    expect(seq.locator("p")).to_be_visible()
    page.keyboard.press("Escape")
    expect(seq.locator("p")).to_be_hidden()
    expect(page.locator("#f-seq_len")).to_be_focused()

    seq.locator("summary").click()
    expect(seq.locator("p")).to_be_visible()
    page.locator(".masthead h1").click()
    expect(seq.locator("p")).to_be_hidden()

    # One open at a time.
    seq.locator("summary").click()
    optimizer = _tip(page, "Optimizer")
    optimizer.locator("summary").click()
    expect(optimizer.locator("p")).to_be_visible()
    expect(seq.locator("p")).to_be_hidden()


def test_the_help_is_out_of_the_tab_order_yet_reached_from_its_control(watched: Page, base_url: str):
    page = watched
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "/")
    page.locator("body").focus()
    stops = []
    for _ in range(150):
        page.keyboard.press("Tab")
        stop = page.evaluate("() => [document.activeElement.id, !!document.activeElement.closest('details.tip')]")
        stops.append(stop)
        if stop[0] == "f-gpu":
            break
    assert stops[-1][0] == "f-gpu", stops
    assert not any(in_tip for _, in_tip in stops), "a help '?' is a tab stop"

    # A screen reader reads the help with the control; "?" typed in the control opens it, Escape closes it.
    seq = page.locator("#f-seq_len")
    expect(seq).to_have_accessible_description(re.compile(r"^Tokens per sequence"))
    expect(page.locator("#f-optimizer")).to_have_accessible_description(re.compile("Optimizer whose state"))
    value = seq.input_value()
    seq.focus()
    page.keyboard.press("?")
    tip = _tip(page, "Sequence length")
    expect(tip.locator("p")).to_be_visible()
    assert seq.input_value() == value
    expect(seq).to_be_focused()
    # Opened, its "?" is a stop again (Shift+Tab reaches it); moving to another field closes it.
    # (the page sets it on the details' toggle event, which the browser fires after the open state changes)
    expect(tip.locator("summary")).to_have_attribute("tabindex", "0")
    page.keyboard.press("Escape")
    expect(tip.locator("p")).to_be_hidden()
    expect(tip.locator("summary")).to_have_attribute("tabindex", "-1")
    page.keyboard.press("?")
    expect(tip.locator("p")).to_be_visible()
    page.locator("#f-micro_batch_size").focus()
    expect(tip.locator("p")).to_be_hidden()
    # A radio group is described as a whole.
    page.locator('input[name="attention"]:checked').focus()
    page.keyboard.press("?")
    expect(_tip(page, "Attention kernel").locator("p")).to_be_visible()


def test_the_help_speaks_the_page_words_not_the_api(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + EVERY_FIELD)
    names = set(page.evaluate("[...document.querySelectorAll('#calc [name]')].map(e => e.name)"))
    names |= {"num_params", "attention_kernel", "first_stage_layers", "last_stage_layers", "expert_tensor"}
    ids = sorted((name for name in names if "_" in name), key=len, reverse=True)
    # An id of the page's or the API's own, or an API path; "peft's LoraConfig.lora_dropout" names peft's.
    api = re.compile(r"/api/|\bGET\b|\bnull\b|\b(?:training|parallelism|model|finetuning|precision)\.\w"
                     r"|(?<![.\w])(?:" + "|".join(map(re.escape, ids)) + r")\b")
    texts = page.locator("details.tip > p").all_text_contents()
    assert len(texts) > 50
    assert [(text, api.findall(text)) for text in texts if api.search(text)] == []
    # Every "?" names what it is about.
    assert "About " not in page.locator("details.tip summary .sr-only").all_text_contents()
