"""The few Markdown forms the published reports use, as HTML: headings, paragraphs, lists, tables, images,
inline code, emphasis and links. Everything is escaped first; only these forms become markup.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Final

_CODE: Final = re.compile(r"`([^`]+)`")
_IMAGE: Final = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_LINK: Final = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_STRONG: Final = re.compile(r"\*\*(.+?)\*\*")
_EM: Final = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")
_HEADING: Final = re.compile(r"^(#{1,6})\s+(.*)$")
_ITEM: Final = re.compile(r"^(\s*)(?:[-*]|\d+\.)\s+(.*)$")
_SAFE_URL: Final = re.compile(r"^(?:https?://|/|#|[\w.-]+(?:/[\w.-]+)*(?:#[\w-]*)?$)")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def inline(text: str, url: Callable[[str], str]) -> str:
    """One line of Markdown as HTML; `url` maps a link or image target (e.g. to where the file is served)."""
    codes: list[str] = []

    def keep_code(match: re.Match[str]) -> str:
        codes.append(f"<code>{html.escape(match.group(1))}</code>")
        return f"\x00{len(codes) - 1}\x00"

    out = html.escape(_CODE.sub(keep_code, text), quote=True)

    def image(match: re.Match[str]) -> str:
        src = html.unescape(match.group(2))
        if not _SAFE_URL.match(src):
            return match.group(0)
        return f'<img src="{html.escape(url(src))}" alt="{match.group(1)}" loading="lazy">'

    def link(match: re.Match[str]) -> str:
        href = html.unescape(match.group(2))
        if not _SAFE_URL.match(href):
            return match.group(0)
        return f'<a href="{html.escape(url(href))}">{match.group(1)}</a>'

    out = _IMAGE.sub(image, out)
    out = _LINK.sub(link, out)
    out = _STRONG.sub(r"<strong>\1</strong>", out)
    out = _EM.sub(r"<em>\1</em>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], out)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def to_html(text: str, *, url: Callable[[str], str] = lambda target: target) -> str:
    """A Markdown document as HTML (headings get ids from their text, for links within the page)."""
    lines = text.splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        if not lines[index].strip():
            index += 1
            continue
        block, index = _block(lines, index, url)
        out.append(block)
    return "\n".join(out)


Block = tuple[str, int]  # a block's HTML, and the index of the line after it


def _block(lines: list[str], index: int, url: Callable[[str], str]) -> Block:
    """The block that starts at lines[index]: a heading, a table, a list or a paragraph."""
    line = lines[index]
    heading = _HEADING.match(line)
    if heading:
        level, title = len(heading.group(1)), heading.group(2).strip()
        return f'<h{level} id="{_slug(title)}">{inline(title, url)}</h{level}>', index + 1
    if line.lstrip().startswith("|"):
        block = []
        while index < len(lines) and lines[index].lstrip().startswith("|"):
            block.append(lines[index])
            index += 1
        return _table(block, url), index
    if _ITEM.match(line):
        return _list(lines, index, url)
    return _paragraph(lines, index, url)


def _list(lines: list[str], index: int, url: Callable[[str], str]) -> Block:
    """A list up to the next blank line; a line that is not an item continues the item before it."""
    items: list[str] = []
    ordered = lines[index].lstrip()[0].isdigit()
    while index < len(lines) and lines[index].strip():
        item = _ITEM.match(lines[index])
        if item:
            items.append(item.group(2))
        elif items:
            items[-1] += " " + lines[index].strip()
        index += 1
    tag = "ol" if ordered else "ul"
    return f"<{tag}>" + "".join(f"<li>{inline(item, url)}</li>" for item in items) + f"</{tag}>", index


def _paragraph(lines: list[str], index: int, url: Callable[[str], str]) -> Block:
    """Lines up to a blank line, a heading, a table or a list item."""
    paragraph: list[str] = []
    while (index < len(lines) and lines[index].strip() and not _HEADING.match(lines[index])
           and not lines[index].lstrip().startswith("|") and not (paragraph and _ITEM.match(lines[index]))):
        paragraph.append(lines[index].strip())
        index += 1
    return f"<p>{inline(' '.join(paragraph), url)}</p>", index


def _table(block: list[str], url: Callable[[str], str]) -> str:
    rows = [_cells(line) for line in block]
    header, body = rows[0], rows[1:]
    if body and all(re.fullmatch(r":?-{2,}:?", cell) for cell in body[0]):
        body = body[1:]
    head = "".join(f'<th scope="col">{inline(cell, url)}</th>' for cell in header)
    rows_html = "".join("<tr>" + "".join(f"<td>{inline(cell, url)}</td>" for cell in row) + "</tr>" for row in body)
    return f'<div class="table-scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table></div>'
