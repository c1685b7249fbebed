"""POST /api/v1/import and /api/v1/export: configs in and out over HTTP.

Every imported request is posted to /estimate, /solve and /sweep and answered 200; answers match their response
models; bad input is a 422 whose loc names the key inside the text; an export imports back to the same body for
the fields its file carries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import configs
from app.api.config_schemas import ExportResponse, ImportResponse
from app.main import app

client = TestClient(app)
SAMPLES = sorted((Path(__file__).parents[1] / "configs" / "samples").iterdir())


def post(path: str, body: dict):
    return client.post(f"/api/v1/{path}", json=body)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_an_imported_request_goes_straight_into_estimate_solve_and_sweep(path):
    response = post("import", {"kind": "auto", "text": path.read_text()})
    assert response.status_code == 200, response.text
    answer = response.json()
    ImportResponse.model_validate(answer)
    request = answer["request"]
    assert post("estimate", request).status_code == 200
    assert post("solve", request | {"gpu": "h100-80gb", "target": "micro_batch_size"}).status_code == 200
    vary = {"field": "training.seq_len", "values": [512, 1024, 2048]}
    assert post("sweep", request | {"vary": vary}).status_code == 200


def test_several_files():
    files = [{"kind": "training-arguments", "text": (SAMPLES[0].parent / "training_args.json").read_text()},
             {"kind": "auto", "text": (SAMPLES[0].parent / "ds_config_zero3.json").read_text()}]
    response = post("import", {"files": files})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["kind"] == "training-arguments+deepspeed"
    assert answer["request"]["parallelism"]["zero_stage"] == 3
    assert {entry["file"] for entry in answer["understood"]} == {0, 1}
    assert post("estimate", answer["request"]).status_code == 200


@pytest.mark.parametrize("name, framework, own_buffers", [
    ("accelerate_fsdp2.yaml", "fsdp2", True), ("ds_config_zero3.json", "deepspeed", True),
    # bf16 with fp32 main gradients: Megatron-LM's 6 + 12/d bytes per parameter are the ZeRO paper's
    ("megatron_llama3_8b.sh", "megatron", False),
    ("axolotl_lora_fsdp2_cp.yaml", "pytorch", False),  # LoRA: the fsdp2 convention does not model fine-tuning yet
])
def test_an_imported_framework_sets_the_estimates_convention(name, framework, own_buffers):
    answer = post("import", {"kind": "auto", "text": (SAMPLES[0].parent / name).read_text()}).json()
    request = answer["request"]
    assert request["training"]["framework"] == framework
    assert any(entry["field"] == "training.framework" for entry in (*answer["understood"], *answer["assumed"]))
    estimate = post("estimate", request)
    assert estimate.status_code == 200, estimate.text
    plain = post("estimate", request | {"training": request["training"] | {"framework": "pytorch"}})
    assert (plain.json()["peak"]["bytes"] != estimate.json()["peak"]["bytes"]) == own_buffers


@pytest.mark.parametrize("body, loc", [
    ({"kind": "deepspeed", "text": '{"zero_optimization": {"stage": 9}}'}, ["body", "text", "zero_optimization", "stage"]),
    ({"kind": "deepspeed", "text": '{"zero_optimization": '}, ["body", "text"]),
    ({"kind": "axolotl", "text": "base_model: x\nmicro_batch_size: [1\n"}, ["body", "text"]),
    ({"kind": "torchtitan", "text": "[training\nseq_len = 1"}, ["body", "text"]),
    ({"kind": "accelerate", "text": "distributed_type: FSDP\nnum_processes: many\n"}, ["body", "text", "num_processes"]),
    ({"kind": "megatron", "text": "--num-layers 2 --hidden-size 64"}, ["body", "text", "--num-attention-heads"]),
    ({"kind": "training-arguments", "text": '{"per_device_train_batch_size": 4.5}'},
     ["body", "text", "per_device_train_batch_size"]),
    ({"kind": "auto", "text": "what: ever\n"}, ["body", "kind"]),
    ({"kind": "ini", "text": "a=1"}, ["body", "kind"]),
    ({"kind": "deepspeed"}, ["body"]),
    ({"text": "a: 1", "files": [{"text": "a: 1"}]}, ["body"]),
    ({"files": []}, ["body", "files"]),
    ({"files": [{"kind": "deepspeed", "text": "{}"}, {"kind": "deepspeed", "text": "{}"}]}, ["body", "files", "1", "kind"]),
    ({"files": [{"kind": "training-arguments", "text": '{"per_device_train_batch_size": 4}'},
                {"kind": "deepspeed", "text": '{"train_micro_batch_size_per_gpu": 2}'}]},
     ["body", "files", "1", "text", "train_micro_batch_size_per_gpu"]),
    ({"kind": "deepspeed", "text": 3}, ["body", "text"]),
    ({"kind": "deepspeed", "text": "{}", "extra": 1}, ["body", "extra"]),
])
def test_bad_input_is_a_422_naming_the_key(body, loc):
    response = post("import", body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert any(error["loc"][: len(loc)] == loc for error in detail), detail
    assert all(error["msg"] for error in detail)


def test_a_body_over_the_limit_is_refused_before_reading():
    text = "#" * (configs.MAX_TEXT_BYTES + 10)
    response = client.post("/api/v1/import", content=json.dumps({"kind": "axolotl", "text": text}),
                           headers={"content-type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize("kind", configs.EXPORT_KINDS)
def test_export_then_import_gives_the_request_back(kind):
    body: dict[str, Any] = {
        "model": {"preset": "llama-2-7b"},
        "training": {"micro_batch_size": 2, "seq_len": 4096, "precision": "bf16-fp32-master", "optimizer": "adamw",
                     "optimizer_implementation": "fused", "activation_checkpointing": "full",
                     "gradient_accumulation_steps": 4, "loop": "hf-trainer"},
        "parallelism": {"data": 8, "zero_stage": 2},
    }
    response = post("export", body | {"kind": kind})
    assert response.status_code == 200, response.text
    answer = response.json()
    ExportResponse.model_validate(answer)
    assert answer["kind"] == kind and answer["filename"] and answer["text"]
    back = post("import", {"kind": kind, "text": answer["text"]}).json()["request"]
    lost = {entry["field"] for entry in answer["unexpressed"]}
    for section in ("training", "parallelism"):
        for name, value in body[section].items():
            if f"{section}.{name}" not in lost:
                assert back[section][name] == value, (kind, section, name)
    assert ("model" in lost) == (back["model"] != body["model"])
    assert post("estimate", back).status_code == 200


def test_export_with_adapters_and_a_gpu():
    body = {"kind": "axolotl", "model": {"preset": "llama-3-8b"}, "training": {"precision": "bf16"},
            "finetuning": {"method": "qlora", "rank": 16, "target_modules": ["all-linear"]}, "gpu": "a100-80gb"}
    answer = post("export", body).json()
    assert "adapter: qlora" in answer["text"] and "lora_target_linear: true" in answer["text"]
    assert [entry["field"] for entry in answer["unexpressed"] if entry["field"] == "gpu"] == ["gpu"]


@pytest.mark.parametrize("body, loc", [
    ({"kind": "torchtitan", "model": {"preset": "gpt2"}}, ["body", "kind"]),
    ({"model": {"preset": "gpt2"}}, ["body", "kind"]),
    ({"kind": "deepspeed", "model": {"preset": "gpt2-xl"}, "parallelism": {"tensor": 2}}, ["body", "parallelism", "tensor"]),
    ({"kind": "deepspeed", "model": {"preset": "nope"}}, ["body", "model", "preset"]),
])
def test_export_422s(body, loc):
    response = post("export", body)
    assert response.status_code == 422
    assert any(error["loc"][: len(loc)] == loc for error in response.json()["detail"])


def test_the_api_documents_both_routes():
    schema = client.get("/openapi.json").json()
    assert {"/api/v1/import", "/api/v1/export"} <= set(schema["paths"])
    components = schema["components"]["schemas"]
    assert {"ImportRequest", "ImportResponse", "ExportRequest", "ExportResponse", "ConfigFileIn"} <= set(components)
