"""A model by Hub id in a real Chromium: choosing Hub id shows its box, an id estimates through the stand-in Hub
(tests/conftest.py) with the server's setting on, and a missing model is said at the box."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Page, expect

from tests.api.test_hub import PARAMS, SMALL
from tests.hub_stand_in import StandInHub

pytestmark = pytest.mark.browser


def test_a_hub_id_estimates_through_the_hub(watched: Page, base_url: str, stand_in_hub: StandInHub):
    stand_in_hub.add("org/small", SMALL)
    page = watched
    page.goto(base_url + "/?preset=llama-3-8b&gpu=h100-80gb")
    box = page.locator("#f-hub")
    expect(box).to_be_hidden()
    page.locator("input[name=source][value=hub]").check()
    expect(box).to_be_visible()
    expect(page.locator("#results-status")).to_contain_text("Enter a model's Hub id")

    box.fill("org/small")
    page.wait_for_url(lambda url: parse_qs(urlparse(url).query).get("hub") == ["org/small"])
    expect(page.locator("#summary")).to_contain_text(f"{PARAMS:,}")
    expect(page.locator("#error-hub")).to_have_text("")
    assert stand_in_hub.downloads()[0] == "/org/small/resolve/main/config.json"

    box.fill("org/missing")  # refused at the box; the address keeps the model that estimated
    expect(page.locator("#error-hub")).to_contain_text("No model org/missing on the Hugging Face Hub")
    assert parse_qs(urlparse(page.url).query)["hub"] == ["org/small"]
    page.reload()
    expect(page.locator("#f-hub")).to_have_value("org/small")
    expect(page.locator("#summary")).to_contain_text(f"{PARAMS:,}")
