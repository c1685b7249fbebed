"""Error bodies: what they quote of the input is cut short, and the search for it is linear."""

from __future__ import annotations

import random

import pytest
from fastapi.testclient import TestClient

from app.api.errors import MAX_ECHO_CHARS, MAX_MESSAGE_CHARS, cut
from app.main import app
from tests.cpu import least_cpu_s

client = TestClient(app, raise_server_exceptions=False)
BIG = "x" * 500_000
PRESET = {"preset": "llama-3-8b"}


@pytest.mark.parametrize("body", [
    {"model": {"preset": BIG}},
    {"model": PRESET, "gpu": BIG},
    {"model": PRESET, "gpu": BIG + "'" + BIG[:1000]},
    {"model": {**PRESET, BIG: 1}},
    {"model": {"hf_config": {"model_type": BIG}}},
    {"model": PRESET, "finetuning": {"method": "lora", "target_modules": [BIG]}},
])
def test_a_long_value_is_not_echoed_whole(body):
    response = client.post("/api/v1/estimate", json=body)
    assert response.status_code == 422
    assert len(response.content) < 2 * MAX_MESSAGE_CHARS
    for error in response.json()["detail"]:
        assert len(error["msg"]) <= MAX_MESSAGE_CHARS + 1
        assert all(len(part) <= MAX_ECHO_CHARS + 1 for part in error["loc"] if isinstance(part, str))


def test_what_a_message_says_beyond_the_value_is_kept():
    msg = client.post("/api/v1/estimate", json={"model": {"preset": BIG}}).json()["detail"][0]["msg"]
    assert f"'{'x' * MAX_ECHO_CHARS}…'" in msg and "llama-3-8b" in msg
    assert cut("unknown GPU 'h900'; known: h100-80gb") == "unknown GPU 'h900'; known: h100-80gb"


@pytest.mark.parametrize("text", [
    "\\'" * 500_000, "'" * 1_000_000, "'\"" * 500_000, "'" + "x" * 1_000_000, '"' * 1_000_000,
    "".join(random.Random(1).choices("'\"x\\", k=1_000_000)),  # one generator: a mix, not one character repeated
])
def test_cutting_a_megabyte_message_is_quick(text):
    cpu_s, message = least_cpu_s(lambda: cut(text), 0.5)
    assert len(message) <= MAX_MESSAGE_CHARS + 1
    assert cpu_s < 0.5


@pytest.mark.parametrize("method, path, loc, allow", [
    ("GET", "/api/v1/nowhere", "path", None), ("DELETE", "/api/v1/estimate", "method", "POST"),
    ("GET", "/api/v1/estimate", "method", "POST"), ("GET", "/api/v1/gpus/", "path", None),
])
def test_every_api_error_is_a_list_of_loc_msg_type(method, path, loc, allow):
    response = client.request(method, path)
    assert response.headers["content-type"] == "application/json"
    [error] = response.json()["detail"]
    assert set(error) == {"loc", "msg", "type"} and error["loc"] == [loc] and error["msg"]
    assert response.headers.get("allow") == allow
