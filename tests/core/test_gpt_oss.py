"""gpt-oss against transformers 5.24's GptOssForCausalLM: counts measured on the meta device, saved tensors on CPU
(validation/gpt_oss.py), and the config.json import's reading of layer_types, defaults and the router."""

from dataclasses import replace

import pytest

from app import core
from app.core import DomainError, architecture_from_hf_config, get_preset, param_count, precision_preset
from app.core.activations import (
    ActivationSetup,
    attention_kernel,
    embedding_activations,
    layer_activations,
    sliding_window_layer,
    total_bytes,
)
from app.core.architecture import Architecture, active_param_count, layer_tensors, parameter_tensors

SLIDING, FULL = "sliding_attention", "full_attention"

# gpt-oss-20b's config.json (https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json), the fields
# GptOssForCausalLM reads; gpt-oss-120b's (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json) has 36
# layers (alternating likewise) and 128 experts. quantization_config (MXFP4) is left out: it changes no parameter.
GPT_OSS_20B = {
    "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072, "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False, "vocab_size": 201088,
    "layer_types": [SLIDING if index % 2 == 0 else FULL for index in range(24)], "rope_theta": 150000,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
}
GPT_OSS_120B = {**GPT_OSS_20B, "num_hidden_layers": 36, "num_local_experts": 128,
                "layer_types": [SLIDING if index % 2 == 0 else FULL for index in range(36)]}

# The small model validation/gpt_oss.py measures: hidden 64, 4 heads of 16 over 2 K/V heads, 4 experts (k 2) of
# width 48, vocabulary 300, a sliding layer then a full one with a window of 16.
SMALL = {"model_type": "gpt_oss", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 48,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16, "layer_types": [SLIDING, FULL],
         "max_position_embeddings": 256}


@pytest.mark.parametrize(("config", "measured", "active"), [
    # sum(p.numel()) of GptOssForCausalLM(GptOssConfig(**config)) on the meta device, transformers 5.24; OpenAI
    # publishes 20.91B and 116.83B (arXiv:2508.10925).
    (GPT_OSS_20B, 20_914_757_184, 4_187_440_704),
    (GPT_OSS_120B, 116_829_156_672, 5_711_982_912),
])
def test_counts_are_what_transformers_counts(config, measured, active):
    arch = architecture_from_hf_config(config)
    assert param_count(arch) == measured
    assert sum(tensor.elements for tensor in parameter_tensors(arch)) == measured
    assert active_param_count(arch) == active


def test_active_counts_less_the_embedding_are_openais():
    # OpenAI's 3.61B and 5.13B active per token (arXiv:2508.10925) leave out the embedding, V x h.
    embedding = 201088 * 2880
    assert active_param_count(architecture_from_hf_config(GPT_OSS_20B)) - embedding == 3_608_307_264
    assert active_param_count(architecture_from_hf_config(GPT_OSS_120B)) - embedding == 5_132_849_472


def test_layer_parameters_by_hand():
    # GptOssDecoderLayer (modeling_gpt_oss.py) with gpt-oss-20b's sizes: q_proj 2880 -> 64 x 64 and k_proj, v_proj
    # 2880 -> 8 x 64, each with a bias, o_proj 4096 -> 2880 with a bias, 64 sinks; the router 32 x 2880 and its
    # bias; the experts' gate_up_proj 32 x 2880 x 5760 and its bias 32 x 5760, down_proj 32 x 2880 x 2880 and its
    # bias 32 x 2880; two RMSNorms of 2880.
    attention = 2880 * 4096 + 4096 + 2 * (2880 * 512 + 512) + 4096 * 2880 + 2880 + 64
    experts = 32 * (2880 * 5760 + 5760 + 2880 * 2880 + 2880)
    layer = attention + 32 * 2880 + 32 + experts + 2 * 2880
    assert sum(tensor.elements for tensor in layer_tensors(architecture_from_hf_config(GPT_OSS_20B))) == layer
    assert param_count(architecture_from_hf_config(GPT_OSS_20B)) == 2 * 201088 * 2880 + 2880 + 24 * layer


