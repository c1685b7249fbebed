"""Activations tensor by tensor: Megatron's accounting against Korthikanti et al. 2022, Table 2."""

import random

import pytest

from app.core import Architecture, precision_preset
from app.core.activations import (
    ActivationSetup,
    checkpointed_layer_activations,
    head_activations,
    layer_activations,
    total_bytes,
)

# GPT-3 175B's layer shape (Brown et al. 2020, Table 2.1): a = 96 heads, h = 12288, s = 2048;
# Korthikanti et al. run it with t = 8. LayerNorm, GeLU MLP of 4h, multi-head attention, dropout.
A, H, S, B, T = 96, 12288, 2048, 1, 8
GPT = Architecture(num_hidden_layers=96, hidden_size=H, num_attention_heads=A, vocab_size=51200,
                   max_position_embeddings=2048, mlp="gelu", norm="layernorm", position_embedding="learned",
                   attention_bias=True, mlp_bias=True, dropout=0.1)


def megatron(*, t=1, sp=False, attention="eager", b=B, s=S, precision="bf16-fp32-master"):
    return ActivationSetup(micro_batch_size=b, seq_len=s, precision=precision_preset(precision), attention=attention,
                           implementation="megatron", tensor_parallel=t, sequence_parallel=sp)


def per_layer(arch, setup, checkpointing="none"):
    return total_bytes(checkpointed_layer_activations(arch, setup, checkpointing))


# Korthikanti et al. 2022, Table 2 (activation bytes per layer, 16-bit activations):
def test_table2_no_parallelism():  # sbh(34 + 5as/h)
    assert per_layer(GPT, megatron()) == S * B * H * 34 + 5 * A * S * S * B


def test_table2_tensor_parallel():  # sbh(10 + 24/t + 5as/(ht))
    assert per_layer(GPT, megatron(t=T)) == S * B * H * 10 + S * B * H * 24 // T + 5 * A * S * S * B // T


def test_table2_tensor_and_sequence_parallel():  # sbh(34/t + 5as/(ht))
    assert per_layer(GPT, megatron(t=T, sp=True)) == S * B * H * 34 // T + 5 * A * S * S * B // T


def test_table2_selective_recompute():  # sbh(10 + 24/t), and 34sbh/t with sequence parallelism
    assert per_layer(GPT, megatron(t=T), "selective") == S * B * H * 10 + S * B * H * 24 // T
    assert per_layer(GPT, megatron(t=T, sp=True), "selective") == S * B * H * 34 // T


def test_table2_full_recompute():  # 2sbh (the layer input), /t with sequence parallelism
    assert per_layer(GPT, megatron(t=T), "full") == 2 * S * B * H
    assert per_layer(GPT, megatron(t=T, sp=True), "full") == 2 * S * B * H // T


def test_megatron_llama_layer_by_hand():
    # Llama-3-8B (h 4096, a 32, g 8, d 128, I 14336, no dropout), flash attention, bf16, b=1, s=4096:
    # norms' inputs 2 x 2sbh, their outputs (QKV and MLP input) 2 x 2sbh, Q 2sbh, K and V 2 x 2sb(gd),
    # output-projection input 2sbh, fp32 log-sum-exp 4bas, gate+up 2 x 2sbI, SwiGLU output 2sbI.
    arch = Architecture(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                        intermediate_size=14336, vocab_size=128256)
    s, h, gd, inter, a = 4096, 4096, 8 * 128, 14336, 32
    expected = 4 * 2 * s * h + 2 * s * h + 2 * 2 * s * gd + 2 * s * h + 4 * a * s + 2 * 2 * s * inter + 2 * s * inter
    assert per_layer(arch, megatron(attention="flash", s=s)) == expected


def test_megatron_loss_keeps_fp32_softmax_split_over_tensor_ranks():
    # Korthikanti et al. 2022, section 4.3: the cross entropy keeps 4sbv/t bytes.
    items = {item.name: item.bytes for item in head_activations(GPT, megatron(t=T))}
    assert items["loss.softmax_fp32"] == 4 * S * B * 51200 // T


def test_flash_has_no_quadratic_term():
    one, two = (per_layer(GPT, megatron(attention="flash", s=s)) for s in (1024, 2048))
    assert two == 2 * one
    eager_one, eager_two = (per_layer(GPT, megatron(s=s)) for s in (1024, 2048))
    assert eager_two > 2 * eager_one


