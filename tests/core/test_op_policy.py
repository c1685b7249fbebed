"""torchtitan's op-level recomputation ("op"), against what was measured on CPU (validation/op_sac.py, published in
validation/op_sac.md): Hugging Face's Llama, Mistral and Qwen2 layers under the policy of torchtitan's 2025 releases,
hidden 256, intermediate 704, 4 heads, 2 KV heads of 64, 4 layers, vocabulary 300, bf16, sdpa."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app import core
from app.core import activations as act
from app.core.flops import step_flops
from app.core.hf_config import architecture_from_hf_config
from app.core.setup import activation_setup
from app.main import app
from tests.configs.helpers import imported

client = TestClient(app)
SHAPES = [(1, 64), (1, 256), (2, 64), (2, 256)]
# What each layer keeps from its forward to its backward, measured (validation/op_sac.md, "What a layer keeps").
KEPT = {"llama": (238_592, 954_368, 477_184, 1_908_736), "mistral": (238_592, 954_368, 477_184, 1_908_736),
        "qwen2": (189_440, 757_760, 378_880, 1_515_520)}
# The two steps' peak beyond the weights, buffers and gradients, under the policy and under full recomputation, where
# both fall in the last layer's backward (validation/op_sac.md's table; at b1 s64 the policy's falls elsewhere).
PEAKS = {("llama", 1, 256): (6_934_536, 4_333_576), ("llama", 2, 64): (2_892_808, 1_592_328),
         ("llama", 2, 256): (13_801_480, 8_599_560), ("qwen2", 1, 256): (6_213_640, 4_333_576),
         ("qwen2", 2, 64): (2_532_360, 1_592_328), ("qwen2", 2, 256): (12_359_688, 8_599_560)}


def _arch(family: str) -> core.Architecture:
    return architecture_from_hf_config({"model_type": family, "hidden_size": 256, "intermediate_size": 704,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
                                        "vocab_size": 300, "head_dim": 64, "tie_word_embeddings": False})


def _training(b: int, s: int, checkpointing: act.Checkpointing) -> core.Training:
    return core.Training(micro_batch_size=b, seq_len=s, precision=core.precision_preset("bf16"),
                         activation_checkpointing=checkpointing, framework_overhead_bytes=0)


@pytest.mark.parametrize("family", sorted(KEPT))
@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_each_layer_keeps_what_was_measured(family, shape):
    b, s = SHAPES[shape]
    setup = activation_setup(_training(b, s, "op"), core.Parallelism(), device="cpu")
    assert act.total_bytes(act.checkpointed_layer_activations(_arch(family), setup, "op")) == KEPT[family][shape]


@pytest.mark.parametrize(("family", "b", "s"), sorted(PEAKS))
def test_the_last_layers_backward_holds_what_was_measured_beyond_full_recomputation(family, b, s):
    def at_the_top(checkpointing: act.Checkpointing) -> int:
        result = core.estimate(architecture=_arch(family), training=_training(b, s, checkpointing), device="cpu",
                               reserve=False)
        return next(point.bytes for point in result.timeline if (point.event, point.step) == ("backward: layer 4", 2))

    measured_op, measured_full = PEAKS[(family, b, s)]
    assert at_the_top("op") - at_the_top("full") == measured_op - measured_full


def test_it_keeps_less_than_none_and_more_than_full_and_costs_between_selective_and_full():
    arch = core.get_preset("llama-3-8b").architecture
    peaks = {c: core.estimate(architecture=arch, training=core.Training(seq_len=8192, activation_checkpointing=c),
                              parallelism=core.Parallelism(data=8, zero_stage=3), reserve=False).peak.bytes
             for c in ("none", "op", "full")}
    assert peaks["full"] < peaks["op"] < peaks["none"]
    flops = step_flops(arch, micro_batch_size=1, seq_len=8192)
    # recomputed: k, o and up of Llama's seven matmuls; the attention kernel's output is saved
    assert 0 < flops.recompute_fraction("op") < flops.recompute_fraction("full")


@pytest.mark.parametrize(("body", "why"), [
    ({"model": {"preset": "mixtral-8x7b"}}, "dense layers"),
    ({"model": {"preset": "phi-4"}}, "dense layers"),  # fused qkv and gate_up
    ({"model": {"preset": "gemma-3-1b"}}, "dense layers"),  # sliding windows
    ({"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "lora", "target_modules": ["q_proj"]}}, "adapter"),
    ({"model": {"preset": "llama-3-8b"}, "training": {"attention": "eager"}}, "sdpa or flash"),
    ({"model": {"preset": "llama-3-8b"}, "training": {"implementation": "megatron"}}, "transformers"),
])
def test_where_it_was_not_measured_it_is_refused_by_name(body, why):
    body = body | {"training": {"activation_checkpointing": "op", **body.get("training", {})}}
    response = client.post("/api/v1/estimate", json=body)
    assert response.status_code == 422
    (error,) = [e for e in response.json()["detail"] if e["loc"][1:] == ["training", "activation_checkpointing"]]
    assert why in error["msg"]


def test_torchtitans_op_option_imports_as_the_op_policy():
    answer = imported("torchtitan", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[activation_checkpoint]\n"
                                    "mode = \"selective\"\nselective_ac_option = \"op\"\n")
    assert answer["request"]["training"]["activation_checkpointing"] == "op"
    assert "training.activation_checkpointing" not in {entry["field"] for entry in answer["assumed"]}
    body = answer["request"] | {"gpu": "h100-80gb"}
    assert client.post("/api/v1/estimate", json=body).status_code == 200


def test_where_the_setup_rules_it_out_the_import_falls_back_to_selective_with_the_reason():
    # One GPU: torchtitan trains under autocast, where the op policy was not measured
    answer = imported("torchtitan", "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[parallelism]\n"
                                    "data_parallel_shard_degree = 1\n[activation_checkpoint]\nselective_ac_option = \"op\"\n")
    assert answer["request"]["training"]["activation_checkpointing"] == "selective"
    (why,) = [entry["why"] for entry in answer["assumed"] if entry["field"] == "training.activation_checkpointing"]
    assert "autocast" in why and "upper bound" in why
