"""Context parallelism: each rank keeps the activations of its share of every sequence, and K/V chunks in flight."""

from __future__ import annotations

import pytest

from app import core
from app.core.job import Job
from app.core.solver import solve

LLAMA = core.get_preset("llama-3-8b").architecture


def _estimate(context: int, seq_len: int = 32768, **parallelism) -> core.Estimate:
    return core.estimate(architecture=LLAMA, training=core.Training(seq_len=seq_len, activation_checkpointing="full"),
                         parallelism=core.Parallelism(context=context, zero_stage=1, **parallelism))


def test_activations_follow_the_rank_share_of_the_sequence():
    whole, split = _estimate(1, 8192), _estimate(4, 32768)
    assert split.per_gpu["activations"] == whole.per_gpu["activations"]  # a quarter of 32,768 is 8,192 tokens
    chunks = {buffer.key: buffer for buffer in split.ledger}["context.kv_chunks"]
    assert chunks.bytes == 2 * 2 * 8192 * 8 * 128 * 2  # two chunks of K and V, 8 K/V heads of 128, bf16


def test_zero_shards_over_data_and_context():
    split = _estimate(4, data=2)
    alone = _estimate(1, 8192, data=8)
    assert split.per_gpu["optimizer_states"] == alone.per_gpu["optimizer_states"]  # both over 8 ranks


@pytest.mark.parametrize("seq_len, attention", [(32770, "sdpa"), (32768, "eager")])
def test_what_context_parallelism_needs(seq_len, attention):
    with pytest.raises(core.DomainError) as error:
        core.estimate(architecture=LLAMA, training=core.Training(seq_len=seq_len, attention=attention),
                      parallelism=core.Parallelism(context=4))
    assert error.value.field == "parallelism.context"


def test_the_solver_answers_in_whole_chunks():
    job = Job(architecture=LLAMA, training=core.Training(seq_len=32768, activation_checkpointing="full"),
              parallelism=core.Parallelism(context=4, data=2, zero_stage=3), gpu=core.get_gpu("h100-80gb"))
    answer = solve(job, "seq_len")
    assert answer.value is not None and answer.value % 8 == 0
    assert answer.estimate.gpu is not None and answer.estimate.gpu.fits
