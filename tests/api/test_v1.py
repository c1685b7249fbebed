"""The JSON API v1 contract: field names, integer bytes, defaults, and 422s that name the field."""

import json

import pytest
from fastapi.testclient import TestClient

from app import core
from app.main import app

client = TestClient(app)
CATEGORIES = ["weights", "gradients", "master_weights", "optimizer_states", "activations", "temporary", "total"]


def post(body):
    return client.post("/api/v1/estimate", json=body)


def test_estimate_contract_for_llama_3_8b_adamw():
    response = post({"model": {"preset": "llama-3-8b"},
                     "training": {"micro_batch_size": 1, "seq_len": 4096, "optimizer": "adamw"}, "gpu": "h100-80gb"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) >= {"param_count", "per_gpu", "cluster", "gpu", "warnings"}
    assert body["param_count"] == 8_030_261_248  # Hub safetensors total for meta-llama/Meta-Llama-3-8B
    for breakdown in (body["per_gpu"], body["cluster"]):
        assert list(breakdown) == CATEGORIES
        assert all(isinstance(value, int) for value in breakdown.values())
        assert breakdown["total"] == sum(breakdown[c] for c in CATEGORIES[:-1])
    # Default precision bf16 with an fp32 master copy: 2 + 2 + 4 + 8 bytes per parameter.
    p = 8_030_261_248
    assert [body["per_gpu"][c] for c in CATEGORIES[:4]] == [2 * p, 2 * p, 4 * p, 8 * p]
    assert set(body["gpu"]) == {"id", "name", "capacity", "fits", "headroom", "reserved_bytes",
                                "outside_allocator_bytes", "communicator_bytes", "communicators"}
    assert body["gpu"]["communicators"] == []  # one GPU: no process group
    assert body["gpu"]["capacity"] == 81559 * 1024**2  # nvidia-smi total for an H100 80GB HBM3
    # What decides out of memory: the allocator's reserve and the CUDA context beside it.
    assert body["gpu"]["reserved_bytes"] == body["peak"]["reserved_bytes"] >= body["peak"]["bytes"]
    assert body["gpu"]["headroom"] == (body["gpu"]["capacity"] - body["peak"]["reserved_bytes"]
                                       - body["gpu"]["outside_allocator_bytes"])
    assert body["peak"]["reserved_bytes"] == max(point["reserved_bytes"] for point in body["timeline"])
    # The peak is what is alive at once: less than the sum of every buffer, and it names its event.
    assert body["peak"]["bytes"] < body["per_gpu"]["total"]
    assert body["peak"]["bytes"] == max(point["bytes"] for point in body["timeline"])
    assert sum(body["peak"]["breakdown"].values()) == body["peak"]["bytes"]
    assert body["attention_kernel"] == "flash"  # sdpa with bf16 and head size 128 picks flash
    assert body["gpu"]["fits"] is False
    assert all(isinstance(w, str) for w in body["warnings"])


def test_every_field_but_model_has_a_default():
    response = post({"model": {"preset": "gpt2"}})
    assert response.status_code == 200
    assert response.json()["gpu"] is None


def test_num_params_only_reports_null_activations():
    body = post({"model": {"num_params": 7_500_000_000}}).json()
    assert body["per_gpu"]["activations"] is None and body["attention_kernel"] is None
    model_states = sum(body["per_gpu"][c] for c in ("weights", "gradients", "master_weights", "optimizer_states"))
    assert model_states == 16 * 7_500_000_000  # 2 + 2 + 4 + 8 bytes per parameter (ZeRO, section 3.1)
    # torch's foreach AdamW adds sqrt(v), one fp32 copy of every parameter, during optimizer.step()
    assert body["per_gpu"]["temporary"] == 4 * 7_500_000_000
    assert body["peak"] == {"bytes": 20 * 7_500_000_000, "event": "optimizer.step", "step": 1,
                            "breakdown": {"weights": 2 * 7_500_000_000, "gradients": 2 * 7_500_000_000,
                                          "master_weights": 4 * 7_500_000_000, "optimizer_states": 8 * 7_500_000_000,
                                          "activations": 0, "temporary": 4 * 7_500_000_000},
                            "reserved_bytes": 20 * 7_500_000_000}  # no shapes to replay: the tensors' bytes


def test_architecture_fields_and_hf_config_agree_with_the_preset():
    preset = post({"model": {"preset": "mistral-7b"}}).json()
    config = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768}
    from_object = post({"model": {"hf_config": config}}).json()
    from_text = post({"model": {"hf_config": json.dumps(config)}}).json()
    fields = {k: v for k, v in config.items() if k != "model_type"}
    custom = post({"model": fields}).json()
    assert preset["per_gpu"] == from_object["per_gpu"] == from_text["per_gpu"] == custom["per_gpu"]


def test_explicit_precision_and_overrides():
    body = post({"model": {"preset": "llama-2-7b", "num_hidden_layers": 16},
                 "training": {"precision": {"weights": "bf16", "gradients": "fp32", "master_weights": "fp32",
                                            "optimizer_states": "fp32", "activations": "bf16"}}}).json()
    assert body["param_count"] < 6_738_415_616
    assert sum(body["bytes_per_param"].values()) == pytest.approx(18)


