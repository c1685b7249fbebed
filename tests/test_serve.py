"""The server as it runs: environment settings, the port check, slow clients and a quick SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from app.serve import HEADER_TIMEOUT_S, Settings, SettingsError, port_taken, settings_from


def test_settings_from_the_environment():
    assert settings_from({}) == Settings()
    assert settings_from({"TRAINMEM_HOST": "0.0.0.0", "PORT": "9000", "TRAINMEM_WORKERS": "4",
                          "FORWARDED_ALLOW_IPS": "10.0.0.1"}) == Settings("0.0.0.0", 9000, 4, "10.0.0.1")
    for bad in ({"PORT": "http"}, {"PORT": "70000"}, {"TRAINMEM_WORKERS": "0"}):
        with pytest.raises(SettingsError, match=next(iter(bad))):
            settings_from(bad)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def server():
    port = _free_port()
    env = os.environ | {"PORT": str(port), "TRAINMEM_HOST": "127.0.0.1"}
    process = subprocess.Popen([sys.executable, "-m", "app.serve"], env=env, stdout=subprocess.PIPE,
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


def test_a_taken_port_is_said_plainly(server):
    port, _ = server
    assert port_taken("127.0.0.1", port)
    done = subprocess.run([sys.executable, "-m", "app.serve"], env=os.environ | {"PORT": str(port)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and f"port {port}" in done.stderr and "PORT=" in done.stderr


def test_slow_headers_are_cut_off_and_sigterm_ends_it_quickly(server):
    port, process = server
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the rest
    slow.settimeout(HEADER_TIMEOUT_S + 5)
    start = time.monotonic()
    assert slow.recv(1024) == b""  # closed by the server
    assert time.monotonic() - start < HEADER_TIMEOUT_S + 3
    slow.close()
    idle = socket.create_connection(("127.0.0.1", port))  # a client that says nothing while the server stops
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=15)
    assert time.monotonic() - start < 8
    idle.close()
