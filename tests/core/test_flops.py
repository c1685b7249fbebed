"""Step FLOPs against Korthikanti et al. 2022 (arXiv:2205.05198), section 6.

For GPT (I = 4h, a·d = h) the paper counts, per iteration of b sequences of s tokens,
72·b·s·l·h²·(1 + s/6h + V/12lh) FLOPs without recomputation and
96·b·s·l·h²·(1 + s/6h + V/16lh) with full recomputation. Multiplied out in integers:
72bslh² + 12bs²lh + 6bshV and 96bslh² + 16bs²lh + 6bshV.
"""

from __future__ import annotations

import pytest

from app import core
from app.core.flops import step_flops

# GPT-3 175B as the paper's Table 3 lists it: 96 layers, h = 12,288, 96 heads, s = 2,048, V = 51,200.
GPT3 = core.Architecture(num_hidden_layers=96, hidden_size=12288, num_attention_heads=96, vocab_size=51200,
                         mlp="gelu", norm="layernorm", position_embedding="learned", max_position_embeddings=2048,
                         attention_bias=True, mlp_bias=True)


@pytest.mark.parametrize("b", [1, 4])
def test_gpt3_step_matches_the_papers_formula(b):
    s, l, h, v = 2048, 96, 12288, 51200  # noqa: E741 - the paper's symbols
    flops = step_flops(GPT3, micro_batch_size=b, seq_len=s)
    assert flops.step == 72 * b * s * l * h * h + 12 * b * s * s * l * h + 6 * b * s * h * v
    assert flops.step + flops.recomputed("full") == 96 * b * s * l * h * h + 16 * b * s * s * l * h + 6 * b * s * h * v


def test_selective_reruns_only_the_attention_core():
    s, l, h = 2048, 96, 12288  # noqa: E741 - the paper's symbols
    flops = step_flops(GPT3, micro_batch_size=1, seq_len=s)
    assert flops.recomputed("selective") == 4 * s * s * h * l  # QKᵀ and ×V: 2·s²·h each, per layer
    assert flops.recomputed("none") == 0
    # Relative to the step, 4bs²hl over 72bslh²(1 + s/6h + V/12lh): (s/18h) / (1 + s/6h + V/12lh).
    v = 51200
    assert flops.recompute_fraction("selective") == pytest.approx((s / (18 * h)) / (1 + s / (6 * h) + v / (12 * l * h)))
    # Full: the paper's 96/72 ratio less the output layer, (1/3)(1 + s/6h) / (1 + s/6h + V/12lh).
    assert flops.recompute_fraction("full") == pytest.approx((1 + s / (6 * h)) / 3 / (1 + s / (6 * h) + v / (12 * l * h)))


def test_grouped_kv_heads_and_gated_mlp_count_their_own_matrices():
    arch = core.get_preset("llama-3-8b").architecture  # h 4,096, 8 K/V heads of 128, I 14,336, V 128,256
    h, g, d, i = 4096, 8, 128, 14336
    layer = h * h + 2 * h * g * d + h * h + 3 * h * i  # q, k and v, o, gate/up/down
    flops = step_flops(arch, micro_batch_size=1, seq_len=4096)
    assert flops.layer_matmuls == 2 * 4096 * 32 * layer
    assert flops.output_layer == 2 * 4096 * 128256 * h
