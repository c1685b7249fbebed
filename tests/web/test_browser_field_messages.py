"""Messages at a field in a real Chromium: they move no input, and an empty config.json is waited for, not an error."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, ViewportSize, expect

pytestmark = pytest.mark.browser

BOXES = """() => Object.fromEntries(Array.from(document.querySelectorAll('#calc input[type=text], #calc select, #calc textarea'))
  .filter((e) => e.offsetParent !== null)
  .map((e) => { const r = e.getBoundingClientRect(); return [e.id, [r.x, r.y + window.scrollY, r.width, r.height]]; }))"""


@pytest.mark.parametrize("viewport", [ViewportSize(width=1366, height=900), ViewportSize(width=390, height=844)])
@pytest.mark.parametrize(("field", "bad", "said"), [
    ("micro_batch_size", "0", "Micro-batch size must be at least 1."),
    ("seq_len", "lots", "Enter a number, e.g. 4096 or 4k"),
    ("data", "0", "Data parallel must be at least 1."),
])
def test_a_message_moves_no_input(watched: Page, base_url: str, viewport: ViewportSize, field: str, bad: str, said: str):
    page = watched
    page.set_viewport_size(viewport)
    page.goto(base_url + "/?preset=llama-3-8b")
    before = page.evaluate(BOXES)
    page.fill(f"#f-{field}", bad)
    expect(page.locator(f"#error-{field}")).to_contain_text(said)
    after = page.evaluate(BOXES)
    assert before.keys() == after.keys()
    moved = {name: (before[name], after[name]) for name in before
             if max(abs(a - b) for a, b in zip(before[name], after[name], strict=True)) > 0.5}
    assert moved == {}
    message = page.locator(f"#error-{field}").bounding_box()
    assert message is not None and message["x"] >= 0 and message["x"] + message["width"] <= viewport["width"]


def test_an_empty_config_json_is_waited_for_not_refused(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?preset=llama-3-8b")
    page.check("input[name=source][value=config]")
    status = page.locator("#results-status")
    expect(status).to_contain_text("Waiting for")
    expect(status).to_contain_text("Paste a model's config.json")
    expect(page.locator("#error-hf_config")).to_have_text("")
    expect(page.locator("#f-hf_config")).not_to_have_attribute("aria-invalid", "true")
    page.fill("#f-hf_config", "{")  # text that is not a config is an error at the field
    expect(page.locator("#error-hf_config")).not_to_have_text("")
    expect(page.locator("#f-hf_config")).to_have_attribute("aria-invalid", "true")


def test_a_sequence_length_in_scientific_notation(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?preset=llama-3-8b")
    page.fill("#f-seq_len", "1e5")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("seq_len") == ["1e5"])
    expect(page.locator("#error-seq_len")).to_have_text("")
    expect(page.locator("#summary")).to_contain_text("Does not fit")
