"""Gemma 3's sliding-window layers in the ledger: under sdpa past the window each keeps the mask in the activations'
dtype and K/V repeated to every head, a view where there is one K/V head (measured on CPU, docs/VALIDATION.md
"Gemma 3 and OLMo 2", and on a GPU at real size, "On a GPU")."""

from dataclasses import replace
from typing import Any

import pytest

from app import core
from app.core import activations as act

ARCH = core.get_preset("gemma-3-1b").architecture  # 26 layers, 22 of them sliding, window 512; a=4, g=1, d=256


def layers_bytes(seq_len: int, checkpointing: Any = "none", attention: Any = "sdpa") -> int:
    training = core.Training(seq_len=seq_len, attention=attention, activation_checkpointing=checkpointing)
    estimate = core.estimate(architecture=ARCH, training=training)
    return next(buffer.bytes for buffer in estimate.ledger if buffer.key == "activations.layers")


def test_gemma_3_1b_layout() -> None:
    assert (ARCH.num_hidden_layers, ARCH.sliding_window_layers, ARCH.sliding_window) == (26, 22, 512)
    assert (ARCH.num_attention_heads, ARCH.kv_heads, ARCH.head_size) == (4, 1, 256)


def test_past_the_window_each_sliding_layer_keeps_its_mask() -> None:
    s = 8192
    setup = core.activation_setup(core.Training(seq_len=s, attention="sdpa"), core.Parallelism())
    full_layer = act.total_bytes(act.layer_activations(ARCH, setup))
    mask = s * s * 2  # b·s² in bf16; one K/V head: repeated to four heads as a view, so nothing more
    assert layers_bytes(s) == 26 * full_layer + 22 * mask


def test_fp32_on_cuda_sliding_layers_take_the_memory_efficient_kernel() -> None:
    # fp32 with a grouped K/V head: sdpa's full-attention layers run the math path (flash refuses fp32,
    # memory-efficient refuses grouped K/V), but the sliding-window layers, given a mask and K/V repeated to
    # every head, run the memory-efficient kernel: no s x s probabilities there. Measured on an H200: 4,096
    # tokens, 50,774,720,000 B at the peak of two steps (docs/VALIDATION.md, "On a GPU").
    s = 4096
    training = core.Training(seq_len=s, attention="sdpa", precision=core.precision_preset("fp32"))
    setup = core.activation_setup(training, core.Parallelism())
    assert act.attention_kernel(ARCH, setup) == "math"
    math_layer = act.total_bytes(act.layer_activations(ARCH, setup))
    efficient = replace(setup, attention="memory-efficient")
    efficient_layer = act.total_bytes(act.layer_activations(ARCH, efficient))
    estimate = core.estimate(architecture=ARCH, training=training)
    layers = next(buffer.bytes for buffer in estimate.ledger if buffer.key == "activations.layers")
    assert efficient_layer + s * s * 4 < math_layer
    assert layers == 4 * math_layer + 22 * (efficient_layer + s * s * 4)


@pytest.mark.parametrize("attention", ["eager", "flash"])
def test_no_extra_without_sdpa(attention: Any) -> None:
    setup = core.activation_setup(core.Training(seq_len=8192, attention=attention), core.Parallelism())
    assert layers_bytes(8192, attention=attention) == 26 * act.total_bytes(act.layer_activations(ARCH, setup))


def test_within_the_window_no_extra_and_full_recomputation_keeps_inputs_only() -> None:
    setup = core.activation_setup(core.Training(seq_len=512, attention="sdpa"), core.Parallelism())
    assert layers_bytes(512) == 26 * act.total_bytes(act.layer_activations(ARCH, setup))
    assert layers_bytes(8192, "full") == 26 * 8192 * 1152 * 2  # each layer's bf16 input, h = 1,152
