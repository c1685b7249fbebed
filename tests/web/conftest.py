"""Browser fixtures: the app on a loopback port in a background thread, and Debian's Chromium for Playwright."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import ConsoleMessage, Page, Request

from app.main import app

CHROMIUM = os.environ.get("TRAINMEM_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="session")
def base_url(live_server: str) -> str:
    return live_server


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set TRAINMEM_CHROMIUM)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS, "headless": True}


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def _unexplained(problems: list[str]) -> list[str]:
    """The problems, less those of requests htmx aborted on purpose.

    The form's hx-sync="this:replace" aborts a request still in flight when the next edit comes,
    and htmx logs each abort as two console errors (afterRequest, then sendAbort). Those are by
    design; any other error, or an afterRequest without its abort (a failed request), remains.
    """
    aborts = sum(1 for problem in problems if problem.startswith("console: htmx:sendAbort"))
    kept = []
    for problem in problems:
        if problem.startswith("console: htmx:sendAbort"):
            continue
        if aborts and problem.startswith("console: htmx:afterRequest"):
            aborts -= 1
            continue
        kept.append(problem)
    return kept


@pytest.fixture
def watched(page: Page, base_url: str):
    """The page, with every console error, page error and off-origin request recorded; none may happen."""
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console: {message.text}")

    def on_request(request: Request) -> None:
        if not request.url.startswith((base_url, "data:")):
            problems.append(f"off-origin: {request.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("request", on_request)
    yield page
    assert _unexplained(problems) == []
