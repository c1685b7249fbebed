"""The CPU-specific `transformers` accounting, checked against byte counts worked out by hand.

Each number below is the sum of the tensors named in its comment, as the validation harness
measured them on torch 2.13.0's CPU build (see docs/VALIDATION.md). No torch needed.
"""

from __future__ import annotations

from app.core import activations as act
from app.core import architecture_from_hf_config, precision_preset

GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 176, "vocab_size": 509}
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 509}


def _setup(precision: str, *, b: int = 2, s: int = 32, attention: act.Attention = "eager",
           device: act.Device = "cpu") -> act.ActivationSetup:
    return act.ActivationSetup(micro_batch_size=b, seq_len=s, precision=precision_preset(precision),
                               attention=attention, device=device)


def _named(items) -> dict[str, int]:
    return {item.name: item.bytes for item in items}


def test_cpu_layernorm_keeps_its_statistics_in_the_input_dtype():
    # bf16 GPT-2, N = 64 tokens: mean and rstd are 64 x 2 B on CPU, 64 x 4 B on CUDA.
    arch = architecture_from_hf_config(GPT2)
    cpu = _named(act.layer_activations(arch, _setup("bf16")))
    cuda = _named(act.layer_activations(arch, _setup("bf16", device="cuda")))
    assert cpu["attn_norm.mean"] == cpu["attn_norm.rstd"] == 128
    assert cuda["attn_norm.mean"] == cuda["attn_norm.rstd"] == 256


def test_cpu_sdpa_with_attention_dropout_is_the_math_path():
    # fp32 GPT-2, b=2, s=32, a=4, d=16 (N = 64): scaled Q, scaled K and V are 64 x 64 x 4 B = 16,384 B
    # each; softmax, its mask and the dropped probabilities are 2 x 4 x 32 x 32 x 4 B = 32,768 B each;
    # the output projection's input 16,384 B; the residual dropout mask 16,384 B.
    arch = architecture_from_hf_config(GPT2)
    attention = {name: size for name, size in _named(act.layer_activations(arch, _setup("fp32", attention="flash"))).items()
                 if name.startswith("attn.") and name != "attn.qkv_input"}
    assert attention == {
        "attn.query_scaled_fp32": 16_384, "attn.key_scaled_fp32": 16_384, "attn.value_fp32": 16_384,
        "attn.softmax": 32_768, "attn.softmax_dropout_mask": 32_768, "attn.softmax_dropout_output": 32_768,
        "attn.out_proj_input": 16_384, "attn.residual_dropout_mask": 16_384,
    }


def test_cpu_sdpa_without_dropout_keeps_no_score_matrix():
    arch = architecture_from_hf_config(GPT2 | {"attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0})
    names = _named(act.layer_activations(arch, _setup("bf16", attention="flash")))
    assert names["attn.logsumexp"] == 2 * 4 * 32 * 4  # b x a x s fp32
    assert "attn.softmax" not in names


def test_gpt2_softmax_is_fp32_under_autocast():
    # The fp32 causal mask promotes the bf16 scores: 2 x 4 x 32 x 32 x 4 B; the dropout then sees bf16.
    names = _named(act.layer_activations(architecture_from_hf_config(GPT2), _setup("autocast-bf16")))
    assert names["attn.softmax"] == 32_768
    assert names["attn.softmax_dropout_mask"] == names["attn.softmax_dropout_output"] == 16_384


def test_llama_attention_dropout_mask_has_the_query_dtype():
    # Pure bf16: the mask is 2 x 4 x 32 x 32 x 2 B; under autocast the query is fp32 after the rotary
    # multiply, so the mask is 4 B wide while the matmul keeps a bf16 cast of the dropped probabilities.
    arch = architecture_from_hf_config(LLAMA | {"attention_dropout": 0.1})
    bf16 = _named(act.layer_activations(arch, _setup("bf16")))
    autocast = _named(act.layer_activations(arch, _setup("autocast-bf16")))
    assert bf16["attn.softmax_dropout_mask"] == 16_384
    assert autocast["attn.softmax_dropout_mask"] == 32_768
    assert autocast["attn.softmax_dropout_output"] == 16_384


def test_multi_query_eager_attention_keeps_views_at_micro_batch_one():
    # One K/V head, b=1, s=64, d=16, bf16: K and V are kept as 64 x 16 x 2 B views, not repeated to 4 heads.
    arch = architecture_from_hf_config(LLAMA | {"num_key_value_heads": 1})
    one = _named(act.layer_activations(arch, _setup("bf16", b=1, s=64)))
    two = _named(act.layer_activations(arch, _setup("bf16", b=2, s=32)))
    assert one["attn.key"] == one["attn.value"] == 2_048
    assert two["attn.key"] == two["attn.value"] == 8_192


def test_gemma_norm_keeps_one_plus_weight_in_fp32():
    arch = architecture_from_hf_config({"model_type": "gemma", "hidden_size": 64, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                        "intermediate_size": 176, "vocab_size": 509})
    names = _named(act.layer_activations(arch, _setup("bf16")))
    assert names["attn_norm.one_plus_weight_fp32"] == names["mlp_norm.one_plus_weight_fp32"] == 64 * 4


def test_recomputation_keeps_position_ids_and_the_eager_mask():
    # bf16 Llama, b=2, s=32: position ids 32 x 8 B; eager causal mask 2 x 32 x 32 x 2 B.
    arch = architecture_from_hf_config(LLAMA)
    eager = _named(act.checkpoint_held_activations(arch, _setup("bf16"), "full"))
    sdpa = _named(act.checkpoint_held_activations(arch, _setup("bf16", attention="flash"), "full"))
    assert eager == {"checkpoint.position_ids": 256, "checkpoint.causal_mask": 4_096}
    assert sdpa == {"checkpoint.position_ids": 256}
    assert act.checkpoint_held_activations(arch, _setup("bf16"), "none") == ()


def test_shifted_labels_at_micro_batch_one_view_the_padded_labels():
    arch = architecture_from_hf_config(LLAMA)
    assert _named(act.head_activations(arch, _setup("fp32", b=1, s=64)))["loss.labels"] == 65 * 8
    assert _named(act.head_activations(arch, _setup("fp32", b=2, s=32)))["loss.labels"] == 64 * 8
