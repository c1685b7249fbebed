"""Gemma 3's sliding-window layers in the ledger: under sdpa past the window each keeps the mask in the activations'
dtype and K/V repeated to every head, a view where there is one K/V head (measured on CPU, docs/VALIDATION.md
"Gemma 3 and OLMo 2", and on a GPU at real size, "On a GPU")."""

from dataclasses import replace
from typing import Any

import pytest

from app import core
from app.core import activations as act
from app.core.architecture import layer_tensors
from app.core.finetuning import Finetuning

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
    # Shorter than the 512-token window: no mask (transformers adds it from a sequence as long as the window)
    setup = core.activation_setup(core.Training(seq_len=511, attention="sdpa"), core.Parallelism())
    assert layers_bytes(511) == 26 * act.total_bytes(act.layer_activations(ARCH, setup))
    at_window = core.activation_setup(core.Training(seq_len=512, attention="sdpa"), core.Parallelism())
    assert layers_bytes(512) > 26 * act.total_bytes(act.layer_activations(ARCH, at_window))
    assert layers_bytes(8192, "full") == 26 * 8192 * 1152 * 2  # each layer's bf16 input, h = 1,152


def _mlp_backward(training: Any, arch: Any = None) -> int:
    estimate = core.estimate(architecture=arch or core.get_preset("llama-3-8b").architecture, training=training)
    return next((buffer.bytes for buffer in estimate.ledger if buffer.key == "mlp.backward"), 0)


def test_gated_mlp_backward_working_set() -> None:
    # Three n × I gradients and the n × h gradient of the layer's output in bf16, less the adapters' gradients
    # that come later (measured on CPU and on an H200: docs/VALIDATION.md).
    n, h, inter = 32768, 4096, 14336
    lora = Finetuning(method="lora", rank=16, target_modules=("q_proj", "v_proj"))
    training = core.Training(seq_len=n, attention="sdpa", precision=core.precision_preset("bf16"),
                             activation_checkpointing="full", finetuning=lora)
    adapters = 16 * (4096 + 4096) + 16 * (4096 + 1024)  # q_proj and v_proj's A and B, one layer, fp32
    assert _mlp_backward(training) == 3 * n * inter * 2 + n * h * 2 - adapters * 4
    # trained in full, the product is freed and only the down projection's gradient is written by then
    full = replace(training, finetuning=Finetuning())
    layer = sum(t.elements for t in layer_tensors(core.get_preset("llama-3-8b").architecture))
    expected = 2 * n * inter * 2 + n * h * 2 - (layer - inter * h) * 2
    assert _mlp_backward(full) == expected > 0
    # left out: autocast, eager attention, adapters on the MLP, a mixture of experts
    assert _mlp_backward(replace(full, precision=core.precision_preset("autocast-bf16"))) == 0
    assert _mlp_backward(replace(training, attention="eager")) == 0
    all_linear = Finetuning(method="lora", rank=16, target_modules=("all-linear",))
    assert _mlp_backward(replace(training, finetuning=all_linear)) == 0
    assert _mlp_backward(replace(training, finetuning=Finetuning()),
                         core.get_preset("mixtral-8x7b").architecture) == 0
