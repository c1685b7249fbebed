"""The load-balancing loss that ``output_router_logits`` adds (load_balancing_loss_func, transformers 5.24).

Measured on CPU with validation/measure.py's SavedTensorRecorder: the head's saved storages of a small model
(hidden 64, 4 heads, 2 key/value heads, vocabulary 300) built from its config with and without
``output_router_logits``, one forward pass with labels (validation/moe.py's cases; the Qwen2-MoE one as
validation/qwen2_moe.py builds it, with ``mlp_only_layers`` [0] of 3 layers). Per sparse layer the loss keeps the
softmax over the router logits (n x E, the activations' dtype) and the int64 top-k indices (n x k), and once the
fp32 fraction of tokens per expert (E).
"""

import pytest

from app.core import DomainError, architecture_from_hf_config, precision_preset
from app.core.activations import ActivationSetup, head_activations, layer_activations, total_bytes
from app.core.architecture import Architecture

SHAPE = {"vocab_size": 300, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 256, "num_hidden_layers": 2}
MIXTRAL = {"model_type": "mixtral", "intermediate_size": 48, **SHAPE}
QWEN3_MOE = {"model_type": "qwen3_moe", "intermediate_size": 96, "moe_intermediate_size": 48, "head_dim": 32,
             **SHAPE}
QWEN2_MOE = {"model_type": "qwen2_moe", "intermediate_size": 96, "moe_intermediate_size": 32,
             "shared_expert_intermediate_size": 80, "mlp_only_layers": [0], **SHAPE, "num_hidden_layers": 3}


def _setup(precision: str, batch: int, seq: int) -> ActivationSetup:
    return ActivationSetup(micro_batch_size=batch, seq_len=seq, attention="sdpa", device="cpu",
                           precision=precision_preset(precision))


@pytest.mark.parametrize(("config", "experts", "per_token", "precision", "batch", "seq", "head_off", "head_on"), [
    # Measured head bytes without / with output_router_logits (SavedTensorRecorder, CPU, transformers 5.24).
    # Mixtral bf16, 2 sparse layers, n = 64: + 2·64·4·2 (softmax) + 2·64·2·8 (top-k) + 4·4 = 3,088.
    (MIXTRAL, 4, 2, "bf16", 2, 32, 110_336, 113_424),
    # Mixtral fp32: + 2·64·4·4 + 2·64·2·8 + 16 = 4,112.
    (MIXTRAL, 4, 2, "fp32", 2, 32, 126_720, 130_832),
    # Qwen3-MoE bf16, n = 48, E 6, k 3: + 2·48·6·2 + 2·48·3·8 + 6·4 = 3,480.
    (QWEN3_MOE, 6, 3, "bf16", 1, 48, 82_760, 86_240),
    # Qwen3-MoE fp32: + 2·48·6·4 + 2·48·3·8 + 24 = 4,632.
    (QWEN3_MOE, 6, 3, "fp32", 1, 48, 95_048, 99_680),
    # Qwen2-MoE bf16 with its first of 3 layers dense: the 2 sparse layers only, + 2·64·6·2 + 2·64·2·8 + 24 = 3,608.
    (QWEN2_MOE, 6, 2, "bf16", 2, 32, 110_336, 113_944),
])
def test_head_keeps_what_the_load_balancing_loss_saves(config, experts, per_token, precision, batch, seq,
                                                       head_off, head_on):
    moe = {"num_local_experts" if config["model_type"] == "mixtral" else "num_experts": experts,
           "num_experts_per_tok": per_token}
    setup = _setup(precision, batch, seq)
    off = architecture_from_hf_config({**config, **moe})
    on = architecture_from_hf_config({**config, **moe, "output_router_logits": True, "router_aux_loss_coef": 0.02})
    assert (off.output_router_logits, on.output_router_logits) == (False, True)
    assert total_bytes(head_activations(off, setup)) == head_off
    assert total_bytes(head_activations(on, setup)) == head_on
    # The layers keep the same: the loss reads the router logits after the last layer.
    assert total_bytes(layer_activations(on, setup)) == total_bytes(layer_activations(off, setup))


def test_off_by_default_and_only_for_a_mixture_of_experts():
    assert not architecture_from_hf_config({**MIXTRAL, "num_local_experts": 4}).output_router_logits
    # A dense model's config may carry the key (PretrainedConfig keeps it); it changes nothing there.
    assert not architecture_from_hf_config({**SHAPE, "model_type": "qwen3", "intermediate_size": 96,
                                            "output_router_logits": True}).output_router_logits
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=300,
                     output_router_logits=True)
    assert error.value.field == "model.output_router_logits"


def test_router_aux_loss_coef_must_be_a_number():
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({**MIXTRAL, "output_router_logits": True, "router_aux_loss_coef": "high"})
    assert error.value.field.endswith("router_aux_loss_coef")


def test_router_logits_live_with_the_models_output() -> None:
    """Mixtral-8x7B with output_router_logits: 32 routed layers × 4,096 tokens × 8 experts × 2 bytes (bf16) of
    router logits, collected in forward and kept with the output (the plain loop keeps it, the Trainer's drops it
    once the loss is computed); the peaks of two steps with them measured within 0.04% (docs/VALIDATION.md)."""
    from dataclasses import replace

    from app import core

    arch = replace(core.get_preset("mixtral-8x7b").architecture, output_router_logits=True)
    training = core.Training(seq_len=4096, attention="flash", precision=core.precision_preset("bf16"))
    result = core.estimate(architecture=arch, training=training, parallelism=core.Parallelism(data=8, zero_stage=3))
    held = {buffer.key: buffer for buffer in result.ledger if buffer.key.startswith("moe_aux.router_logits")}
    assert held["moe_aux.router_logits"].bytes == 32 * 4096 * 8 * 2 == 2_097_152
    assert held["moe_aux.router_logits"].life.scope == "run"  # the plain loop keeps the output
    trainer = core.estimate(architecture=arch, training=replace(training, loop="hf-trainer"),
                            parallelism=core.Parallelism(data=8, zero_stage=3))
    dropped = next(buffer for buffer in trainer.ledger if buffer.key == "moe_aux.router_logits")
    assert dropped.life.scope == "micro-batch"