@pytest.mark.parametrize(("changes", "measured"), [
    ({}, 139_216),
    ({"attention_bias": False, "num_key_value_heads": 4}, 147_024),
    ({"num_key_value_heads": 1}, 135_056),
    ({"num_hidden_layers": 3, "layer_types": [FULL, SLIDING, SLIDING], "num_local_experts": 6,
      "num_experts_per_tok": 3, "sliding_window": 8}, 246_238),
])
def test_small_counts_match_transformers(changes, measured):
    # sum(p.numel()) of GptOssForCausalLM for these configs (validation/gpt_oss.py, transformers 5.24)
    assert param_count(architecture_from_hf_config({**SMALL, **changes})) == measured


@pytest.mark.parametrize(("precision", "batch", "seq", "layer", "embedding"), [
    ("bf16", 2, 32, 258_576, 1_536),
    ("bf16", 1, 48, 200_080, 1_920),
    ("fp32", 2, 32, 443_920, 2_560),
    ("fp32", 1, 48, 345_232, 3_456),
])
def test_saved_tensors_as_measured(precision, batch, seq, layer, embedding):
    # Bytes autograd keeps in each layer (the sliding one and the full one alike) and the embedding, measured on CPU
    # with eager attention (validation/gpt_oss.py).
    arch = architecture_from_hf_config(SMALL)
    setup = ActivationSetup(micro_batch_size=batch, seq_len=seq, precision=precision_preset(precision),
                            attention="eager", device="cpu")
    assert total_bytes(layer_activations(arch, setup)) == layer
    assert sliding_window_layer(arch, setup) == layer_activations(arch, setup)
    assert total_bytes(embedding_activations(arch, setup)) == embedding


