"""Caveats in the order they matter: what is news about this setup in view, the general notes folded after it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

ADAM = "The often-quoted 16 bytes per parameter for Adam"
PEAK = "the sum of every buffer is an upper bound that never happens"
EAGER = "Eager attention stores the s × s score matrix"


def test_general_notes_wait_behind_a_disclosure(watched: Page, base_url: str):
    page = watched
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "/?method=qlora&precision=bf16")
    general = page.locator("#general-caveats")
    expect(general).to_have_count(1)
    expect(general.locator("summary")).to_be_visible()
    expect(general.get_by_text(ADAM)).to_be_hidden()
    expect(general.get_by_text(PEAK)).to_be_hidden()
    # Nothing is news about this setup: no caveat leads the explanation.
    expect(page.locator("#caveats")).to_have_count(0)
    general.locator("summary").click()
    expect(general.get_by_text(ADAM)).to_be_visible()
    expect(general.get_by_text(PEAK)).to_be_visible()


def test_a_setup_specific_caveat_comes_first_and_in_view(watched: Page, base_url: str):
    page = watched
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(base_url + "/?seq_len=8192")
    expect(page.locator("#caveats")).to_have_count(0)
    page.locator('input[name="attention"][value="eager"]').check()
    first = page.locator("#caveats li").first
    expect(first).to_contain_text(EAGER)
    expect(first).to_be_visible()
    expect(page.locator("#caveats")).not_to_contain_text(ADAM)
    expect(page.locator("#general-caveats")).not_to_have_attribute("open", "")


def test_the_extra_per_gpu_says_none_is_set_at_its_default(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/")
    row = page.locator("#explain-temporary-group li", has_text="Extra per GPU")
    expect(row).to_contain_text("none set")
    expect(page.locator("#explanation")).not_to_contain_text("set by you")
    page.goto(base_url + "/?framework_overhead_bytes=512+MiB")
    expect(page.locator("#explain-temporary-group li", has_text="Extra per GPU")).to_contain_text("set by you")
