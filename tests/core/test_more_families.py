"""The readers of Granite, GLM-4, StarCoder2, Phi, GPT-NeoX, GLM-4.5, Cohere, Cohere2 and Falcon configs: counts worked out by hand from the modules
(transformers 5.24's modeling_*.py), the rotary share read where configs keep it, and what is refused."""

from __future__ import annotations

import dataclasses

import pytest

from app import core
from app.core import DomainError
from app.core import activations as act
from app.core.hf_config import architecture_from_hf_config

# microsoft/phi-2's config.json (https://huggingface.co/microsoft/phi-2/blob/main/config.json), the sizes.
PHI2 = {"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 51200, "partial_rotary_factor": 0.4, "resid_pdrop": 0.1,
        "embd_pdrop": 0.0, "hidden_act": "gelu_new", "tie_word_embeddings": False}


def test_phi2_counted_as_its_modules_hold_it():
    h, inter, layers, vocab = 2560, 10240, 32, 51200
    # PhiDecoderLayer: q, k, v and dense with biases, fc1 and fc2 with biases, one LayerNorm (weight and bias).
    layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * h
    # embed_tokens, final_layernorm, lm_head with its bias.
    total = vocab * h + layers * layer + 2 * h + (vocab * h + vocab)
    assert total == 2_779_683_840
    assert core.param_count(architecture_from_hf_config(PHI2)) == total


