"""The HTML answer for an address or a method the site does not have (the API answers these in JSON)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from app.web.pages import templates


def error_page(request: Request, error: HTTPException) -> HTMLResponse:
    """A short page saying what went wrong, with a way back to the calculator."""
    return templates.TemplateResponse(request, "error.html", {"status": error.status_code, "message": error.detail},
                                      status_code=error.status_code, headers=error.headers)
