"""The server as it runs: environment settings, the port check, slow clients and a quick SIGTERM."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.middleware import BODY_TIMEOUT_S, Guard
from app.serve import (
    GRACEFUL_SHUTDOWN_S,
    HEADER_TIMEOUT_S,
    ProxyHeaders,
    Settings,
    SettingsError,
    application,
    port_taken,
    settings_from,
)


def test_settings_from_the_environment():
    assert settings_from({}) == Settings() and Settings().forwarded_allow_ips == ""
    assert settings_from({"TRAINMEM_HOST": "0.0.0.0", "PORT": "9000", "TRAINMEM_WORKERS": "4",
                          "FORWARDED_ALLOW_IPS": "10.0.0.1"}) == Settings("0.0.0.0", 9000, 4, "10.0.0.1")
    assert settings_from({"WEB_CONCURRENCY": "3"}).workers == 3
    assert settings_from({"TRAINMEM_WORKERS": "2", "WEB_CONCURRENCY": "3"}).workers == 2
    assert 1 <= settings_from({"TRAINMEM_WORKERS": "auto"}).workers == len(os.sched_getaffinity(0))
    for bad in ({"PORT": "http"}, {"PORT": "70000"}, {"TRAINMEM_WORKERS": "0"}, {"WEB_CONCURRENCY": "many"}):
        with pytest.raises(SettingsError, match=next(iter(bad))):
            settings_from(bad)


async def _echo(scope, receive, send):
    body = json.dumps({"client": scope["client"][0], "scheme": scope["scheme"],
                       "host": dict(scope["headers"]).get(b"host", b"").decode()}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


FORWARDED = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https",
             "X-Forwarded-Host": "calc.example.com, inner.example"}


@pytest.mark.parametrize("trusted, peer, seen", [
    ("10.0.0.2", "10.0.0.2", {"client": "203.0.113.7", "scheme": "https", "host": "calc.example.com"}),
    ("*", "10.0.0.9", {"client": "203.0.113.7", "scheme": "https", "host": "calc.example.com"}),
    ("10.0.0.2", "10.0.0.3", {"client": "10.0.0.3", "scheme": "http", "host": "testserver"}),
])
def test_forwarded_headers_are_believed_only_from_the_proxies_named(trusted, peer, seen):
    client = TestClient(ProxyHeaders(_echo, trusted_hosts=trusted), client=(peer, 50000))
    assert client.get("/", headers=FORWARDED).json() == seen


def test_no_proxy_is_trusted_unless_the_environment_names_one(monkeypatch):
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    assert application() is app
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")
    assert isinstance(application(), ProxyHeaders)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The server the tests run waits less than the one users run: the same code, its three timeouts shortened (the
# header and body deadlines and the grace period on SIGTERM), so that a test waiting for one waits seconds, not ten.
HEADER_TIMEOUT_TEST_S, BODY_TIMEOUT_TEST_S, GRACE_TEST_S = 2.0, 2.0, 1
SHORT_TIMEOUTS = f"""
import app.middleware, app.serve
app.middleware.Guard.__init__.__kwdefaults__["body_timeout_s"] = {BODY_TIMEOUT_TEST_S}
app.serve.HEADER_TIMEOUT_S = {HEADER_TIMEOUT_TEST_S}
app.serve.GRACEFUL_SHUTDOWN_S = {GRACE_TEST_S}
raise SystemExit(app.serve.main())
"""


def test_the_shortened_timeouts_are_shorter_than_the_real_ones():
    assert HEADER_TIMEOUT_TEST_S < HEADER_TIMEOUT_S and BODY_TIMEOUT_TEST_S < BODY_TIMEOUT_S
    assert GRACE_TEST_S < GRACEFUL_SHUTDOWN_S
    assert (Guard.__init__.__kwdefaults__ or {}).get("body_timeout_s") == BODY_TIMEOUT_S


def _started() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = _free_port()
    env = os.environ | {"PORT": str(port), "TRAINMEM_HOST": "127.0.0.1"}
    process = subprocess.Popen([sys.executable, "-c", SHORT_TIMEOUTS], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        assert process.stdout is not None
        pytest.fail("the server did not start: " + process.stdout.read().decode()[-2000:])
    yield port, process
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture
def server() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A server of the test's own, which it may stop."""
    yield from _started()


