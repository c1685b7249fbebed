"""The API documentation and the validation report in a real browser, offline and under the site's CSP."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser


def _csp_violations(page: Page) -> list[str]:
    seen: list[str] = []
    page.on("console", lambda message: seen.append(message.text) if "Content Security Policy" in message.text else None)
    return seen


def test_swagger_ui_renders_every_endpoint_from_this_origin(page: Page, base_url: str):
    violations = _csp_violations(page)
    outside: list[str] = []
    page.on("request", lambda request: outside.append(request.url) if not request.url.startswith(base_url)
            and not request.url.startswith("data:") else None)
    page.goto(f"{base_url}/docs")
    page.wait_for_selector(".opblock")
    # Each path is shown from its data attribute (static/app.css), not as a link inside the operation's button.
    paths = page.locator(".opblock-summary-path").evaluate_all(
        "spans => spans.map(s => getComputedStyle(s, '::after').content.replace(/^\"|\"$/g, ''))")
    assert {"/api/v1/estimate", "/api/v1/solve", "/api/v1/sweep", "/api/v1/presets", "/api/v1/gpus"} <= set(paths)
    assert not outside and not violations


def test_the_validation_report_is_a_readable_page(page: Page, base_url: str):
    violations = _csp_violations(page)
    page.goto(f"{base_url}/validation")
    assert page.locator("h1").first.inner_text().startswith("Validation")
    assert page.locator("table").count() >= 3
    chart = page.locator('img[src="/validation/timeline-llama-3-8b.svg"]')
    chart.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=chart.element_handle())
    assert not violations
