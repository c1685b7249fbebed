"""The HTML answer for an address or a method the site does not have, or a request refused before any route ran
(the API answers these in JSON)."""

from __future__ import annotations

from http import HTTPStatus

from fastapi import Request
from fastapi.responses import HTMLResponse
from starlette.exceptions import HTTPException

from app.web.pages import templates


def error_page(request: Request, error: HTTPException) -> HTMLResponse:
    """A short page saying what went wrong, with a way back to the calculator."""
    return templates.TemplateResponse(request, "error.html", {"status": error.status_code, "message": error.detail},
                                      status_code=error.status_code, headers=error.headers)


def refusal_page(status: int, explanation: str) -> str:
    """The same page for a refusal of `middleware.Guard` (a body too large or too slow, a busy or stopping
    service), which answers before there is a request object to render with."""
    sentence = explanation[:1].upper() + explanation[1:] + "."
    return templates.get_template("error.html").render(status=status, message=HTTPStatus(status).phrase,
                                                       explanation=sentence)
