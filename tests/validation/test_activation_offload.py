"""Activation offloading (validation/activation_offload.py): under full recomputation the tensors torchtune's pack
hook moves while the decoder layers run are one input per layer, and trainmem's host line is their pinned blocks."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from app.core.activation_offload import pinned_bytes  # noqa: E402
from validation import activation_offload as ao  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", ao.CASES, ids=lambda c: f"h{c.hidden_size}-L{c.layers}-b{c.micro_batch_size}-s{c.seq_len}")
def test_the_host_line_is_what_the_pack_hook_moves_in_the_layers(case):
    counted = ao.count(case)
    each = case.micro_batch_size * case.seq_len * case.hidden_size * 2  # one bf16 layer input
    expected = [each] * case.layers if each >= ao.MIN_BYTES else []
    assert list(counted.in_layers) == expected
    assert ao.predicted(case) == sum(pinned_bytes(size) for size in counted.in_layers)


def test_the_embedding_and_final_norm_move_too_and_are_left_on_the_gpu_here():
    # token ids (int64) and the final RMSNorm's fp32 input, its normalised fp32 output and bf16 output
    case = ao.CASES[0]
    tokens = case.micro_batch_size * case.seq_len
    assert sorted(ao.count(case).elsewhere) == sorted([tokens * 8, tokens * case.hidden_size * 4,
                                                       tokens * case.hidden_size * 4, tokens * case.hidden_size * 2])


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("case", ao.CASES, ids=lambda c: f"h{c.hidden_size}-L{c.layers}-b{c.micro_batch_size}-s{c.seq_len}")
def test_transformers_offloaded_checkpoints_move_each_layers_input_and_keep_none(case, reentrant):
    counted = ao.count_checkpoints(case, reentrant=reentrant)
    each = case.micro_batch_size * case.seq_len * case.hidden_size * 2  # one bf16 layer input, whatever its size
    assert list(counted.moved) == [each] * case.layers
    assert counted.inputs_alive == 0  # none left where the layers ran
    assert counted.fetched_alive == 1  # the input brought back for the layer being recomputed
    assert ao.predicted(case, "checkpoints-to-host") == case.layers * pinned_bytes(each)


def test_without_offload_the_checkpoints_keep_every_layers_input():
    case = ao.CASES[0]
    counted = ao.count_checkpoints(case, offload=False)
    assert counted.moved == () and counted.inputs_alive == case.layers
