"""training.compile "inductor": what a compiled decoder layer keeps (app/core/saved/compiled.py) and the refusals
where it was not measured. The rule itself is checked against CPU measurements in
tests/validation/test_compiled.py (docs/compiled.json)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app import core
from app.core import activations as act
from app.core.setup import activation_setup
from app.main import app

client = TestClient(app)


def _layer(compiled: act.Compile) -> int:
    arch = core.get_preset("llama-3-8b").architecture
    setup = activation_setup(core.Training(seq_len=4096, precision=core.precision_preset("bf16"), compile=compiled),
                             core.Parallelism())
    return act.total_bytes(act.layer_activations(arch, setup))


def test_a_llama_3_8b_layer_by_hand():
    # n = 4,096 tokens, h = 4,096, K/V 8 heads of 128, I = 14,336, bf16, CUDA flash attention. Per norm: its input
    # n·h·2, the fp32 1/RMS n·4 and its output n·h·2; Q n·4096·2, K and V n·1024·2 each, the output n·4096·2, the
    # log-sum-exp 32·4096·4; gate, up and their product n·I·2 each.
    n = 4096
    norms = 2 * (n * 4096 * 2 + n * 4 + n * 4096 * 2)
    attention = n * 4096 * 2 + 2 * n * 1024 * 2 + n * 4096 * 2 + 32 * 4096 * 4
    mlp = 3 * n * 14336 * 2
    assert norms + attention + mlp == 570_982_400
    assert _layer("inductor") == 570_982_400


def test_compile_keeps_less_than_eager_and_full_recomputation_keeps_the_input_either_way():
    assert _layer("inductor") < _layer("none")
    arch = core.get_preset("llama-3-8b").architecture
    peaks = {}
    compiles: tuple[act.Compile, ...] = ("none", "inductor")
    checkpointing: tuple[act.Checkpointing, ...] = ("none", "full")
    for compiled in compiles:
        for ckpt in checkpointing:
            training = core.Training(seq_len=8192, activation_checkpointing=ckpt, compile=compiled)
            estimate = core.estimate(architecture=arch, training=training, parallelism=core.Parallelism(data=8,
                                     zero_stage=3), reserve=False)
            peaks[compiled, ckpt] = estimate.peak.bytes
    assert peaks["inductor", "none"] < peaks["none", "none"]
    assert peaks["inductor", "full"] <= peaks["none", "full"]


@pytest.mark.parametrize(("body", "why"), [
    ({"model": {"preset": "mixtral-8x7b"}}, "mixtures of experts"),
    ({"model": {"preset": "phi-4"}}, "Llama, Mistral, Qwen2 and Gemma"),
    ({"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "lora", "target_modules": ["q_proj"]}}, "LoRA"),
    ({"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "qlora", "target_modules": ["q_proj"]}}, "QLoRA"),
    ({"model": {"preset": "llama-3-8b"}, "training": {"fp8": "torchao"}}, "FP8"),
    ({"model": {"preset": "llama-3-8b"}, "training": {"attention": "eager"}}, "fused attention"),
    ({"model": {"preset": "llama-3-8b"}, "training": {"activation_checkpointing": "selective"}}, "full recomputation"),
    ({"model": {"preset": "llama-3-8b"}, "training": {"implementation": "liger"}}, "transformers"),
    ({"model": {"preset": "llama-3-8b"}, "parallelism": {"tensor": 2}}, "tensor parallelism"),
])
def test_where_it_was_not_measured_it_is_refused_by_name(body, why):
    body = body | {"training": {"compile": "inductor", **body.get("training", {})}}
    response = client.post("/api/v1/estimate", json=body)
    assert response.status_code == 422, response.json()
    (error,) = [e for e in response.json()["detail"] if e["loc"][1:] == ["training", "compile"]]
    assert why in error["msg"]


def test_an_unknown_compiler_is_a_422_naming_the_field():
    response = client.post("/api/v1/estimate", json={"model": {"preset": "llama-3-8b"},
                                                     "training": {"compile": "cudagraphs"}})
    assert response.status_code == 422
    assert any(e["loc"][-1] == "compile" for e in response.json()["detail"])


def test_the_api_answers_with_smaller_activations():
    answers = {compiled: client.post("/api/v1/estimate", json={"model": {"preset": "qwen2.5-7b"}, "training": {
        "precision": "bf16", "seq_len": 4096, "compile": compiled}}) for compiled in ("none", "inductor")}
    assert all(answer.status_code == 200 for answer in answers.values())
    assert answers["inductor"].json()["peak"]["bytes"] < answers["none"].json()["peak"]["bytes"]