def test_saved_tensors_by_hand():
    # modeling_gpt_oss.py at b = 2, s = 32 (n = 64 tokens), h = 64, a = 4 heads over g = 2, d = 16, E = 4, k = 2,
    # I = 48, bf16 (2 bytes): each RMSNorm keeps its fp32 input, fp32 reciprocal RMS and fp32 normalised tensor; the
    # projections their input; eager attention Q and K, V repeated to a heads, the int64 index of each row's
    # maximum (b·a·s) and the bf16 softmax over s + 1 columns; o_proj its input; the router its input, its top-k
    # indices and the softmax of the k logits; the experts (n·k = 128 routed) the sort order and its gather index,
    # the sorted expert ids (bias gather), the int32 counts, the gathered tokens, the gate-and-up output (2I), five
    # n·k·I tensors of the clamped SwiGLU, the routing weights, their outputs and the scatter index.
    n, h, a, d, s, b, k, e, i, w = 64, 64, 4, 16, 32, 2, 2, 4, 48, 2
    norm = n * h * 4 + n * 4 + n * h * 4
    attention = n * h * w + 3 * n * a * d * w + b * a * s * 8 + b * a * s * (s + 1) * w + n * a * d * w
    router = n * h * w + n * k * 8 + n * k * w
    routed = n * k
    experts = (2 * routed * 8 + routed * 8 + e * 4 + routed * h * w + routed * 2 * i * w + 5 * routed * i * w
               + routed * w + routed * h * w + routed * 8)
    assert 2 * norm + attention + router + experts == 258_576
    arch = architecture_from_hf_config(SMALL)
    setup = ActivationSetup(micro_batch_size=2, seq_len=32, precision=precision_preset("bf16"), attention="eager",
                            device="cpu")
    assert total_bytes(layer_activations(arch, setup)) == 258_576
    # cos and sin of s x d/2 each (not concatenated), one pair for both kinds of layer, and the int64 token ids
    assert total_bytes(embedding_activations(arch, setup)) == 2 * s * (d // 2) * w + n * 8


def test_sdpa_is_transformers_eager_default():
    # GptOssPreTrainedModel._supports_sdpa is False: transformers runs gpt-oss with eager attention unless asked for
    # flash, so sdpa is modelled as eager, on CPU and on CUDA.
    arch = architecture_from_hf_config(GPT_OSS_20B)
    for device in ("cpu", "cuda"):
        setup = ActivationSetup(micro_batch_size=1, seq_len=4096, precision=precision_preset("bf16"),
                                attention="sdpa", device=device)
        assert attention_kernel(arch, setup) == "eager"
        assert layer_activations(arch, setup) == layer_activations(arch, replace(setup, attention="eager"))
    flash = ActivationSetup(micro_batch_size=1, seq_len=4096, precision=precision_preset("bf16"), attention="flash")
    assert attention_kernel(arch, flash) == "flash"


def test_import_reads_layer_types_and_defaults():
    arch = architecture_from_hf_config(GPT_OSS_20B)
    assert (arch.sliding_window, arch.sliding_window_layers) == (128, 12)
    assert (arch.mlp_bias, arch.router_bias, arch.attention_sinks, arch.norm_topk_prob) == (True, True, True, False)
    assert (arch.extra("swiglu_alpha"), arch.extra("swiglu_limit")) == (1.702, 7.0)
    # GptOssConfig's defaults are gpt-oss-120b's numbers; without layer_types every second layer is full
    assert param_count(architecture_from_hf_config({"model_type": "gpt_oss"})) == 116_829_156_672
    defaults = architecture_from_hf_config({"model_type": "gpt_oss", "num_hidden_layers": 5})
    assert (defaults.sliding_window, defaults.sliding_window_layers) == (128, 3)
    # GptOssConfig's attribute_map: num_experts is num_local_experts
    assert architecture_from_hf_config({**SMALL, "num_local_experts": None, "num_experts": 6}).num_local_experts == 6
    # a null head_dim falls back to hidden_size / heads, a null num_key_value_heads to the heads
    fallback = architecture_from_hf_config({**SMALL, "head_dim": None, "num_key_value_heads": None})
    assert (fallback.head_size, fallback.kv_heads) == (16, 4)
    assert architecture_from_hf_config({**SMALL, "sliding_window": None}).sliding_window_layers == 0


def test_presets_are_their_config_imports():
    for preset_id, config in (("gpt-oss-20b", GPT_OSS_20B), ("gpt-oss-120b", GPT_OSS_120B)):
        imported = architecture_from_hf_config(config)
        assert replace(get_preset(preset_id).architecture, attention_dropout=0.0, extras=imported.extras) == imported


@pytest.mark.parametrize(("config", "field"), [
    ({**SMALL, "layer_types": [SLIDING]}, "model.hf_config.layer_types"),
    ({**SMALL, "num_experts_per_tok": 5}, "model.hf_config.num_experts_per_tok"),
    ({**SMALL, "attention_bias": "yes"}, "model.hf_config.attention_bias"),
])
def test_import_refusals_name_the_field(config, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field


def test_biases_belong_to_gpt_oss_layout():
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=300, router_bias=True)
    assert error.value.field == "model.router_bias"
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=300, num_local_experts=4,
                     mlp_bias=True, n_shared_experts=1)
    assert error.value.field == "model.mlp_bias"


def test_expert_parallelism_splits_the_experts_biases():
    # gpt-oss-120b: 36 layers of 128 experts, each 3 x 2880 x 2880 weights and 2 x 2880 + 2880 biases; over 8
    # expert-parallel GPUs each holds 16 experts of every layer (ZeRO-1: the bf16 weights unsharded).
    arch = get_preset("gpt-oss-120b").architecture
    total, experts = 116_829_156_672, 36 * 128 * (3 * 2880 * 2880 + 3 * 2880)
    training = core.Training(seq_len=4096, attention="flash", precision=precision_preset("bf16-fp32-master"))
    result = core.estimate(architecture=arch, training=training,
                           parallelism=core.Parallelism(data=64, zero_stage=1, expert=8))
    weights = next(buffer for buffer in result.ledger if buffer.key == "weights")
    assert weights.bytes == 2 * (total - experts + experts // 8)
