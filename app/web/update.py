"""The htmx update: only the fragments that differ from those of the setup the page already shows.

Each update is the summary (the swap target) and, out of band, every other region of the result:
the verdict bar, the answers, the breakdown, the charts, the explanation, the field messages. Most
of them are often byte for byte what the page holds already. htmx sends the page's own address with
each request (``HX-Current-URL``), and the page pushes the setup into its address after every
answer it swaps in, so that address names the setup the page shows. The update then sends only
the fragments whose markup differs from that setup's, and the rest of the page is left alone.

That address is trusted only where the page is sure to hold its rendering: a valid setup at this
page's own path and host, in its query. After invalid input the address moves on but the last
result stays (``HX-Reswap: none``), so a setup that does not parse gets everything, as does any
address that is missing, unreadable or from elsewhere.

A fragment may have parts (the explanation's groups, the breakdown's bars, the sweeps' charts):
elements with ids that can be swapped alone. When a fragment changed but the markup around its
parts did not, only its changed parts are sent.

update.html marks where each fragment ends and where each part begins and ends; the marks are
HTML comments, read here and never sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from markupsafe import Markup

CUT: Final = "<!--cut-->"  # after each fragment
PART: Final = "<!--part-->"  # before each part
END: Final = "<!--/part-->"  # after each part
MARKS: Final = {"cut": Markup(CUT), "part": Markup(PART), "end": Markup(END)}  # for the templates

OOB: Final = ' hx-swap-oob="true"'
_PART: Final = re.compile(re.escape(PART) + "(.*?)" + re.escape(END), re.S)
_ID: Final = re.compile(r'<[a-zA-Z][^>]*?\sid="([^"]+)"')
_TAG: Final = re.compile(r"<[a-zA-Z][\w-]*")


@dataclass(frozen=True)
class Fragment:
    """One region of the update: its markup as sent whole, and its parts where it has them."""

    id: str
    html: str
    frame: str = ""  # the markup around the parts, each part left as a mark holding its id
    parts: Mapping[str, str] = field(default_factory=dict)  # part id -> its markup, to swap out of band


@dataclass(frozen=True)
class Update:
    """An update rendered for one setup: the swap target's markup (empty after invalid input) and the rest."""

    main: str
    fragments: tuple[Fragment, ...]
    swapped: bool  # whether htmx swaps it in (the setup is valid), so that the page then holds all of it

    @property
    def whole(self) -> str:
        return "".join([self.main, *(fragment.html for fragment in self.fragments)])


def _id(html: str) -> str:
    found = _ID.match(html)
    if found is None:
        raise ValueError(f"a fragment or part without an id: {html[:80]!r}")
    return found.group(1)


def _fragment(html: str) -> Fragment:
    parts: dict[str, str] = {}

    def mark(found: re.Match[str]) -> str:
        part = found.group(1)
        part_id = _id(part)
        parts[part_id] = _TAG.sub(lambda tag: tag.group(0) + OOB, part, count=1)
        return f"<!--part {part_id}-->"

    frame = _PART.sub(mark, html)
    return Fragment(_id(html), html.replace(PART, "").replace(END, ""), frame, parts)


def split(rendered: str, *, swapped: bool) -> Update:
    """The update rendered from update.html: the swap target first (where `swapped`), then the fragments."""
    chunks = [chunk.strip() for chunk in rendered.split(CUT)]
    chunks = [chunk for chunk in chunks if chunk]
    main = chunks.pop(0).replace(PART, "").replace(END, "") if swapped and chunks else ""
    return Update(main, tuple(_fragment(chunk) for chunk in chunks), swapped)


def changes(current: Update, shown: Update | None) -> str:
    """What to send for `current` to a page that shows `shown` (None: unknown, so everything).

    The swap target always comes (it holds the live region that announces the verdict); each other
    fragment only where the page lacks it or holds other markup, and then only its changed parts
    where the markup around them is the same.
    """
    if shown is None or not shown.swapped:
        return current.whole
    before = {fragment.id: fragment for fragment in shown.fragments}
    out = [current.main]
    for fragment in current.fragments:
        out.extend(_to_send(fragment, before.get(fragment.id)))
    return "".join(out)


def _to_send(fragment: Fragment, old: Fragment | None) -> list[str]:
    """Nothing where the page holds the same markup; the changed parts where only they differ; else the whole."""
    if old is not None and old.html == fragment.html:
        return []
    if old is not None and fragment.parts and old.frame == fragment.frame:
        return [html for part_id, html in fragment.parts.items() if old.parts[part_id] != html]
    return [fragment.html]


def shown_query(current_url: str | None, *, path: str, host: str | None) -> str | None:
    """The query of the page's address (``HX-Current-URL``) where it is this page's, else None.

    `path` is this page's path and `host` the request's Host (a trusted proxy's X-Forwarded-Host where the
    server names one, `app.serve.ProxyHeaders`). Anything else (no address, another path or host, not http,
    characters a browser would have escaped) is None, and the update is sent whole.
    """
    if not current_url or not current_url.isascii() or not current_url.isprintable() or " " in current_url:
        return None
    try:
        address = urlsplit(current_url)
    except ValueError:
        return None
    if address.scheme not in ("http", "https") or address.netloc != host or address.path != path:
        return None
    return address.query
