"""The validation report as a page: a table of contents, and nothing a keyboard or a screen reader cannot reach.

The checks that always run are those of axe-core's serious rules that this page can break, written out: a
region that scrolls can take the focus, whatever takes the focus without being a control has a role and a name,
every table is named, and headings go down one level at a time. axe-core itself runs too where it is in the
local npm cache (it is not part of the page, so nothing of it is kept in static/).
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Literal

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Browser, Page, ViewportSize

from app.main import app

CONTROLS = {"a", "button", "input", "select", "textarea", "summary"}
VIEWPORTS: dict[str, ViewportSize] = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}


class _Outline(HTMLParser):
    """The page's headings, table-of-contents links, focusable elements and tables, with their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[tuple[int, str]] = []  # (level, id)
        self.contents: list[str] = []  # the targets of the table of contents' links, in order
        self.focusable: list[tuple[str, dict[str, str]]] = []
        self.tables: list[tuple[dict[str, str], dict[str, str] | None]] = []  # (table, its wrapper)
        self.ids: set[str] = set()
        self._open: list[tuple[str, dict[str, str]]] = []
        self._in_nav = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if "id" in found:
            self.ids.add(found["id"])
        if tag in {"h1", "h2", "h3", "h4", "h5", "h6"}:
            self.headings.append((int(tag[1]), found.get("id", "")))
        if tag == "nav" and "toc" in found.get("class", "").split():
            self._in_nav = True
        if tag == "a" and self._in_nav:
            self.contents.append(found.get("href", ""))
        if "tabindex" in found and tag not in CONTROLS:
            self.focusable.append((tag, found))
        if tag == "table":
            self.tables.append((found, self._open[-1][1] if self._open else None))
        if tag not in {"img", "br", "meta", "link", "input", "hr"}:
            self._open.append((tag, found))

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav":
            self._in_nav = False
        while self._open:
            if self._open.pop()[0] == tag:
                break


@pytest.fixture(scope="module")
def outline() -> _Outline:
    response = TestClient(app).get("/validation")
    assert response.status_code == 200
    parsed = _Outline()
    parsed.feed(response.text)
    return parsed


def _named(attrs: dict[str, str], ids: set[str]) -> bool:
    if attrs.get("aria-label", "").strip():
        return True
    labelled_by = attrs.get("aria-labelledby", "").split()
    return bool(labelled_by) and all(ref in ids for ref in labelled_by)


def test_the_table_of_contents_links_to_every_section_in_order(outline: _Outline):
    sections = [f"#{ident}" for level, ident in outline.headings if level in (2, 3) and ident != "contents"]
    assert len(sections) >= 10
    assert outline.contents == sections


def test_headings_go_down_one_level_at_a_time(outline: _Outline):
    levels = [level for level, _ in outline.headings]
    assert levels[0] == 1 and levels.count(1) == 1
    for before, after in zip(levels, levels[1:], strict=False):
        assert after <= before + 1, f"h{before} followed by h{after}"


def test_whatever_takes_the_focus_without_being_a_control_has_a_role_and_a_name(outline: _Outline):
    assert outline.focusable, "the scrolling tables take the focus, so a keyboard can scroll them"
    for tag, attrs in outline.focusable:
        assert attrs.get("role"), f"<{tag} tabindex> without a role: {attrs}"
        assert _named(attrs, outline.ids), f"<{tag} tabindex> without a name: {attrs}"


def test_every_table_is_named(outline: _Outline):
    assert len(outline.tables) >= 3
    for table, wrapper in outline.tables:
        region = wrapper if wrapper and wrapper.get("role") == "region" else None
        assert _named(table, outline.ids) or (region and _named(region, outline.ids)), table


# A scrolling element's contents are out of a keyboard's reach unless it, or something in it, takes the focus.
UNREACHABLE_SCROLLERS = """() => [...document.querySelectorAll('body *')].filter(el => {
  const style = getComputedStyle(el);
  const scrolls = (/(auto|scroll)/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1)
    || (/(auto|scroll)/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1);
  const focusable = 'a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex="-1"])';
  return scrolls && !(el.matches(focusable) || el.querySelector(focusable));
}).map(el => el.outerHTML.slice(0, 120))"""


@pytest.mark.browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_every_scrolling_region_can_take_the_focus(browser: Browser, base_url: str, viewport: str,
                                                  scheme: Literal["light", "dark"]):
    context = browser.new_context(viewport=VIEWPORTS[viewport], color_scheme=scheme)
    page = context.new_page()
    page.goto(f"{base_url}/validation")
    assert page.evaluate(UNREACHABLE_SCROLLERS) == []
    context.close()


@pytest.mark.browser
def test_a_link_in_the_contents_brings_its_section_into_view(page: Page, base_url: str):
    page.set_viewport_size(VIEWPORTS["phone"])
    page.goto(f"{base_url}/validation")
    link = page.locator("nav.toc a").nth(4)
    target = link.get_attribute("href")
    assert target and target.startswith("#")
    link.click()
    page.wait_for_function("id => { const r = document.getElementById(id).getBoundingClientRect(); "
                           "return r.top >= -1 && r.top < innerHeight / 2; }", arg=target[1:])
