"""The interleaved pipeline schedule against Korthikanti et al. 2022 (arXiv:2205.05198), section 4.2.3."""

from __future__ import annotations

import pytest

from app import core

# GPT-3 175B as published there: 96 layers, h = 12,288, 96 heads, s = 2,048, V = 51,200; t = 8, p = 8.
GPT3 = core.Architecture(num_hidden_layers=96, hidden_size=12288, num_attention_heads=96, vocab_size=51200,
                         mlp="gelu", norm="layernorm", position_embedding="learned", max_position_embeddings=2048,
                         attention_bias=True, mlp_bias=True)


def _ledger(virtual_stages: int) -> dict[str, core.Buffer]:
    result = core.estimate(
        architecture=GPT3,
        training=core.Training(seq_len=2048, implementation="megatron", activation_checkpointing="selective",
                               precision=core.precision_preset("megatron-bf16"), gradient_accumulation_steps=64),
        parallelism=core.Parallelism(tensor=8, pipeline=8, sequence_parallel=True, virtual_stages=virtual_stages))
    return {buffer.key: buffer for buffer in result.ledger}


def test_gpt3_first_stage_holds_a_fifth_more_with_four_virtual_stages():
    plain, interleaved = _ledger(1), _ledger(4)
    # The first stage holds L(1 + (p - 1)/(p m)) layers' activations where 1F1B holds L: 1 + 7/32 = 1.21875.
    layers = plain["activations.layers"].bytes
    held = layers + plain["activations.in_flight"].bytes - 7 * plain["activations.embedding"].bytes
    assert held == 8 * layers
    assert interleaved["activations.interleaved"].bytes / held == pytest.approx(7 / 32)
    assert "activations.interleaved" not in plain


@pytest.mark.parametrize("parallelism, micro_batches, message", [
    (core.Parallelism(virtual_stages=2), 1, "more than one pipeline stage"),
    (core.Parallelism(pipeline=8, virtual_stages=5), 8, "divisible"),
    (core.Parallelism(pipeline=8, virtual_stages=4), 4, "multiple of 8"),
])
def test_what_the_interleaved_schedule_needs(parallelism, micro_batches, message):
    with pytest.raises(core.DomainError, match=message) as error:
        core.estimate(architecture=GPT3, parallelism=parallelism,
                      training=core.Training(gradient_accumulation_steps=micro_batches))
    assert error.value.field == "parallelism.virtual_stages"
