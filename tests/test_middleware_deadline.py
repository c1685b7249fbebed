"""The per-request deadline of `middleware.Guard`, on a small app with deliberately slow routes: the client hears a
503 at the deadline while a worker thread runs on, and the event loop stays free for everyone else."""

from __future__ import annotations

import asyncio
import time

import httpx
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.routing import Route

from app.main import create_app
from app.middleware import REQUEST_DEADLINE_S, Guard
from app.web.errors import refusal_page

DEADLINE_S = 0.2
SLOW_S = 1.0


def _sleep_in_thread(request):
    time.sleep(SLOW_S)  # a sync endpoint: Starlette runs it in a worker thread, which cannot be stopped
    return JSONResponse({"late": True})


async def _sleep_on_loop(request):
    await asyncio.sleep(SLOW_S)
    return JSONResponse({"late": True})


async def _fast(request):
    return JSONResponse({"ok": True})


def _page_in_thread(request):
    time.sleep(SLOW_S)
    return HTMLResponse("<p>late</p>")


async def _streams_slowly(request):
    async def parts():
        yield b"begun "
        await asyncio.sleep(2 * DEADLINE_S)
        yield b"and done"
    return StreamingResponse(parts())


def _app() -> Guard:
    routes = [Route("/api/thread", _sleep_in_thread), Route("/api/loop", _sleep_on_loop), Route("/api/fast", _fast),
              Route("/page", _page_in_thread), Route("/api/stream", _streams_slowly),
              Route("/healthz", _sleep_on_loop)]
    return Guard(Starlette(routes=routes), deadline_s=DEADLINE_S, page=refusal_page)


async def _timed(client: httpx.AsyncClient, path: str) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    response = await client.get(path)
    return response, time.perf_counter() - start


def _run(main):
    async def with_client():
        guard = _app()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://test") as client:
            return await main(client, guard)
    return asyncio.run(with_client())


def test_a_handler_in_a_thread_past_the_deadline_is_a_503_at_the_deadline_and_the_loop_stays_free():
    async def main(client, guard):
        slow = asyncio.create_task(_timed(client, "/api/thread"))
        await asyncio.sleep(DEADLINE_S / 4)
        fast, fast_s = await _timed(client, "/api/fast")
        response, elapsed = await slow
        still_counted = guard.in_flight
        await asyncio.sleep(SLOW_S)  # the thread ends; its answer goes nowhere
        return fast, fast_s, response, elapsed, still_counted, guard.in_flight

    fast, fast_s, response, elapsed, still_counted, finally_counted = _run(main)
    assert fast.status_code == 200 and fast_s < DEADLINE_S / 2
    assert response.status_code == 503 and DEADLINE_S <= elapsed < DEADLINE_S + 0.3, elapsed
    assert response.headers["retry-after"] == "1" and response.headers["content-type"] == "application/json"
    detail = response.json()["detail"]
    assert detail == [{"loc": ["request"], "msg": f"no answer within {DEADLINE_S:g} s: try again in 1 s",
                       "type": "service_unavailable"}]
    assert (still_counted, finally_counted) == (1, 0)  # in flight until the thread has really ended


def test_an_async_handler_past_the_deadline_is_a_503_too():
    response, elapsed = _run(lambda client, guard: _timed(client, "/api/loop"))
    assert response.status_code == 503 and elapsed < DEADLINE_S + 0.3


def test_a_page_past_the_deadline_answers_a_page():
    response, _ = _run(lambda client, guard: _timed(client, "/page"))
    assert response.status_code == 503 and response.headers["content-type"].startswith("text/html")
    assert "503 Service Unavailable" in response.text and "No answer within 0.2 s" in response.text
    assert '<a href="/">' in response.text


def test_an_answer_already_begun_runs_to_its_end():
    response, elapsed = _run(lambda client, guard: _timed(client, "/api/stream"))
    assert response.status_code == 200 and response.text == "begun and done" and elapsed >= 2 * DEADLINE_S


def test_healthz_has_no_deadline():
    response, elapsed = _run(lambda client, guard: _timed(client, "/healthz"))
    assert response.status_code == 200 and elapsed >= SLOW_S


def test_the_app_has_the_deadline_and_refuses_pages_with_a_page():
    application = create_app()
    guard = next(entry for entry in application.user_middleware if entry.cls is Guard)
    assert guard.kwargs.get("deadline_s", REQUEST_DEADLINE_S) == REQUEST_DEADLINE_S <= 10
    guard.kwargs["max_in_flight"] = 0
    with TestClient(application) as busy:
        page, api = busy.get("/"), busy.get("/api/v1/gpus")
    assert page.status_code == api.status_code == 503
    assert page.headers["content-type"].startswith("text/html") and "Try again in 1 s" not in page.text
    assert "The service is at its limit" in page.text and page.headers["retry-after"] == "1"
    assert api.json()["detail"][0]["type"] == "service_unavailable"


def test_a_request_cancelled_by_the_server_stopping_is_a_503_not_a_500():
    """uvicorn cancels what still runs when its grace period ends; the client hears 503, and nothing is raised."""
    async def main(client, guard):
        request = asyncio.create_task(client.get("/api/thread"))
        await asyncio.sleep(DEADLINE_S / 4)
        request.cancel()
        response = await request
        await asyncio.sleep(SLOW_S)
        return response

    response = _run(main)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["detail"][0]["msg"] == "the service is restarting: try again in 1 s"
