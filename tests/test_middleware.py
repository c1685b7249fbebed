"""Bounds on what comes in and headers on what goes out, for every kind of response."""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from app.main import app, create_app
from app.middleware import Guard
from app.wire import MAX_BODY_BYTES

client = TestClient(app)
ESTIMATE = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}


def _assert_security_headers(response) -> None:
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    script = next(part for part in csp.split(";") if part.strip().startswith("script-src"))
    assert "unsafe-inline" not in script and "unsafe-eval" not in script
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-frame-options"] == "DENY"
    assert "camera=()" in response.headers["permissions-policy"]
    assert "geolocation=()" in response.headers["permissions-policy"]


@pytest.mark.parametrize("method, path", [
    ("GET", "/"), ("GET", "/api/v1/gpus"), ("GET", "/static/app.css"), ("GET", "/nowhere"), ("GET", "/docs"),
    ("GET", "/validation"), ("POST", "/api/v1/estimate"), ("GET", "/healthz"), ("GET", "/api/v1/nowhere"),
    ("DELETE", "/api/v1/estimate"), ("HEAD", "/nowhere"), ("GET", "/static/nowhere.js"), ("GET", "/static"),
])
def test_security_headers_on_every_response(method, path):
    _assert_security_headers(client.request(method, path, json={} if method == "POST" else None,
                                            follow_redirects=False))


@pytest.mark.parametrize("content, status", [
    (b"{", 422), (b"x" * (MAX_BODY_BYTES + 1), 413),
])
def test_security_headers_on_refused_bodies(content, status):
    response = client.post("/api/v1/estimate", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status
    _assert_security_headers(response)


def test_the_503_at_the_limit_is_json_with_retry_after_and_the_security_headers():
    application = create_app()
    guard = next(entry for entry in application.user_middleware if entry.cls is Guard)
    guard.kwargs["max_in_flight"] = 0
    with TestClient(application) as busy:
        response = busy.post("/api/v1/estimate", json=ESTIMATE)
        assert busy.get("/healthz").status_code == 200
    assert response.status_code == 503 and int(response.headers["retry-after"]) >= 1
    assert response.json()["detail"][0]["loc"] == ["request"]
    _assert_security_headers(response)


def test_caching_keeps_versioned_files_and_never_pages():
    assert "immutable" in client.get("/static/htmx-2.0.11.min.js").headers["cache-control"]
    assert "immutable" in client.get("/static/swagger-ui-5.35.0/swagger-ui.css").headers["cache-control"]
    assert client.get("/static/app.css").headers["cache-control"] == "no-cache"
    assert "immutable" in client.get("/static/app.css?v=abc").headers["cache-control"]
    assert client.get("/").headers["cache-control"] == "no-store"
    assert client.post("/api/v1/estimate", json=ESTIMATE).headers["cache-control"] == "no-store"


@pytest.mark.parametrize("path", ["/", "/api/v1/gpus", "/healthz", "/static/app.css", "/docs", "/validation",
                                  "/api/v1/presets", "/openapi.json"])
def test_head_answers_wherever_get_does(path):
    get, head = client.get(path), client.head(path)
    assert head.status_code == get.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]


def test_pages_and_answers_are_compressed():
    response = client.get("/", headers={"accept-encoding": "gzip"})
    assert response.headers["content-encoding"] == "gzip"
    raw = client.get("/static/htmx-2.0.11.min.js", headers={"accept-encoding": "gzip"})
    assert raw.headers["content-encoding"] == "gzip"


def _api_422(body: bytes, loc: list) -> dict:
    start = time.perf_counter()
    response = client.post("/api/v1/estimate", content=body, headers={"content-type": "application/json"})
    assert time.perf_counter() - start < 1.0
    assert response.status_code in (413, 422), response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][:len(loc)] == loc and detail["msg"]
    return detail


@pytest.mark.parametrize("body, loc", [
    (b"{", ["body"]),
    (b"[" * 50_000 + b"]" * 50_000, ["body"]),
    (b'{"model": {"num_params": ' + b"9" * 5000 + b"}}", ["body"]),
    (b'{"model": {"num_params": 1e999999}}', ["body"]),
    (b'{"model": {"preset": "llama-3-8b", "dropout": NaN}}', ["body"]),
    (b'{"model": {"preset": "llama-3-8b"}, "training": {"seq_len": "4096"}}', ["body", "training", "seq_len"]),
    (b'{"model": {"preset": "llama-3-8b"}, "parallelism": {"zero_stage": true}}', ["body", "parallelism", "zero_stage"]),
    (b'{"model": {"preset": "llama-3-8b"}, "parallelism": {"sequence_parallel": 1}}',
     ["body", "parallelism", "sequence_parallel"]),
    (json.dumps({"model": {"hf_config": "[" * 10_000 + "]" * 10_000}}).encode(), ["body", "model", "hf_config"]),
    (json.dumps({"model": {"hf_config": '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}"}}).encode(),
     ["body", "model", "hf_config"]),
    (json.dumps({"model": {"hf_config": {"model_type": "gpt2", "resid_pdrop": 10**30}}}).encode(),
     ["body", "model", "hf_config"]),
])
def test_bad_bodies_are_refused_quickly_and_name_the_field(body, loc):
    _api_422(body, loc)


def test_a_body_over_one_mebibyte_is_a_413():
    body = json.dumps({"model": {"hf_config": "x" * (1 << 20)}}).encode()
    response = client.post("/api/v1/estimate", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["detail"][0]["loc"] == ["body"]


@pytest.mark.parametrize("query", [
    "source=params&num_params=1e999999",
    "source=params&num_params=" + "9" * 30_000,
    "framework_overhead_bytes=1e999999GiB",
    "framework_overhead_bytes=9" + "9" * 5000,
    "seq_len=" + "9" * 5000,
    "source=custom&dropout=1e999999",
])
def test_huge_numbers_in_the_form_are_an_inline_message(query):
    start = time.perf_counter()
    response = client.get("/?" + query)
    assert time.perf_counter() - start < 1.0
    assert response.status_code == 422
    assert 'role="alert"' in response.text or "error" in response.text