@pytest.mark.parametrize("config", [{"partial_rotary_factor": 0.25},
                                    {"rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}}])
def test_the_rotary_share_is_read_at_the_top_or_in_rope_parameters(config):
    glm4 = {"model_type": "glm4", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96, "vocab_size": 300, **config}
    assert architecture_from_hf_config(glm4).rope_size == 8  # a quarter of 32


def test_glm4_by_default_turns_half_of_each_head_and_biases_qkv_only():
    arch = architecture_from_hf_config({"model_type": "glm4", "num_hidden_layers": 2})
    assert (arch.rope_size, arch.head_size, arch.norms_per_layer) == (64, 128, 4)
    assert arch.has_qkv_bias and not arch.attention_bias and arch.fused_gate_up


@pytest.mark.parametrize("config, field", [
    ({**PHI2, "qk_layernorm": True}, "model.hf_config.qk_layernorm"),
    ({**PHI2, "partial_rotary_factor": 1.5}, "model.hf_config.partial_rotary_factor"),
    ({"model_type": "gpt_neox", "use_parallel_residual": False}, "model.hf_config.use_parallel_residual"),
    ({"model_type": "cohere", "use_qk_norm": True}, "model.hf_config.use_qk_norm"),
    ({"model_type": "cohere2", "sliding_window": None}, "model.hf_config.sliding_window"),
    ({"model_type": "falcon", "alibi": True}, "model.hf_config.alibi"),
    ({"model_type": "falcon", "parallel_attn": False}, "model.hf_config.parallel_attn"),
    ({"model_type": "falcon", "multi_query": False}, "model.hf_config.multi_query"),
    ({"model_type": "falcon", "new_decoder_architecture": True, "num_kv_heads": 1}, "model.hf_config.num_kv_heads"),
    ({"model_type": "falcon", "hidden_dropout": 0.1}, "model.hf_config.hidden_dropout"),
])
def test_what_is_not_modelled_is_refused_by_name(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field


@pytest.mark.parametrize("model_type", ["granite", "glm4", "starcoder2", "phi", "gpt_neox", "glm4_moe", "cohere",
                                        "cohere2", "falcon"])
def test_each_new_type_is_estimated_by_its_own_record(model_type):
    arch = architecture_from_hf_config({"model_type": model_type, "num_hidden_layers": 2})
    result = core.estimate(architecture=arch, training=core.Training(seq_len=256))
    assert not any("has no record" in warning for warning in result.warnings)


def test_command_r_counted_as_its_modules_hold_it():
    # CohereConfig's defaults, which are CohereForAI/c4ai-command-r-v01's sizes: h 8192, I 22528, 40 layers, 64 heads
    # (as many K/V heads), V 256,000, the output layer tied to the embedding.
    h, inter, layers, vocab = 8192, 22528, 40, 256_000
    # CohereDecoderLayer: q, k, v and o without biases, gate, up and down, one CohereLayerNorm (a weight, no bias).
    layer = 4 * h * h + 3 * h * inter + h
    total = vocab * h + layers * layer + h  # embed_tokens, the layers, the final norm
    assert total == 34_980_831_232
    assert core.param_count(architecture_from_hf_config({"model_type": "cohere"})) == total


def test_cohere2_rotates_and_windows_only_its_sliding_layers():
    # Cohere2Config: without layer_types every fourth layer attends in full; sliding_window_pattern changes that.
    arch = architecture_from_hf_config({"model_type": "cohere2"})
    assert (arch.sliding_window, arch.sliding_window_layers, arch.head_dim) == (4096, 30, 128)
    assert architecture_from_hf_config({"model_type": "cohere2", "sliding_window_pattern": 2}).sliding_window_layers == 20
    # With every layer attending in full nothing rotates, so nothing keeps cos and sin: measured on CPU (two layers,
    # h 64, b 2, s 32, bf16), the embedding keeps the 512 B of token ids alone.
    small = {"model_type": "cohere2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 300}
    setup = core.ActivationSetup(micro_batch_size=2, seq_len=32, precision=core.precision_preset("bf16"),
                                 attention="sdpa", device="cpu")
    full = architecture_from_hf_config({**small, "layer_types": ["full_attention"] * 2})
    assert act.total_bytes(act.embedding_activations(full, setup)) == 512
    rotating = architecture_from_hf_config({**small, "layer_types": ["sliding_attention"] * 2})
    assert act.total_bytes(act.embedding_activations(rotating, setup)) == 512 + 2 * 32 * 16 * 2  # cos and sin


def test_cohere_layernorm_keeps_what_was_measured():
    # Measured on CPU (Cohere, h 64, b 2, s 32): each CohereLayerNorm keeps two centred fp32 copies and the fp32
    # normalised tensor (16,384 B each), the fp32 reciprocal standard deviation (256 B) and, in bf16, the weight's
    # fp32 cast (256 B); a layer keeps 132,608 B in bf16 under sdpa.
    arch = architecture_from_hf_config({"model_type": "cohere", "hidden_size": 64, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
                                        "vocab_size": 300})
    for precision, weight_cast in (("bf16", 256), ("fp32", 0)):
        setup = core.ActivationSetup(micro_batch_size=2, seq_len=32, precision=core.precision_preset(precision),
                                     attention="sdpa", device="cpu")
        norm = [x.bytes for x in act.layer_activations(arch, setup) if x.name.startswith("attn_norm.")]
        assert sum(norm) == 3 * 16_384 + 256 + weight_cast
    bf16 = core.ActivationSetup(micro_batch_size=2, seq_len=32, precision=core.precision_preset("bf16"),
                                attention="sdpa", device="cpu")
    assert act.total_bytes(act.layer_activations(arch, bf16)) == 132_608


def test_falcon_7b_counted_as_its_modules_hold_it():
    # FalconConfig's defaults, which are tiiuae/falcon-7b's sizes: h 4544, 71 heads of 64, one K/V head
    # (multi_query), 32 layers, V 65,024, ffn 4 × h, no biases, the output layer tied.
    h, d, layers, vocab = 4544, 64, 32, 65024
    # FalconDecoderLayer: query_key_value h -> (71 + 2) heads, dense, dense_h_to_4h, dense_4h_to_h, one LayerNorm.
    layer = h * (h + 2 * d) + h * h + 2 * h * 4 * h + 2 * h
    total = vocab * h + layers * layer + 2 * h  # word_embeddings, the layers, ln_f
    assert total == 6_921_720_704
    assert core.param_count(architecture_from_hf_config({"model_type": "falcon"})) == total


def test_falcon_new_decoder_architecture_has_grouped_heads_and_two_norms():
    config = {"model_type": "falcon", "new_decoder_architecture": True, "hidden_size": 8192, "num_attention_heads": 128,
              "num_kv_heads": 8, "num_hidden_layers": 60}
    arch = architecture_from_hf_config(config)
    assert (arch.kv_heads, arch.norms_per_layer, arch.intermediate_size) == (8, 2, 4 * 8192)
    h, d = 8192, 64
    # query_key_value h -> (128 + 2 × 8) heads; ln_attn and ln_mlp, weight and bias each
    layer = h * (128 + 16) * d + h * h + 2 * h * 4 * h + 2 * 2 * h
    assert core.param_count(arch) == 65024 * h + 60 * layer + 2 * h
    assert architecture_from_hf_config({**config, "num_ln_in_parallel_attn": 1}).norms_per_layer == 1


def test_falcon_multi_query_attention_takes_the_math_path_under_sdpa():
    # FalconModel hands sdpa one K/V head without enable_gqa, which neither fused kernel takes (measured on CPU: the
    # math path's fp32 upcasts; docs/VALIDATION.md, "More families")
    multi_query = architecture_from_hf_config({"model_type": "falcon", "num_hidden_layers": 2})
    grouped = architecture_from_hf_config({"model_type": "falcon", "num_hidden_layers": 2, "num_attention_heads": 64,
                                           "new_decoder_architecture": True, "num_kv_heads": 8})
    cpu = core.ActivationSetup(micro_batch_size=1, seq_len=64, precision=core.precision_preset("bf16"),
                               attention="sdpa", device="cpu")
    cuda = dataclasses.replace(cpu, device="cuda")
    assert act.attention_kernel(multi_query, cpu) == act.attention_kernel(multi_query, cuda) == "math"
    # the materialised mask keeps flash out on CUDA
    assert (act.attention_kernel(grouped, cpu), act.attention_kernel(grouped, cuda)) == ("flash", "memory-efficient")
