"""POST /api/v1/solve and /api/v1/sweep against POST /api/v1/estimate: the same numbers through the same door."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)
BODY = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096},
        "parallelism": {"data": 8, "zero_stage": 2}, "gpu": "a100-80gb"}


def _estimate(body: dict) -> dict:
    response = client.post("/api/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _with(body: dict, path: str, value) -> dict:
    section, _, name = path.partition(".")
    out = {key: (dict(value) if isinstance(value, dict) else value) for key, value in body.items()}
    if section == "gpu":
        out["gpu"] = value
    else:
        out[section] = dict(out.get(section, {})) | {name: value}
    return out


@pytest.mark.parametrize("target, path, step", [
    ("micro_batch_size", "training.micro_batch_size", 1),
    ("seq_len", "training.seq_len", 1),
    ("data", "parallelism.data", -1),
])
def test_solve_answers_on_the_boundary(target, path, step):
    body = BODY | {"parallelism": {"data": 1, "zero_stage": 3}} if target == "data" else BODY
    response = client.post("/api/v1/solve", json=body | {"target": target})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["target"] == target and isinstance(answer["value"], int)
    at = _estimate(_with(body, path, answer["value"]))
    assert at["gpu"]["fits"] and at == answer["estimate"]
    if answer["value"] + step >= 1:
        assert not _estimate(_with(body, path, answer["value"] + step))["gpu"]["fits"]


def test_solve_lists_fixes_that_fit_when_the_job_does_not():
    body = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}
    answer = client.post("/api/v1/solve", json=body | {"target": "micro_batch_size"}).json()
    assert answer["value"] is None and "does not fit" in answer["note"]
    assert answer["fixes"]
    for fix in answer["fixes"]:
        changed = body
        for path, value in fix["change"].items():
            changed = _with(changed, path, value)
        result = _estimate(changed)
        assert result["gpu"]["fits"] and result["peak"] == fix["peak"]
        assert fix["headroom"] == result["gpu"]["headroom"] and fix["cost"]["text"]


@pytest.mark.parametrize("field, values", [
    ("training.seq_len", [512, 1024, 4096, 16384, 65536]),
    ("training.micro_batch_size", [1, 2, 3, 8]),
    ("parallelism.zero_stage", [0, 1, 2, 3]),
    ("training.activation_checkpointing", ["none", "selective", "full"]),
    ("parallelism.sequence_parallel", [False, True]),
    ("gpu", ["a100-80gb", "h200-141gb"]),
])
def test_each_sweep_point_is_what_estimate_says(field, values):
    response = client.post("/api/v1/sweep", json=BODY | {"vary": {"field": field, "values": values}})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["field"] == field and [point["value"] for point in answer["points"]] == values
    for point in answer["points"]:
        expected = _estimate(_with(BODY, field, point["value"]))
        # the tensors' peak exactly; the allocator's reserve where the point was replayed (not fitted)
        assert point["peak"] | {"reserved_bytes": None} == expected["peak"] | {"reserved_bytes": None}
        assert point["peak"]["reserved_bytes"] in (None, expected["peak"]["reserved_bytes"])
        assert point["per_gpu"] == expected["per_gpu"]
        assert point["fits"] == expected["gpu"]["fits"]


@pytest.mark.parametrize("path, body, loc", [
    ("/api/v1/sweep", {"vary": {"field": "training.seq_len", "values": [1024, 0]}}, ["body", "vary", "values", "1"]),
    ("/api/v1/sweep", {"vary": {"field": "training.seq_len", "values": list(range(1, 1002))}}, ["body", "vary", "values"]),
    ("/api/v1/sweep", {"vary": {"field": "training.seq_length", "values": [1]}}, ["body", "vary", "field"]),
    ("/api/v1/sweep", {"vary": {"field": "parallelism.tensor", "values": [3]}}, ["body", "vary", "values", "0"]),
    ("/api/v1/sweep", {"vary": {"field": "training.seq_len", "values": ["4096"]}}, ["body", "vary", "values", "0"]),
    ("/api/v1/solve", {"target": "batch"}, ["body", "target"]),
    ("/api/v1/solve", {"target": "seq_len", "gpu": None}, ["body", "gpu"]),
])
def test_bad_requests_are_422s_naming_the_field(path, body, loc):
    response = client.post(path, json=BODY | body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][:len(loc)] == loc


def test_answers_conform_to_their_documented_models():
    from app.api.schemas import EstimateResponse, SolveResponse, SweepResponse

    EstimateResponse.model_validate(_estimate(BODY))
    EstimateResponse.model_validate(_estimate({"model": {"num_params": 7_000_000_000}}))
    solved = client.post("/api/v1/solve", json=BODY | {"target": "seq_len", "gpu": "h100-80gb",
                                                       "parallelism": {"data": 1}}).json()
    SolveResponse.model_validate(solved)
    swept = client.post("/api/v1/sweep", json=BODY | {"vary": {"field": "gpu", "values": ["a100-40gb"]}}).json()
    SweepResponse.model_validate(swept)


def test_finetuning_in_the_api():
    body = {"model": {"preset": "llama-2-7b"}, "training": {"precision": "bf16", "seq_len": 2048},
            "finetuning": {"method": "lora", "rank": 8, "target_modules": ["q_proj", "v_proj"]}, "gpu": "rtx-4090-24gb"}
    result = _estimate(body)
    assert (result["trainable_param_count"], result["param_count"]) == (4_194_304, 6_742_609_920)
    qlora = _estimate(body | {"finetuning": {"method": "qlora", "target_modules": ["all-linear"]}})
    assert qlora["per_gpu"]["weights"] < result["per_gpu"]["weights"] / 3
    for bad, loc in (({"method": "lora", "target_modules": ["c_attn"]}, ["body", "finetuning", "target_modules"]),
                     ({"method": "lora", "rank": 0}, ["body", "finetuning", "rank"]),
                     ({"method": "dora"}, ["body", "finetuning", "method"])):
        response = client.post("/api/v1/estimate", json=body | {"finetuning": bad})
        assert response.status_code == 422 and response.json()["detail"][0]["loc"][:3] == loc
    swept = client.post("/api/v1/sweep", json=body | {"vary": {"field": "finetuning.rank", "values": [8, 64]}}).json()
    assert swept["points"][0]["peak"]["bytes"] < swept["points"][1]["peak"]["bytes"]


def test_target_modules_as_peft_takes_a_string():
    body = {"model": {"preset": "llama-2-7b"}, "training": {"precision": "bf16", "seq_len": 2048}, "gpu": "rtx-4090-24gb"}
    listed = _estimate(body | {"finetuning": {"method": "lora", "rank": 8, "target_modules": ["q_proj", "v_proj"]}})
    matched = _estimate(body | {"finetuning": {"method": "lora", "rank": 8, "target_modules": r".*\.(q_proj|v_proj)"}})
    assert matched["trainable_param_count"] == listed["trainable_param_count"] == 4_194_304
    assert matched["peak"]["bytes"] == listed["peak"]["bytes"]
    every = _estimate(body | {"finetuning": {"method": "lora", "rank": 8, "target_modules": "all-linear"}})
    assert every["trainable_param_count"] == _estimate(
        body | {"finetuning": {"method": "lora", "rank": 8, "target_modules": ["all-linear"]}})["trainable_param_count"]
    for bad, reason in ((r"(a+)+b", "repeated group"), ("(", "not a regular expression"),
                        (r".*layers\.(0|1)\..*q_proj", "some layers only"), ("x" * 257, "at most 256"), (7, "string")):
        response = client.post("/api/v1/estimate", json=body | {"finetuning": {"method": "lora", "target_modules": bad}})
        detail = response.json()["detail"]
        assert response.status_code == 422, bad
        assert detail[0]["loc"][:3] == ["body", "finetuning", "target_modules"] and reason in str(detail), detail
    schema = client.get("/openapi.json").json()["components"]["schemas"]["FinetuningIn"]["properties"]["target_modules"]
    assert [branch["type"] for branch in schema["anyOf"]] == ["array", "string"]


def test_offload_answers_host_memory():
    body = {"model": {"preset": "llama-3-8b"}, "parallelism": {"data": 8, "zero_stage": 3, "offload": "optimizer",
                                                                "gpus_per_node": 4}, "gpu": "a100-40gb"}
    result = _estimate(body)
    assert result["host"]["gpus_per_node"] == 4
    assert result["host"]["per_node_bytes"] == 4 * result["host"]["per_gpu"]["total"]
    assert result["per_gpu"]["optimizer_states"] == 0 and result["host"]["per_gpu"]["optimizer_states"] > 0
    assert _estimate({"model": {"preset": "gpt2"}})["host"] is None
    response = client.post("/api/v1/estimate", json=body | {"parallelism": {"zero_stage": 0, "offload": "optimizer"}})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "parallelism", "offload"]
