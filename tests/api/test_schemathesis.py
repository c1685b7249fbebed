"""The API against its own OpenAPI document: generated requests, in process, checked for server errors, status
codes the document lists, content types and response bodies that conform to the response schemas.

Schemathesis runs each operation through its examples, coverage and fuzzing phases, with bodies that fit the
schema and bodies that break it. Most bodies it draws at random are refused by the model (an unknown preset id,
heads that the tensor degree does not divide), so a second set of tests draws requests a user would send (presets,
GPUs, every choice, real degrees) and checks the answers with the same checks: that is where the response schemas
are tested. Every request sent is counted; the last test checks that together they make at least MIN_CASES.
"""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import core
from app.core.job import JOB_FIELDS
from app.core.solver import TARGETS
from app.main import app

schema = schemathesis.openapi.from_asgi("/openapi.json", app)
pytestmark = pytest.mark.search  # a long search: make test-fast leaves it out

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MIN_CASES = 1_000
OPERATIONS = ("POST /api/v1/estimate", "POST /api/v1/solve", "POST /api/v1/sweep", "GET /api/v1/presets",
              "GET /api/v1/gpus")

# Status codes of the requests sent, by operation: all of them, and those of the requests a user would send.
SENT: dict[str, Counter[int]] = {}
USER: dict[str, Counter[int]] = {}


def _settings(max_examples: int):
    # No example database: nothing is written to the checkout, and a failure prints the case that reproduces it.
    return settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))


def _call(case, *tallies: dict[str, Counter[int]]) -> None:
    response = case.call_and_validate(checks=CHECKS)
    for tally in (SENT, *tallies):
        tally.setdefault(case.operation.label, Counter())[response.status_code] += 1


@schema.include(path="/api/v1/estimate").parametrize()
@_settings(max_examples=500)
def test_estimate(case):
    _call(case)


# /solve runs several estimates per request (a search, then the fixes) and /sweep up to a thousand points.
@schema.include(path="/api/v1/solve").parametrize()
@_settings(max_examples=250)
def test_solve(case):
    _call(case)


@schema.include(path="/api/v1/sweep").parametrize()
@_settings(max_examples=250)
def test_sweep(case):
    _call(case)


# Every other operation, the registries (GET /presets, /gpus) and whatever is added later included.
@schema.exclude(path=["/api/v1/estimate", "/api/v1/solve", "/api/v1/sweep"]).parametrize()
@_settings(max_examples=100)
def test_other_operations(case):
    _call(case)


# --- requests a user would send ---------------------------------------------------------------------------

PRESETS = sorted(core.model_presets())
GPUS = sorted(core.gpu_catalogue())


def _subset(draw, fields: dict) -> dict:
    """Some of the fields, each from its strategy: the rest stay at the API's defaults."""
    chosen = draw(st.sets(st.sampled_from(sorted(fields))))
    return {name: draw(fields[name]) for name in sorted(chosen)}


@st.composite
def user_requests(draw) -> dict:
    model = draw(st.one_of(
        st.builds(lambda preset: {"preset": preset}, st.sampled_from(PRESETS)),
        st.builds(lambda n: {"num_params": n}, st.integers(1, 10**12)),
        st.builds(lambda layers, heads, head, kv: {
            "num_hidden_layers": layers, "hidden_size": heads * head, "num_attention_heads": heads,
            "num_key_value_heads": kv, "vocab_size": 32000},
            st.integers(1, 48), st.sampled_from([4, 8, 16, 32]), st.sampled_from([32, 64, 128]),
            st.sampled_from([1, 2, 4])),
    ))
    training = _subset(draw, {
        "micro_batch_size": st.integers(1, 16),
        "seq_len": st.sampled_from([1, 128, 512, 1024, 2048, 4096, 8192, 32768]),
        "precision": st.sampled_from(sorted(core.PRECISION_PRESETS)),
        "optimizer": st.sampled_from(core.OPTIMIZERS),
        "optimizer_implementation": st.sampled_from(sorted(core.OPTIMIZER_IMPLEMENTATIONS)),
        "adafactor_momentum": st.booleans(),
        "activation_checkpointing": st.sampled_from(sorted(core.CHECKPOINTING_CHOICES)),
        "attention": st.sampled_from(sorted(core.ATTENTION_CHOICES)),
        "implementation": st.sampled_from(sorted(core.IMPLEMENTATION_CHOICES)),
        "loop": st.sampled_from(sorted(core.LOOPS)),
        "gradient_accumulation_steps": st.integers(1, 8),
        "framework_overhead_bytes": st.sampled_from([0, 2**30, 3 * 2**30]),
    })
    parallelism = _subset(draw, {
        "data": st.sampled_from([1, 2, 8, 64]),
        "tensor": st.sampled_from([1, 2, 4, 8]),
        "pipeline": st.sampled_from([1, 2, 4]),
        "sequence_parallel": st.booleans(),
        "zero_stage": st.integers(0, 3),
    })
    body = {"model": model, "training": training, "parallelism": parallelism}
    if draw(st.booleans()):
        body["gpu"] = draw(st.sampled_from(GPUS))
    return body


# Fields to sweep, each with the values a user would try.
SWEEPS = {
    "training.micro_batch_size": st.lists(st.integers(1, 64), min_size=1, max_size=32),
    "training.seq_len": st.lists(st.integers(1, 65536), min_size=1, max_size=32),
    "parallelism.zero_stage": st.lists(st.integers(0, 3), min_size=1, max_size=4),
    "parallelism.data": st.lists(st.integers(1, 128), min_size=1, max_size=16),
    "training.activation_checkpointing": st.lists(st.sampled_from(sorted(core.CHECKPOINTING_CHOICES)), min_size=1,
                                                  max_size=3),
    "training.precision": st.lists(st.sampled_from(sorted(core.PRECISION_PRESETS)), min_size=1, max_size=7),
    "parallelism.sequence_parallel": st.lists(st.booleans(), min_size=1, max_size=2),
    "gpu": st.lists(st.sampled_from(GPUS), min_size=1, max_size=5),
}
assert set(SWEEPS) <= set(JOB_FIELDS)


def _send(path: str, body: dict) -> None:
    _call(schema[path]["POST"].Case(body=body, media_type="application/json"), USER)


@given(body=user_requests())
@_settings(max_examples=400)
def test_estimate_for_user_requests(body):
    _send("/api/v1/estimate", body)


@given(body=user_requests(), target=st.sampled_from(sorted(TARGETS)), gpu=st.sampled_from(GPUS))
@_settings(max_examples=200)
def test_solve_for_user_requests(body, target, gpu):
    _send("/api/v1/solve", body | {"gpu": gpu, "target": target})


@given(body=user_requests(), vary=st.sampled_from(sorted(SWEEPS)).flatmap(
    lambda field: st.builds(lambda values: {"field": field, "values": values}, SWEEPS[field])))
@_settings(max_examples=200)
def test_sweep_for_user_requests(body, vary):
    _send("/api/v1/sweep", body | {"vary": vary})


def test_enough_cases_were_sent():
    if not set(OPERATIONS) <= set(SENT):
        pytest.skip("runs after every operation's generated test (the whole module)")
    total = sum(sum(codes.values()) for codes in SENT.values())
    summary = {label: dict(codes) for label, codes in SENT.items()}
    print(f"{total:,} requests:", summary, "of which a user's:", {label: dict(codes) for label, codes in USER.items()})
    assert total >= MIN_CASES, summary
    # Not only refusals: most of what a user would send is answered, so the response schemas were tested.
    for label, codes in USER.items():
        assert codes[200] >= 0.5 * sum(codes.values()), (label, dict(codes))
