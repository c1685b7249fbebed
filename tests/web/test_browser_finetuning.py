"""Fine-tuning in a real Chromium: a preset link sets QLoRA in place, the verdict follows, the adapter controls appear."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def test_the_qlora_preset_link_changes_the_verdict_and_shows_the_trainable_count(watched: Page, base_url: str):
    page = watched
    page.goto(base_url + "/?seq_len=4096")
    headline = page.locator("#results .verdict-headline")
    expect(headline).to_contain_text("Does not fit")
    expect(page.locator("#results .trainable")).to_have_count(0)
    expect(page.locator("#f-rank")).to_be_hidden()
    page.evaluate("window.__sameDocument = true")

    page.locator("a.preset-link", has_text="QLoRA r=16 all-linear").click()
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("method") == ["qlora"])
    query = parse_qs(urlparse(page.url).query)
    assert query["target_modules"] == ["all-linear"] and query["seq_len"] == ["4096"]
    expect(headline).to_contain_text("Fits")
    expect(page.locator("#results .trainable")).to_contain_text("trainable of")
    expect(page.locator('input[name="method"][value="qlora"]')).to_be_checked()
    expect(page.locator("#f-rank")).to_be_visible()
    expect(page.locator("#f-rank")).to_have_value("16")
    expect(page.locator("#f-quantization")).to_be_visible()
    expect(page.locator("#f-frozen_layers")).to_be_hidden()
    assert page.evaluate("window.__sameDocument === true")  # applied in place, without a page load

    # Back to full fine-tuning by the radio: the adapter fields go, the freezing fields come.
    page.locator("label.pill", has_text="Full").click()
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("method") == ["full"])
    expect(page.locator("#f-rank")).to_be_hidden()
    expect(page.locator("#f-frozen_layers")).to_be_visible()
    expect(page.locator("#results .trainable")).to_have_count(0)


def test_a_common_setup_link_keeps_the_setup_edited_since_the_page_loaded(watched: Page, base_url: str):
    # The links were fixed when the page loaded: after choosing an RTX 4090, "QLoRA r=16 all-linear" switched back to
    # the H100 the page loaded with, and said it fit with 51 GiB to spare.
    page = watched
    page.goto(base_url + "/?gpu=h100-80gb")
    page.select_option("#f-gpu", "rtx-4090-24gb")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("gpu") == ["rtx-4090-24gb"])
    page.fill("#f-seq_len", "4096")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("seq_len") == ["4096"])
    link = page.locator("a.preset-link", has_text="QLoRA r=16 all-linear")
    expect(link).to_have_attribute("href", re.compile(r"gpu=rtx-4090-24gb"))
    expect(link).to_have_attribute("href", re.compile(r"seq_len=4096"))
    link.click()
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("method") == ["qlora"])
    query = parse_qs(urlparse(page.url).query)
    assert query["gpu"] == ["rtx-4090-24gb"] and query["seq_len"] == ["4096"]
    expect(page.locator("#f-gpu")).to_have_value("rtx-4090-24gb")
