"""A GPU the catalogue lacks, given by its capacity: the same verdict as a catalogue GPU of that capacity and
context, on the API and the command line; bad shapes refused at the field."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app import core
from app.main import app
from tests.test_cli import trainmem

client = TestClient(app)
QLORA = {"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "qlora"}, "training": {"seq_len": 4096}}
GIB = 1 << 30


def _gpu(body: dict) -> dict:
    answer = client.post("/api/v1/estimate", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["gpu"]


@pytest.mark.parametrize("gpu_id", ["rtx-4090-24gb", "a100-40gb", "mi300x-192gb"])
def test_a_custom_gpu_like_a_catalogue_one_gets_its_verdict(gpu_id):
    listed = core.get_gpu(gpu_id)
    given = _gpu(QLORA | {"gpu": {"capacity_bytes": listed.capacity_bytes, "like": gpu_id, "name": "mine"}})
    expected = _gpu(QLORA | {"gpu": gpu_id})
    assert given.pop("id") == "custom" and given.pop("name") == "mine"
    expected.pop("id"), expected.pop("name")
    assert given == expected


def test_the_capacity_decides():
    small, large = (_gpu(QLORA | {"gpu": {"capacity_bytes": size}}) for size in (12 * GIB, 40 * GIB))
    assert not small["fits"] and large["fits"]
    for fit, size in ((small, 12 * GIB), (large, 40 * GIB)):
        assert fit["capacity"] == size and fit["name"] == "Custom GPU"
        assert fit["headroom"] == size - fit["reserved_bytes"] - fit["outside_allocator_bytes"]


def test_the_solver_fits_into_a_custom_gpu():
    answer = client.post("/api/v1/solve", json=QLORA | {"gpu": {"capacity_bytes": 24 * GIB}, "target": "seq_len"})
    assert answer.status_code == 200, answer.text
    solved = answer.json()
    assert solved["value"] and solved["estimate"]["gpu"]["fits"]


@pytest.mark.parametrize("gpu, loc", [
    ({"capacity_bytes": 1000}, ["body", "gpu", "capacity_bytes"]),
    ({"capacity_bytes": 1 << 50}, ["body", "gpu", "capacity_bytes"]),
    ({"capacity_bytes": 24.5 * GIB}, ["body", "gpu", "capacity_bytes"]),
    ({"name": "no size"}, ["body", "gpu", "capacity_bytes"]),
    ({"capacity_bytes": 24 * GIB, "like": "nope"}, ["body", "gpu", "like"]),
    ({"capacity_bytes": 24 * GIB, "name": ""}, ["body", "gpu", "name"]),
    ({"capacity_bytes": 24 * GIB, "colour": "red"}, ["body", "gpu", "colour"]),
    ("not-a-gpu", ["body", "gpu"]),
    (7, ["body", "gpu"]),
])
def test_bad_gpus_are_refused_at_the_field(gpu, loc):
    answer = client.post("/api/v1/estimate", json=QLORA | {"gpu": gpu})
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == loc


def test_the_schema_takes_an_id_or_a_capacity():
    schema = client.get("/openapi.json").json()
    gpu = schema["components"]["schemas"]["EstimateRequest"]["properties"]["gpu"]
    shapes = json.dumps(gpu)
    assert "h100-80gb" in shapes and "CustomGpuIn" in shapes
    custom = schema["components"]["schemas"]["CustomGpuIn"]
    assert custom["required"] == ["capacity_bytes"]


@pytest.mark.parametrize("flag, size", [("24GiB", 24 * GIB), ("96GB", 96 * 10**9), ("1.5TiB", 3 << 39)])
def test_the_command_line_takes_a_capacity_for_gpu(flag, size):
    run = trainmem("estimate", "--model", "llama-3-8b", "--method", "qlora", "--seq-len", "4096", "--gpu", flag,
                   "--json")
    assert run.returncode in (0, 1), run.stderr
    assert json.loads(run.stdout)["gpu"] == _gpu(QLORA | {"gpu": {"capacity_bytes": size}})


def test_the_command_line_says_what_a_gpu_may_be():
    run = trainmem("estimate", "--model", "llama-3-8b", "--gpu", "24XB")
    assert run.returncode == 2 and "24GiB" in run.stderr