def test_presets_and_gpus():
    presets = client.get("/api/v1/presets").json()
    ids = {m["id"] for m in presets["models"]}
    assert {"gpt2", "llama-3-8b", "llama-3.1-405b", "qwen2.5-7b"} <= ids
    assert all(m["architecture_source"].startswith("https://") for m in presets["models"])
    assert {p["id"] for p in presets["precisions"]} >= {"fp32", "autocast-bf16", "fp16-fp32-master", "megatron-bf16", "bf16"}
    assert presets["model_types"] == list(core.SUPPORTED_MODEL_TYPES)
    assert {"granite", "glm4", "starcoder2", "phi", "llama4_text", "llama4"} <= set(presets["model_types"])
    gpus = client.get("/api/v1/gpus").json()
    assert all(isinstance(g["capacity"], int) and g["source"] for g in gpus)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"model": {"preset": "nope"}}, ["body", "model", "preset"]),
        ({"model": {"num_params": 0}}, ["body", "model", "num_params"]),
        ({"model": {"num_params": 10**20}}, ["body", "model", "num_params"]),
        ({"model": {"preset": "gpt2"}, "training": {"seq_len": -5}}, ["body", "training", "seq_len"]),
        ({"model": {"preset": "gpt2"}, "training": {"seq_len": 10**12}}, ["body", "training", "seq_len"]),
        ({"model": {"preset": "gpt2"}, "training": {"optimizer": "adagrad"}}, ["body", "training", "optimizer"]),
        ({"model": {"preset": "gpt2"}, "gpu": "tpu-v4"}, ["body", "gpu"]),
        ({"model": {"preset": "llama-3-8b"}, "parallelism": {"tensor": 3}}, ["body", "parallelism", "tensor"]),
        ({"model": {"preset": "llama-3-8b"}, "parallelism": {"pipeline": 3}}, ["body", "parallelism", "pipeline"]),
        ({"model": {"preset": "llama-3-8b"}, "parallelism": {"zero_stage": 4}}, ["body", "parallelism", "zero_stage"]),
        ({"model": {"preset": "llama-3-8b", "num_key_value_heads": 7}}, ["body", "model", "num_key_value_heads"]),
        ({"model": {"hf_config": "{not json"}}, ["body", "model", "hf_config"]),
        ({"model": {"hf_config": {"model_type": "t5"}}}, ["body", "model", "hf_config", "model_type"]),
        ({"model": {"hf_config": {"model_type": "llama", "hidden_size": 64}}}, ["body", "model", "hf_config", "num_attention_heads"]),
        ({"model": {"num_hidden_layers": 2, "hidden_size": 64}}, ["body", "model", "num_attention_heads"]),
        ({"model": {"num_params": 10**9}, "training": {"optimizer": "adafactor"}}, ["body", "training", "optimizer"]),
        ({"model": {"preset": "gpt2"}, "training": {"precision": "fp64"}}, ["body", "training", "precision"]),
    ],
)
def test_bad_input_is_a_422_naming_the_field(body, loc):
    response = post(body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert any(error["loc"][: len(loc)] == loc for error in detail), detail
    assert all(error["msg"] for error in detail)


def test_malformed_json_is_a_422():
    response = client.post("/api/v1/estimate", content=b"{", headers={"content-type": "application/json"})
    assert response.status_code == 422


def test_openapi_describes_every_request_field():
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    ours = [name for name in schema if name not in ("HTTPValidationError", "ValidationError")]
    assert {"TrainingIn", "ParallelismIn", "ModelIn", "EstimateResponse", "BreakdownOut", "SolveRequest",
            "SweepRequest", "SolveResponse", "SweepResponse", "FixOut"} <= set(ours)
    for name in ours:
        for field, spec in schema[name].get("properties", {}).items():
            assert spec.get("description"), f"{name}.{field} has no description"
    assert "Bytes" in schema["BreakdownOut"]["properties"]["weights"]["description"]
    assert client.get("/docs").status_code == 200


def test_layer_activations_add_up_to_the_layers_term():
    body = post({"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}}).json()
    one_layer = sum(tensor["bytes"] for tensor in body["layer_activations"])
    layers_term = next(t for t in body["explanation"] if t["category"] == "activations" and t["label"].startswith("32 layers"))
    assert layers_term["bytes"] == 32 * one_layer
    names = {tensor["name"] for tensor in body["layer_activations"]}
    assert {"attn.query", "attn.logsumexp", "mlp.gate"} <= names  # flash attention: no s x s tensor
    assert post({"model": {"num_params": 10**9}}).json()["layer_activations"] == []


# LitGPT's model (tests/core/test_litgpt.py): its QLoRA with an old bitsandbytes shows the output layer's own rows.
def test_the_api_takes_litgpt_and_names_the_field_it_refuses():
    body = {"model": {"preset": "llama-2-7b"}, "gpu": "a100-40gb",
            "training": {"implementation": "litgpt", "seq_len": 1304, "precision": "bf16"},
            "finetuning": {"method": "qlora", "quantization": "nf4", "target_modules": ["q_proj", "v_proj"],
                           "bitsandbytes_version": "0.41.1"}}
    response = post(body)
    assert response.status_code == 200, response.text
    labels = " ".join(row["label"] for row in response.json()["ledger"])
    assert "output layer's input" in labels and "output layer dequantized" in labels
    body["finetuning"] = {"method": "full"}
    response = post(body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "finetuning", "method"]
