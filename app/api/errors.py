"""Every rejection is a 422 that names the field, in FastAPI's own error shape; nothing becomes a 500."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.core import DomainError


def domain_error_detail(error: DomainError) -> list[dict[str, object]]:
    """The DomainError as a FastAPI-style detail list: loc is the body path of the field at fault."""
    return [{"loc": ["body", *error.field.split(".")], "msg": error.message, "type": "value_error"}]


async def _domain_error_handler(request: Request, error: DomainError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": domain_error_detail(error)})


def install_error_handlers(application: FastAPI) -> None:
    application.add_exception_handler(DomainError, _domain_error_handler)
