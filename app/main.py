"""The trainmem application: the JSON API and the calculator page around one pure memory model."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.middleware.gzip import GZipMiddleware

from app.api.errors import http_error_response, install_error_handlers
from app.api.v1 import router as api_v1_router
from app.middleware import GZIP_LEVEL, GZIP_MINIMUM_BYTES, Guard, Headers
from app.web.assets import Assets
from app.web.docs import router as docs_router
from app.web.errors import error_page, refusal_page
from app.web.pages import router as pages_router

ROOT_DIR = Path(__file__).resolve().parent.parent
STATIC_DIR = ROOT_DIR / "static"


def create_app() -> FastAPI:
    application = FastAPI(
        title="trainmem",
        version="1.0.0",
        summary="How much GPU memory a training job takes, where it goes, and whether it fits.",
        description=(
            "All memory figures are integers in bytes. Per-GPU figures are for the most-loaded rank; "
            "cluster figures are the sum over every rank."
        ),
        docs_url=None,  # served by app.web.docs from the vendored Swagger UI
        redoc_url=None,
        redirect_slashes=False,  # Starlette builds that redirect from the Host header: /static/ is a 404 instead
    )
    install_error_handlers(application)

    # No such address or method: JSON in the API's error shape under /api/, a page everywhere else.
    async def http_error(request: Request, error: HTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return http_error_response(error)
        return error_page(request, error)

    application.add_exception_handler(HTTPException, http_error)  # type: ignore[arg-type]
    application.include_router(api_v1_router)
    application.include_router(pages_router)
    application.include_router(docs_router)
    application.mount("/static", Assets(directory=STATIC_DIR), name="static")

    # On the event loop, not a worker thread: it answers even while every thread runs a solve or a sweep.
    @application.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # Outermost last: headers on everything (refusals included), then compression, then the bounds.
    application.add_middleware(Guard, page=refusal_page)
    application.add_middleware(GZipMiddleware, minimum_size=GZIP_MINIMUM_BYTES, compresslevel=GZIP_LEVEL)
    application.add_middleware(Headers)
    return application


app = create_app()
