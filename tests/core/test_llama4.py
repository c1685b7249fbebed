"""Llama 4's language model (llama4_text, and a llama4 config.json's text_config): counts and saved tensors against
measurements of transformers 5.24's Llama4ForCausalLM, and what is refused by name."""

from __future__ import annotations

import pytest

from app import core
from app.core import DomainError
from app.core import activations as act
from app.core.finetuning import Finetuning, layer_role
from app.core.hf_config import architecture_from_hf_config
from app.core.setup import Parallelism

# The small layout validation/models.py builds (_llama4_text): four experts, one per token, a shared expert.
SMALL = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96, "intermediate_size_mlp": 128,
         "vocab_size": 300, "num_local_experts": 4, "num_experts_per_tok": 1}


def test_scout_counted_as_transformers_builds_it():
    # Llama4TextConfig's defaults are Llama-4-Scout-17B-16E's text model; Llama4ForCausalLM built from them on the
    # meta device (transformers 5.24) holds 107,769,861,120 parameters. A llama4 config.json's text_config reads alike.
    assert core.param_count(architecture_from_hf_config({"model_type": "llama4_text"})) == 107_769_861_120
    assert core.param_count(architecture_from_hf_config({"model_type": "llama4", "text_config": {}})) == 107_769_861_120


def test_small_count_worked_out_from_the_modules():
    h, q, kv, inter, experts, vocab = 64, 128, 64, 96, 4, 300
    # q, k, v, o; two RMSNorms; the router; the experts' gate_up_proj and down_proj; the shared expert.
    layer = 2 * h * q + 2 * h * kv + 2 * h + h * experts + experts * 3 * h * inter + 3 * h * inter
    assert core.param_count(architecture_from_hf_config(SMALL)) == 4 * layer + 2 * vocab * h + h == 506_944


@pytest.mark.parametrize("precision, attention, batch, seq, chunk, without_positions, rotating", [
    # Measured on CPU (the saved-tensor recorder of validation/measure.py): the bytes autograd keeps in a layer
    # without positions (the fourth) and in a rotating one (chunked attention).
    ("bf16", "sdpa", 2, 32, 8192, 429_696, 480_256),
    ("bf16", "eager", 2, 32, 8192, 461_440, 512_000),
    ("fp32", "sdpa", 1, 48, 8192, 617_664, 655_488),
    # Chunks of 16 under sdpa: the chunked layers' mask and K and V repeated to every head.
    ("bf16", "sdpa", 2, 32, 16, 429_696, 500_736),
])
def test_layers_keep_what_was_measured(precision, attention, batch, seq, chunk, without_positions, rotating):
    arch = architecture_from_hf_config({**SMALL, "attention_chunk_size": chunk})
    setup = act.ActivationSetup(micro_batch_size=batch, seq_len=seq, attention=attention, device="cpu",
                                precision=core.precision_preset(precision))
    assert act.total_bytes(act.layer_activations(arch, setup)) == without_positions
    assert act.total_bytes(act.sliding_window_layer(arch, setup)) == rotating


def test_the_experts_keep_every_token_whatever_k_is():
    setup = act.ActivationSetup(micro_batch_size=2, seq_len=32, attention="sdpa", device="cpu",
                                precision=core.precision_preset("bf16"))
    one, four = (act.total_bytes(act.layer_activations(architecture_from_hf_config(
        {**SMALL, "num_experts_per_tok": k}), setup)) for k in (1, 4))
    assert four - one == 2 * 32 * 3 * 8  # only top-k's int64 indices grow


@pytest.mark.parametrize("config, field", [
    ({"interleave_moe_layer_step": 2}, "model.hf_config.interleave_moe_layer_step"),
    ({"moe_layers": [1, 3]}, "model.hf_config.moe_layers"),
    ({"moe_layers": ["0", 1, 2, 3]}, "model.hf_config.moe_layers"),
    ({"attention_chunk_size": None, "no_rope_layers": [1, 1, 1, 0]}, "model.hf_config.attention_chunk_size"),
    ({"layer_types": ["full_attention"] * 4}, "model.hf_config.layer_types"),
    ({"no_rope_layers": [1, 2, 1, 0]}, "model.hf_config.no_rope_layers"),
    ({"attention_dropout": 0.1}, "model.hf_config.attention_dropout"),
    ({"output_router_logits": True}, "model.hf_config.output_router_logits"),
])
def test_what_is_not_modelled_is_refused_by_name(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({**SMALL, **config})
    assert error.value.field == field


def test_a_llama4_config_reads_its_text_config_and_names_it():
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({"model_type": "llama4", "text_config": {"moe_layers": [0]}})
    assert error.value.field == "model.hf_config.text_config.moe_layers"


@pytest.mark.parametrize("training, parallelism, field", [
    ({"attention": "flash"}, {}, "training.attention"),
    ({"finetuning": Finetuning(method="lora", target_modules=("all-linear",))}, {}, "finetuning.target_modules"),
    ({"finetuning": Finetuning(method="lora", target_modules=("q_proj", "gate_proj"))}, {},
     "finetuning.target_modules"),
    ({"finetuning": Finetuning(method="qlora")}, {}, "finetuning.method"),
    ({"finetuning": Finetuning(method="full", frozen_layers=1)}, {}, "finetuning.method"),
    ({}, {"tensor": 2}, "parallelism.tensor"),
    ({}, {"context": 2}, "parallelism.context"),
    ({"precision": core.precision_preset("autocast-bf16")}, {}, "training.precision"),
])
def test_setups_not_measured_are_refused_by_name(training, parallelism, field):
    arch = architecture_from_hf_config(SMALL)
    with pytest.raises(DomainError) as error:
        core.estimate(architecture=arch, training=core.Training(seq_len=64, **training),
                      parallelism=Parallelism(**parallelism))
    assert error.value.field == field


def test_scout_estimates_on_its_own_record():
    arch = architecture_from_hf_config({"model_type": "llama4_text", "num_hidden_layers": 4})
    result = core.estimate(architecture=arch, training=core.Training(seq_len=256))
    assert not any("has no record" in warning for warning in result.warnings)


@pytest.mark.parametrize("precision, targets, layers", [
    # Measured on CPU with peft 0.21 (validation/finetuning.py, three layers: rotating, without positions, rotating):
    # with q_proj and v_proj adapted the lowest layer's K needs no gradient, so its L2 norm keeps nothing.
    ("bf16", ("q_proj", "v_proj"), (315_648, 315_008, 340_992)),
    ("fp32", ("q_proj", "k_proj", "v_proj", "o_proj"), (619_776, 659_584, 685_568)),
])
def test_lora_on_the_attention_keeps_what_was_measured(precision, targets, layers):
    config = {**SMALL, "num_hidden_layers": 3, "head_dim": 16, "intermediate_size_mlp": 192,
              "no_rope_layers": [1, 0, 1]}
    arch = architecture_from_hf_config(config)
    tuning = Finetuning(method="lora", rank=8, target_modules=targets, dropout=0.1 if len(targets) == 4 else 0.0)
    setup = act.ActivationSetup(micro_batch_size=2, seq_len=32, attention="sdpa", device="cpu",
                                precision=core.precision_preset(precision), finetuning=tuning)
    kept = (act.sliding_window_layer(arch, setup, layer_role(tuning, 0)),
            act.layer_activations(arch, setup, layer_role(tuning, 1)),
            act.sliding_window_layer(arch, setup, layer_role(tuning, 2)))
    assert tuple(act.total_bytes(items) for items in kept) == layers
