"""What every request and response passes through: bounds on what comes in, headers on what goes out.

Pure ASGI, so a refusal costs no parsing and no routing:
- `Guard`: a request body larger than 1 MiB is a 413; a body that has not arrived in full within
  `body_timeout_s` of the request's start is a 408 (a deadline for the whole body, so a client sending a
  byte now and then cannot hold a connection for long); a JSON body to the API is checked for size,
  nesting and number length before the framework parses it (`wire.loads_bounded`), a 422 in the API's
  error shape otherwise. At most `max_in_flight` requests are worked on at once (counted once their body
  is in, so slow senders do not take the places); beyond that a 503 with `Retry-After`. A request not
  answered within `deadline_s` of its body's arrival is a 503 with `Retry-After` too, and so is one still
  running when the server stops (its grace period over), unless the answer has begun. `/healthz` is never
  refused, so a health check passes while the service is busy. Refusals are JSON in the API's error
  shape under /api/, and the page `page` renders elsewhere.
- `Headers`: a strict Content-Security-Policy (scripts and styles from this origin only; style
  attributes allowed for the bars' widths), a Permissions-Policy that allows no device or sensor,
  nosniff, a referrer policy, no framing, on every response including refusals; caching that
  keeps versioned static files for good and pages not at all; and HEAD answered wherever GET is,
  with the GET's headers and no body.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any, Final

from app.core import DomainError
from app.wire import MAX_BODY_BYTES, loads_bounded

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Page = Callable[[int, str], str]  # the HTML page for a status and what went wrong

BODY_TIMEOUT_S: Final = 10.0
# Every route answers in milliseconds (a 1,000-point sweep well under 2 s of CPU): one still running after this
# is stuck or starved, and its client is better told so than kept waiting.
REQUEST_DEADLINE_S: Final = 10.0
MAX_IN_FLIGHT: Final = 256
RETRY_AFTER_S: Final = 1
HEALTH_PATH: Final = "/healthz"
# Responses are gzipped from this size on, at this level (cheap, and most of what the default's ratio gives for the
# page's markup); an answer kept compressed by its route uses the same.
GZIP_MINIMUM_BYTES: Final = 512
GZIP_LEVEL: Final = 3

CSP: Final = ("default-src 'self'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
              "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# The page uses no device, sensor or payment feature: none may be asked for, from this page or a frame in it.
PERMISSIONS_POLICY: Final = ("accelerometer=(), camera=(), geolocation=(), gyroscope=(), magnetometer=(), "
                             "microphone=(), payment=(), usb=()")
SECURITY_HEADERS: Final = (
    (b"content-security-policy", CSP.encode()),
    (b"permissions-policy", PERMISSIONS_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
IMMUTABLE: Final = b"public, max-age=31536000, immutable"
REVALIDATE: Final = b"no-cache"
NO_STORE: Final = b"no-store"
# A static file is versioned when its name carries a version (htmx-2.0.11.min.js, swagger-ui-5.32.0/) or its URL
# a content hash (?v=...).
_VERSIONED: Final = re.compile(r"-\d+\.\d+\.\d+[./]")


logger = logging.getLogger(__name__)
RETRY: Final = ((b"retry-after", str(RETRY_AFTER_S).encode()),)


class _Reply:
    """A request's send(): it knows whether the answer has begun, refuses in the request's own format, and drops
    what a handler sends once a refusal has gone out in its place."""

    def __init__(self, scope: Scope, send: Send, page: Page | None) -> None:
        self.send, self.started, self.refused = send, False, False
        # A page's own script (htmx) reads a refusal's message from the API's error shape and puts it at the
        # control; a page loaded in the browser gets the page.
        scripted = (b"hx-request", b"true") in scope.get("headers", ())
        self.page = page if not (scope["path"].startswith("/api/") or scripted) else None

    async def __call__(self, message: Message) -> None:
        if self.refused:
            return
        self.started = self.started or message["type"] == "http.response.start"
        await self.send(message)

    async def refuse(self, status: int, loc: list[str], message: str, headers: tuple = ()) -> None:
        self.started = self.refused = True
        if self.page is not None:
            subject = "" if loc == ["request"] else f"the {loc[-1]} "
            body, media = self.page(status, subject + message).encode(), b"text/html; charset=utf-8"
        else:
            kind = "value_error" if status == 422 else HTTPStatus(status).phrase.lower().replace(" ", "_")
            body = json.dumps({"detail": [{"loc": loc, "msg": message, "type": kind}]}).encode()
            media = b"application/json"
        await self.send({"type": "http.response.start", "status": status,
                         "headers": [(b"content-type", media), (b"content-length", str(len(body)).encode()),
                                     (b"connection", b"close"), *headers]})
        await self.send({"type": "http.response.body", "body": body})


class Guard:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int = MAX_BODY_BYTES,
                 body_timeout_s: float = BODY_TIMEOUT_S, max_in_flight: int = MAX_IN_FLIGHT,
                 deadline_s: float = REQUEST_DEADLINE_S, page: Page | None = None) -> None:
        self.app, self.max_body_bytes, self.body_timeout_s = app, max_body_bytes, body_timeout_s
        self.max_in_flight, self.in_flight = max_in_flight, 0
        self.deadline_s, self.page = deadline_s, page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == HEALTH_PATH:
            await self.app(scope, receive, send)
            return
        reply = _Reply(scope, send, self.page)
        try:
            await self._guarded(scope, receive, reply)
        except asyncio.CancelledError:
            # Only the server cancels a request: it is stopping, and its grace period is over.
            if reply.started:
                raise
            await reply.refuse(503, ["request"], f"the service is restarting: try again in {RETRY_AFTER_S} s",
                               RETRY)

    async def _guarded(self, scope: Scope, receive: Receive, reply: _Reply) -> None:
        if scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            body = await self._body(scope, receive, reply)
            if body is None:
                return
            receive = _replay(body, receive)
        if self.in_flight >= self.max_in_flight:
            await reply.refuse(503, ["request"], f"the service is at its limit of {self.max_in_flight} requests "
                                                 f"at once: try again in {RETRY_AFTER_S} s", RETRY)
            return
        # The handler runs as a task of its own, so that its client hears at the deadline even while a worker thread
        # computes (a thread cannot be stopped). It is not cancelled: it stays counted in flight until it ends, so
        # requests past their deadline still count against the limit and the thread pool's.
        self.in_flight += 1
        work = asyncio.ensure_future(self.app(scope, receive, reply))
        work.add_done_callback(lambda task: self._finished(task, reply))
        await asyncio.wait((work,), timeout=self.deadline_s)
        if work.done() or reply.started:
            await work
            return
        await reply.refuse(503, ["request"], f"no answer within {self.deadline_s:g} s: try again in "
                                             f"{RETRY_AFTER_S} s", RETRY)

    def _finished(self, work: asyncio.Future[None], reply: _Reply) -> None:
        self.in_flight -= 1
        if reply.refused and not work.cancelled() and work.exception() is not None:
            logger.error("a request failed after its client was answered 503", exc_info=work.exception())

    async def _body(self, scope: Scope, receive: Receive, reply: _Reply) -> bytes | None:
        """The whole body, checked; None once a refusal has been sent (or the client left)."""
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        too_large = f"is larger than {self.max_body_bytes:,} bytes"
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            await reply.refuse(413, ["body"], too_large if declared.isdigit() else "has an invalid length")
            return None
        try:
            # One deadline for the whole body (asyncio.timeout makes no task around each receive()).
            async with asyncio.timeout(self.body_timeout_s):
                body = await self._receive_body(receive, reply, too_large)
        except TimeoutError:
            await reply.refuse(408, ["body"], f"did not arrive in full within {self.body_timeout_s:g} s")
            return None
        if body is None or await _refused_json(scope, headers, body, reply):
            return None
        return body


    async def _receive_body(self, receive: Receive, reply: _Reply, too_large: str) -> bytes | None:
        """The body's chunks joined; None when the client leaves or the body passes its bound (refused)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None  # the client left: nothing to compute
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await reply.refuse(413, ["body"], too_large)
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)


async def _refused_json(scope: Scope, headers: dict[bytes, bytes], body: bytes, reply: _Reply) -> bool:
    """Whether an API body sent as JSON was refused (422) for JSON the bounded reader will not read."""
    if scope["path"].startswith("/api/") and body and b"json" in headers.get(b"content-type", b"json"):
        try:
            loads_bounded(body, "body")
        except DomainError as error:
            await reply.refuse(422, ["body"], error.message)
            return True
    return False


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that hands the app the body already read, then what the connection sends next."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _cache_control(path: str, query: bytes) -> bytes:
    if path.startswith("/static/"):
        return IMMUTABLE if _VERSIONED.search(path) or query.startswith(b"v=") else REVALIDATE
    return NO_STORE


class Headers:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        if head:
            scope = dict(scope, method="GET")
        cache = _cache_control(scope["path"], scope.get("query_string", b""))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in SECURITY_HEADERS if name not in present]
                if b"cache-control" not in present:
                    extra.append((b"cache-control", cache))
                message = dict(message, headers=[*message.get("headers", []), *extra])
            elif head and message["type"] == "http.response.body":
                message = dict(message, body=b"")
            await send(message)

        await self.app(scope, receive, send_with_headers)