def test_no_dropout_no_masks():
    no_dropout = Architecture(**{**GPT.__dict__, "dropout": 0.0})
    names = {item.name for item in layer_activations(no_dropout, megatron())}
    assert not any("mask" in name for name in names)
    # Masks are 1 byte each on CUDA: sbh (attention residual) + sbh (MLP residual) + as^2 b (softmax);
    # the softmax dropout output (2as^2 b) goes too.
    assert per_layer(GPT, megatron()) - per_layer(no_dropout, megatron()) == 2 * S * B * H + A * S * S * B + 2 * A * S * S * B


def test_grouped_query_attention_shrinks_keys_and_values():
    mha = Architecture(num_hidden_layers=2, hidden_size=4096, num_attention_heads=32, vocab_size=1000)
    gqa = Architecture(num_hidden_layers=2, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, vocab_size=1000)
    setup = megatron(attention="flash", s=1024)
    # K and V each lose (32 - 8) heads of 128 columns at 2 bytes per token.
    assert per_layer(mha, setup) - per_layer(gqa, setup) == 2 * 1024 * (32 - 8) * 128 * 2


def random_arch(rng):
    heads = rng.choice([4, 8, 16])
    return Architecture(
        num_hidden_layers=rng.randint(1, 8), hidden_size=heads * rng.choice([16, 32, 64]), num_attention_heads=heads,
        num_key_value_heads=rng.choice([h for h in (1, 2, 4, heads) if heads % h == 0]),
        intermediate_size=rng.choice([64, 256, 1000]), vocab_size=rng.randint(10, 5000),
        mlp=rng.choice(["gelu", "relu", "swiglu", "geglu"]), norm=rng.choice(["layernorm", "rmsnorm"]),
        dropout=rng.choice([0.0, 0.1]), model_type=rng.choice([None, "llama", "gpt2", "gemma"]),
        hidden_act=rng.choice([None, "gelu_new", "silu"]),
    )


@pytest.mark.parametrize("seed", range(30))
def test_checkpointing_never_increases_activations(seed):
    rng = random.Random(seed)
    arch = random_arch(rng)
    setup = ActivationSetup(
        micro_batch_size=rng.randint(1, 4), seq_len=rng.choice([16, 128, 1024]),
        precision=precision_preset(rng.choice(["fp32", "bf16", "autocast-bf16", "bf16-fp32-master"])),
        attention=rng.choice(["eager", "flash"]), implementation=rng.choice(["megatron", "transformers"]),
        tensor_parallel=rng.choice([1, 2, 4]) if arch.kv_heads % 4 == 0 else 1, sequence_parallel=rng.random() < 0.5,
    )
    none, selective, full = (per_layer(arch, setup, policy) for policy in ("none", "selective", "full"))
    assert none >= selective >= full > 0


# Gemma 3 and OLMo 2 as transformers 5.24 writes them, against the tensors measured on CPU for these very shapes
# (validation/dense.py, docs/VALIDATION.md "Gemma 3 and OLMo 2": h 64, a 4, g 2, d 32, I 96, b 2, s 32, bf16).
def _small(model_type, **changes):
    from app.core import architecture_from_hf_config

    shape: dict[str, object] = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                                "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 300,
                                "max_position_embeddings": 256}
    if model_type == "gemma3_text":
        shape |= {"head_dim": 32, "layer_types": ["sliding_attention", "full_attention"] * 2}
    return architecture_from_hf_config({"model_type": model_type, **shape, **changes})


def _cpu(attention, s=32):
    return ActivationSetup(micro_batch_size=2, seq_len=s, precision=precision_preset("bf16"), attention=attention,
                           device="cpu")


