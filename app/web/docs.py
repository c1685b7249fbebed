"""Pages about the product rather than the calculation: the API's documentation and the validation report.

Both are served from this origin (Swagger UI is vendored in static/, pinned by version like htmx), so
they work offline and under the site's Content-Security-Policy: no inline script, no CDN.
"""

from __future__ import annotations

import dataclasses
import html
import re
from dataclasses import dataclass
from functools import cache
from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from app.configs import EXPORT_KINDS
from app.configs.export import export_config
from app.core import DomainError
from app.web.accuracy import DOCS_DIR, report_text
from app.web.form import parse_form
from app.web.links import TEMPLATES_DIR
from app.web.markdown import to_html

SWAGGER_UI: Final = "/static/swagger-ui-5.35.0"
REPORT_IMAGE: Final = re.compile(r"^[a-z0-9][a-z0-9.-]*\.svg$")
# In the report's HTML (app/web/markdown.py writes it): a heading, or the box a table scrolls in.
_TABLE: Final = re.compile(r'<div class="table-scroll">')
_HEADING_OR_TABLE: Final = re.compile(r'<h([1-6]) id="([^"]*)">(.*?)</h\1>|' + _TABLE.pattern)
_TAG: Final = re.compile(r"<[^>]+>")

templates = Jinja2Templates(directory=TEMPLATES_DIR)
router = APIRouter(include_in_schema=False)


@router.get("/export/{kind}")
def export_file(kind: str, request: Request) -> Response:
    """The page's setup (its query string) as a config file for a framework, downloaded (POST /api/v1/export)."""
    if kind not in EXPORT_KINDS:
        return Response(f"Unknown kind {kind[:40]!r}; one of {', '.join(EXPORT_KINDS)}", status_code=404,
                        media_type="text/plain; charset=utf-8")
    form = parse_form(request.query_params)
    if not form.ok or form.request is None:
        problems = "; ".join(f"{name}: {message}" for name, message in form.errors.items()) or "the setup is invalid"
        return Response(f"Nothing to export: {problems}", status_code=422, media_type="text/plain; charset=utf-8")
    body = form.request.model_dump(include={"model", "training", "parallelism", "finetuning", "gpu"})
    try:
        exported = export_config(body, kind)
    except DomainError as error:
        return Response(f"Nothing to export: {error.field}: {error.message}", status_code=422,
                        media_type="text/plain; charset=utf-8")
    media = "application/json" if exported["filename"].endswith(".json") else "application/yaml"
    return Response(exported["text"], media_type=f"{media}; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{exported["filename"]}"'})


@router.get("/docs", response_class=HTMLResponse)
def api_docs(request: Request) -> HTMLResponse:
    """Swagger UI for /openapi.json, from the vendored bundle."""
    return templates.TemplateResponse(request, "docs.html", {"swagger_ui": SWAGGER_UI})


@router.get("/redoc")
def redoc() -> RedirectResponse:
    """The API's documentation lives at /docs."""
    return RedirectResponse("/docs", status_code=301)


@dataclass(frozen=True)
class Section:
    level: int
    id: str
    title: str  # as plain text
    subsections: tuple[Section, ...] = ()


@dataclass(frozen=True)
class Report:
    """The report as the page shows it: its opening (the title and what precedes the first section), the table of
    contents, and the sections."""

    opening: str
    contents: tuple[Section, ...]
    body: str


@cache
def _report(text: str) -> Report:
    markup = to_html(text, url=lambda target: f"/validation/{target}" if REPORT_IMAGE.match(target) else target)
    markup, sections = _name_tables(markup)
    heading = re.search(r"<h2[ >]", markup)
    first = heading.start() if heading else len(markup)
    return Report(markup[:first], _contents(sections), markup[first:])


def _contents(sections: list[Section]) -> tuple[Section, ...]:
    """The sections (h2) with their subsections (h3), in order."""
    tops: list[Section] = []
    for section in sections:
        if section.level == 2:
            tops.append(section)
        elif section.level == 3 and tops:
            tops[-1] = dataclasses.replace(tops[-1], subsections=(*tops[-1].subsections, section))
    return tuple(tops)


def _name_tables(markup: str) -> tuple[str, list[Section]]:
    """Each table's scrolling box as a region a keyboard can focus (to scroll it), named after its section:
    "Activations, table 2 of 3". Returns the markup and its headings."""
    sections: list[Section] = []
    owners: list[int] = []  # per table, the index of its section (-1 before the first heading)
    for match in _HEADING_OR_TABLE.finditer(markup):
        if match.group(1):
            title = html.unescape(_TAG.sub("", match.group(3)))
            sections.append(Section(int(match.group(1)), match.group(2), title))
        else:
            owners.append(len(sections) - 1)
    names = iter(_table_names(sections, owners))
    return _TABLE.sub(lambda _: f'<div class="table-scroll" role="region" tabindex="0" '
                                f'aria-label="{html.escape(next(names))}">', markup), sections


def _table_names(sections: list[Section], owners: list[int]) -> list[str]:
    names = []
    for index, owner in enumerate(owners):
        title = sections[owner].title if owner >= 0 else "Report"
        total, nth = owners.count(owner), owners[: index + 1].count(owner)
        names.append(f"{title}, table {nth} of {total}" if total > 1 else f"{title}, table")
    return names


@router.get("/validation", response_class=HTMLResponse)
def validation_report(request: Request) -> HTMLResponse:
    """The validation report (method, full tables, worst errors) as published in docs/VALIDATION.md."""
    text = report_text()
    if text is None:
        return templates.TemplateResponse(request, "validation.html", {"report": None}, status_code=404)
    return templates.TemplateResponse(request, "validation.html", {"report": _report(text)})


@router.get("/validation/{name}")
def validation_image(name: str) -> Response:
    """A chart the report shows (docs/*.svg)."""
    path = DOCS_DIR / name
    if not REPORT_IMAGE.match(name) or not path.is_file():
        return Response("Not found", status_code=404, media_type="text/plain")
    return FileResponse(path, media_type="image/svg+xml")
