"""Every rejection is a 422 that names the field, in FastAPI's own error shape; nothing becomes a 500.

What a message quotes of the input is cut to `MAX_ECHO_CHARS` characters, and a whole message to
`MAX_MESSAGE_CHARS`, so that a megabyte sent in a field does not come back in the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from http import HTTPStatus
from typing import Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app.core import DomainError

MAX_ECHO_CHARS: Final = 200
MAX_MESSAGE_CHARS: Final = 1000  # the longest a message says of its own (a list of known presets) is under 400
ELLIPSIS: Final = "…"
# A quoted value (as repr() writes it) longer than MAX_ECHO_CHARS. Character classes and possessive repeats keep
# the search linear in the message's length, whatever quotes and backslashes the input holds.
_LONG_QUOTE: Final = re.compile("|".join(rf"{q}([^{q}]{{{MAX_ECHO_CHARS}}})[^{q}]*+{q}" for q in "'\""))


def _shortened(match: re.Match[str]) -> str:
    quote = match[0][0]
    return f"{quote}{match[1] or match[2]}{ELLIPSIS}{quote}"


def cut(text: str) -> str:
    """`text` with each long quoted value cut to its first MAX_ECHO_CHARS characters, and then to
    MAX_MESSAGE_CHARS in all; whatever is cut ends in an ellipsis."""
    text = _LONG_QUOTE.sub(_shortened, text)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS] + ELLIPSIS


def _loc(parts: Iterable[object]) -> list[object]:
    """A location with each name no longer than MAX_ECHO_CHARS (a key of the body may be anything)."""
    return [part[:MAX_ECHO_CHARS] + ELLIPSIS if isinstance(part, str) and len(part) > MAX_ECHO_CHARS else part
            for part in parts]


def domain_error_detail(error: DomainError) -> list[dict[str, object]]:
    """The DomainError as a FastAPI-style detail list: loc is the body path of the field at fault."""
    return [{"loc": _loc(["body", *error.field.split(".")]), "msg": cut(error.message), "type": error.kind}]


def validation_error_detail(errors: list[dict]) -> list[dict[str, object]]:
    """Schema errors with their location, message and type.

    The offending input is not echoed back: it may be a value JSON cannot carry (NaN, infinity)
    that a lenient parser accepted, and the field's location already says which one it was.
    """
    return [{"loc": _loc(_untagged(error.get("loc", ()))), "msg": cut(str(error.get("msg", ""))),
             "type": str(error.get("type", ""))} for error in errors]


# The tags of a field that takes one of several shapes (schemas.GpuIn: an id or a custom GPU): the schema's
# validator puts them in the location, which names the body's fields only.
_BRANCH_TAGS: Final = {("gpu", "id"), ("gpu", "custom")}


def _untagged(loc: Iterable[object]) -> list[object]:
    parts = list(loc)
    return [part for i, part in enumerate(parts) if not (i and (parts[i - 1], part) in _BRANCH_TAGS)]


def http_error_response(error: HTTPException) -> JSONResponse:
    """An HTTP error (no such address, a method the address does not take) in the same shape as a 422."""
    status = HTTPStatus(error.status_code)
    loc = {HTTPStatus.NOT_FOUND: "path", HTTPStatus.METHOD_NOT_ALLOWED: "method"}.get(status, "request")
    detail = [{"loc": [loc], "msg": cut(str(error.detail)), "type": status.phrase.lower().replace(" ", "_")}]
    return JSONResponse(status_code=status, content={"detail": detail}, headers=error.headers)


async def _domain_error_handler(request: Request, error: DomainError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": domain_error_detail(error)})


async def _validation_error_handler(request: Request, error: RequestValidationError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": validation_error_detail(list(error.errors()))})


def install_error_handlers(application: FastAPI) -> None:
    # Starlette types a handler as taking any Exception, though it calls each with the class it is registered for.
    application.add_exception_handler(DomainError, _domain_error_handler)  # type: ignore[arg-type]
    application.add_exception_handler(RequestValidationError, _validation_error_handler)  # type: ignore[arg-type]
