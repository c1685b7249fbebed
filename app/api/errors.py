"""Every rejection is a 422 that names the field, in FastAPI's own error shape; nothing becomes a 500."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.core import DomainError


def domain_error_detail(error: DomainError) -> list[dict[str, object]]:
    """The DomainError as a FastAPI-style detail list: loc is the body path of the field at fault."""
    return [{"loc": ["body", *error.field.split(".")], "msg": error.message, "type": "value_error"}]


def validation_error_detail(errors: list[dict]) -> list[dict[str, object]]:
    """Schema errors with their location, message and type.

    The offending input is not echoed back: it may be a value JSON cannot carry (NaN, infinity)
    that a lenient parser accepted, and the field's location already says which one it was.
    """
    return [{"loc": list(error.get("loc", ())), "msg": str(error.get("msg", "")), "type": str(error.get("type", ""))}
            for error in errors]


async def _domain_error_handler(request: Request, error: DomainError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": domain_error_detail(error)})


async def _validation_error_handler(request: Request, error: RequestValidationError) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": validation_error_detail(list(error.errors()))})


def install_error_handlers(application: FastAPI) -> None:
    # Starlette types a handler as taking any Exception, though it calls each with the class it is registered for.
    application.add_exception_handler(DomainError, _domain_error_handler)  # type: ignore[arg-type]
    application.add_exception_handler(RequestValidationError, _validation_error_handler)  # type: ignore[arg-type]
