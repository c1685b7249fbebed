"""Serving trainmem: uvicorn with timeouts for slow clients, a short graceful shutdown, and settings from the
environment.

    TRAINMEM_HOST          address to listen on (default 127.0.0.1; the container sets 0.0.0.0)
    PORT                   port (default 8000)
    TRAINMEM_WORKERS       worker processes: a number, or auto for one per CPU the process may use (default 1;
                           the container sets auto); WEB_CONCURRENCY, the usual name, when it is not set
    FORWARDED_ALLOW_IPS    proxies whose X-Forwarded-For, -Proto and -Host are trusted, comma-separated or *
                           (default none: every request is taken as it comes)

Timeouts: a connection must send its request headers within HEADER_TIMEOUT_S of opening (or of the
previous response), a request body must arrive in full within `middleware.BODY_TIMEOUT_S`, an idle
keep-alive connection is closed after KEEP_ALIVE_S, and after SIGTERM the server stops within
GRACEFUL_SHUTDOWN_S even with requests in flight: those still running then are answered 503 with
Retry-After (`middleware.Guard`), and the process exits 0.

Connections: from SHED_AT open connections on, each new one closes the connection that has been idle
longest (no request, or headers still arriving, or between keep-alive requests), so sockets that send
nothing cannot crowd out real requests; past MAX_CONNECTIONS with none idle, the new one is closed.
Requests worked on at once are bounded in the app (`middleware.MAX_IN_FLIGHT`, a 503 with Retry-After),
not by connections, and `/healthz` is never refused.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S: Final = 10.0
KEEP_ALIVE_S: Final = 5
GRACEFUL_SHUTDOWN_S: Final = 5
MAX_HEADER_BYTES: Final = 16 * 1024
MAX_WORKERS: Final = 64
SHED_AT: Final = 256
MAX_CONNECTIONS: Final = 768  # below the usual 1,024 file descriptors a process may open


class TimedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, closing a connection whose request headers do not arrive in time."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._header_timer: asyncio.TimerHandle | None = None
        self._idle_since = self.loop.time()
        self._start_header_timer()
        if len(self.connections) > SHED_AT:
            self._shed()

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _shed(self) -> None:
        """Close the connection idle longest, this one if no other is idle and the hard limit is passed."""
        idle = [c for c in self.connections if c is not self and isinstance(c, TimedH11Protocol) and c._idle()]
        if idle:
            min(idle, key=lambda c: c._idle_since).transport.close()
        elif len(self.connections) > MAX_CONNECTIONS:
            self.transport.close()

    def _start_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_too_slow)

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before and self._header_timer is not None:
            self._header_timer.cancel()  # a new request's headers are in
            self._header_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._idle_since = self.loop.time()
        if not self.transport.is_closing() and self._header_timer is None:
            self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)


class ProxyHeaders(ProxyHeadersMiddleware):
    """uvicorn's X-Forwarded-For and -Proto from a trusted proxy, and its X-Forwarded-Host as the Host.

    From any other address the headers are ignored, so a client cannot pass for another address, scheme
    or host name. Where a chain of proxies lists several hosts, the first is the one the client asked for.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        client = scope.get("client")
        if scope["type"] == "http" and client and client[0] in self.trusted_hosts:
            forwarded = next((value for name, value in scope["headers"] if name == b"x-forwarded-host"), b"")
            host = forwarded.split(b",")[0].strip()
            if host:
                headers = [(name, value) for name, value in scope["headers"] if name != b"host"]
                scope = dict(scope, headers=[*headers, (b"host", host)])
        await super().__call__(scope, receive, send)


def application() -> Any:
    """The app as each worker process serves it: behind `ProxyHeaders` where the environment names proxies."""
    from app.main import app

    trusted = settings_from(os.environ).forwarded_allow_ips
    # uvicorn types an app with its own scope types; Starlette's are the same dicts, typed more loosely.
    return ProxyHeaders(app, trusted_hosts=trusted) if trusted else app  # type: ignore[arg-type]


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    forwarded_allow_ips: str = ""


class SettingsError(ValueError):
    pass


def settings_from(env: Mapping[str, str]) -> Settings:
    """Settings from environment variables (module docstring), refusing values that cannot work."""
    def number(name: str, default: int, low: int, high: int) -> int:
        raw = env.get(name, "").strip()
        if not raw:
            return default
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise SettingsError(f"{name} must be a whole number from {low} to {high}, got {raw[:20]!r}")
        return int(raw)

    def workers() -> int:
        name = "TRAINMEM_WORKERS" if env.get("TRAINMEM_WORKERS", "").strip() else "WEB_CONCURRENCY"
        if env.get(name, "").strip().lower() == "auto":
            return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                              else os.cpu_count() or 1))
        return number(name, 1, 1, MAX_WORKERS)

    return Settings(
        host=env.get("TRAINMEM_HOST", "").strip() or "127.0.0.1",
        port=number("PORT", 8000, 1, 65535),
        workers=workers(),
        forwarded_allow_ips=env.get("FORWARDED_ALLOW_IPS", "").strip(),
    )


def port_taken(host: str, port: int) -> bool:
    """Whether another process already listens on host:port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(0)


def serve(settings: Settings) -> None:
    import uvicorn

    # uvicorn stops gracefully on SIGTERM, then raises the signal again for the handler it found: this one makes
    # a stop that was asked for a clean exit (0) rather than a death by the signal (143).
    signal.signal(signal.SIGTERM, _stopped)
    uvicorn.run(
        "app.serve:application",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        http="app.serve:TimedH11Protocol",
        proxy_headers=False,  # `application` adds ProxyHeaders for the proxies named, none by default
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        server_header=False,
    )


def main(env: Mapping[str, str] | None = None) -> int:
    try:
        settings = settings_from(os.environ if env is None else env)
    except SettingsError as error:
        print(f"trainmem: {error}", file=sys.stderr)
        return 2
    if port_taken(settings.host, settings.port):
        print(f"trainmem: port {settings.port} on {settings.host} is already in use; choose another, "
              f"e.g. `make run PORT={settings.port + 1}` or PORT={settings.port + 1} in the environment",
              file=sys.stderr)
        return 1
    serve(settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