@pytest.fixture(scope="module")
def shared_server() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """One server for the tests that leave it running (each start costs a process importing the app)."""
    yield from _started()


def test_a_taken_port_is_said_plainly(shared_server):
    port, _ = shared_server
    assert port_taken("127.0.0.1", port)
    done = subprocess.run([sys.executable, "-m", "app.serve"], env=os.environ | {"PORT": str(port)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and f"port {port}" in done.stderr and "PORT=" in done.stderr


def test_slow_headers_are_cut_off_and_sigterm_ends_it_quickly(server):
    port, process = server
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the rest
    slow.settimeout(HEADER_TIMEOUT_TEST_S + 5)
    start = time.monotonic()
    assert slow.recv(1024) == b""  # closed by the server
    assert HEADER_TIMEOUT_TEST_S - 0.5 < time.monotonic() - start < HEADER_TIMEOUT_TEST_S + 3
    slow.close()
    idle = socket.create_connection(("127.0.0.1", port))  # a client that says nothing while the server stops
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=15)
    assert time.monotonic() - start < 8
    idle.close()


def test_sigterm_answers_what_is_still_running_503_and_exits_0(server):
    """A request still in flight when the grace period ends (here a body still arriving) is answered 503 with
    Retry-After, not 500, and the process exits 0 (before, uvicorn's re-raised signal: 143)."""
    port, process = server
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /api/v1/estimate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n{")
    time.sleep(0.2)  # the request is in
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    s.settimeout(GRACE_TEST_S + 5)
    answer = b""
    while chunk := s.recv(4096):  # headers and body may come apart; the server closes the connection after
        answer += chunk
    s.close()
    assert answer.startswith(b"HTTP/1.1 503"), answer[:80]
    assert b"retry-after: 1" in answer and b'"loc": ["request"]' in answer
    assert process.wait(timeout=10) == 0 and time.monotonic() - start < GRACE_TEST_S + 3
    assert process.stdout is not None
    log = process.stdout.read().decode()
    assert "Traceback" not in log and " 500 " not in log, log[-2000:]


def _post(port: int, body: bytes, timeout: float = 5) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/estimate", data=body,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_idle_and_slow_clients_cannot_take_the_service(shared_server):
    """300 connections that send nothing and 40 that drip a body: /healthz and an estimate still answer, quickly
    (before, uvicorn's limit_concurrency=256 counted the idle sockets and answered everything with 503)."""
    port, _ = shared_server
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    slow = []
    for _ in range(40):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /api/v1/estimate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{")
        slow.append(s)
    try:
        start = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.status == 200
        assert _post(port, b'{"model": {"preset": "llama-3-8b"}}') == 200
        assert time.monotonic() - start < 3
    finally:
        for s in idle + slow:
            s.close()


def test_a_body_that_drips_meets_one_deadline(shared_server):
    """A byte every second keeps every gap short, but the whole body must arrive within the body timeout."""
    port, _ = shared_server
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /api/v1/estimate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100\r\n\r\n")
    # Read before each byte: a byte sent after the server has answered and closed would draw a reset, which
    # discards the answer not yet read.
    start, answer = time.monotonic(), b""
    while time.monotonic() - start < BODY_TIMEOUT_TEST_S + 5 and not answer:
        readable, _, _ = select.select([s], [], [], 1.0)
        if readable:
            answer = s.recv(4096)
            break
        try:
            s.sendall(b" ")
        except OSError:
            break
    s.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert BODY_TIMEOUT_TEST_S - 0.5 < time.monotonic() - start < BODY_TIMEOUT_TEST_S + 3