def test_sliding_window_layer_under_sdpa_keeps_its_mask_and_full_width_key_value():
    from app.core.activations import sliding_window_layer

    gemma3 = _small("gemma3_text", sliding_window=16)
    b, s, a, g, d = 2, 32, 4, 2, 32
    # the mask converted to bf16 (b x 1 x s x s), K and V repeated from g to a heads: measured 369,408 B a layer
    assert per_layer(gemma3, _cpu("sdpa")) == 348_928
    assert total_bytes(sliding_window_layer(gemma3, _cpu("sdpa"))) == 348_928 + b * s * s * 2 + 2 * b * s * (a - g) * d * 2
    assert total_bytes(sliding_window_layer(gemma3, _cpu("sdpa"))) == 369_408
    # the mask is added to the scores: kept by none
    assert sliding_window_layer(gemma3, _cpu("eager")) == layer_activations(gemma3, _cpu("eager"))
    # transformers skips the mask only for a sequence shorter than the window: measured 369,408 B at a window of
    # 32 tokens, 348,928 B (no mask) at 33
    reaches = _small("gemma3_text", sliding_window=32)
    assert total_bytes(sliding_window_layer(reaches, _cpu("sdpa"))) == 369_408
    fits = _small("gemma3_text", sliding_window=33)
    assert sliding_window_layer(fits, _cpu("sdpa")) == layer_activations(fits, _cpu("sdpa"))


def test_sliding_window_repeat_of_one_key_value_head_is_a_view():
    from app.core.activations import sliding_window_layer

    # Gemma 3 1B has one K/V head: repeat_kv's reshape of the expanded head is a view, so only the mask is
    # added. Gemma-3-1b at 4,096 tokens, traced on CPU and on a GPU (docs/VALIDATION.md), keeps 22 × 33,554,432 B
    # beyond its full-attention layers: 22 sliding-window layers' bf16 masks (4,096² × 2 B), no repeated K/V.
    mqa = _small("gemma3_text", sliding_window=16, num_key_value_heads=1)
    b, s = 2, 32
    assert (total_bytes(sliding_window_layer(mqa, _cpu("sdpa"))) - total_bytes(layer_activations(mqa, _cpu("sdpa")))
            == b * s * s * 2)


def test_gemma3_and_olmo2_layers_as_measured():
    assert per_layer(_small("gemma3_text"), _cpu("sdpa")) == 348_928
    assert per_layer(_small("gemma3_text"), _cpu("eager")) == 413_440
    assert per_layer(_small("olmo2"), _cpu("sdpa")) == 206_848
    assert per_layer(_small("olmo2"), _cpu("eager")) == 263_168


def test_olmo2_normalises_q_and_k_over_the_projection():
    # Olmo2RMSNorm over a*d = 128 and g*d = 64 features: one fp32 reciprocal RMS per token each (b*s = 64 tokens)
    rstd = {item.name: item.bytes for item in layer_activations(_small("olmo2"), _cpu("sdpa")) if "rstd" in item.name}
    assert rstd["attn.q_norm.rstd"] == rstd["attn.k_norm.rstd"] == 64 * 4
    assert "attn_norm.rstd" not in rstd and rstd["attn_post_norm.rstd"] == rstd["mlp_post_norm.rstd"] == 64 * 4


def test_math_path_without_dropout_keeps_one_s_squared_tensor():
    # CUDA sdpa runs torch's math path for fp32 with grouped K/V (Llama-3-8B): without attention dropout only the
    # softmax's fp32 output is b·a·s² (the second matmul keeps that same tensor). Measured on an H200 at 1,024
    # tokens, each forward event within 0.06% (docs/VALIDATION.md, "On a GPU"); with three such tensors a layer,
    # as with dropout, the last forward layer was predicted 10.8% high.
    from app import core

    llama = core.get_preset("llama-3-8b").architecture
    setup = ActivationSetup(micro_batch_size=1, seq_len=1024, precision=precision_preset("fp32"), attention="sdpa")
    squared = [item.name for item in layer_activations(llama, setup) if item.bytes == 32 * 1024 * 1024 * 4]
    assert squared == ["attn.softmax"]
    gpt2 = core.get_preset("gpt2").architecture  # attention dropout 0.1: CPU sdpa takes the math path
    cpu = ActivationSetup(micro_batch_size=1, seq_len=1024, precision=precision_preset("fp32"), attention="sdpa",
                          device="cpu")
    squared = [item.name for item in layer_activations(gpt2, cpu) if item.bytes == 12 * 1024 * 1024 * 4]
    assert squared == ["attn.softmax", "attn.softmax_dropout_mask", "attn.softmax_dropout_output"]
