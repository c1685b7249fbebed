"""DeepSeek-V2 and DeepSeek-V2-Lite against transformers 5.24's DeepseekV2ForCausalLM: counts measured on the meta
device, saved tensors on CPU (validation/deepseek_v2.py)."""

from dataclasses import replace

import pytest

from app.core import DomainError, architecture_from_hf_config, estimate, get_preset, param_count, precision_preset
from app.core.activations import ActivationSetup, embedding_activations, layer_activations, total_bytes
from app.core.architecture import Architecture, active_param_count, layer_tensors, parameter_tensors
from app.core.setup import Training

YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 4096, "type": "yarn"}
# DeepSeek-V2-Lite's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json).
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001, "first_k_dense_replace": 1,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 10944,
    "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
    "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": False,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
    "pretraining_tp": 1, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": YARN, "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
    "seq_aux": True, "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
    "torch_dtype": "bfloat16", "use_cache": True, "v_head_dim": 128, "vocab_size": 102400,
}
# DeepSeek-V2's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json): where it differs.
DEEPSEEK_V2 = {
    **DEEPSEEK_V2_LITE, "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_group": 8,
    "n_routed_experts": 160, "num_attention_heads": 128, "num_hidden_layers": 60, "num_key_value_heads": 128,
    "q_lora_rank": 1536, "routed_scaling_factor": 16.0, "topk_group": 3, "topk_method": "group_limited_greedy",
}

# The small model validation/deepseek_v2.py measures: 3 layers, the first dense, hidden 64, 4 heads, q_lora_rank 32,
# kv_lora_rank 16, d_n 16, d_r 8, d_v 16, 8 routed experts (k 2) in 4 groups (2 chosen), 2 shared, width 32.
SMALL = {"model_type": "deepseek_v2", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
         "moe_intermediate_size": 32, "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
         "num_key_value_heads": 4, "n_shared_experts": 2, "n_routed_experts": 8, "num_experts_per_tok": 2,
         "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.0,
         "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
         "max_position_embeddings": 256}


def test_deepseek_v2_counts_are_what_transformers_counts():
    # sum(p.numel()) of DeepseekV2ForCausalLM(DeepseekV2Config(**config)) on the meta device, transformers 5.24;
    # DeepSeek publishes 236B total and 21B activated for DeepSeek-V2, 15.7B and 2.4B for V2-Lite (arXiv:2405.04434).
    v2, lite = architecture_from_hf_config(DEEPSEEK_V2), architecture_from_hf_config(DEEPSEEK_V2_LITE)
    assert param_count(v2) == 235_741_434_880
    assert param_count(lite) == 15_706_484_224
    assert sum(tensor.elements for tensor in parameter_tensors(v2)) == 235_741_434_880
    # Active: all but the 160 - 6 routed experts a token skips in each of the 59 sparse layers, 3 h I weights each.
    assert active_param_count(v2) == 235_741_434_880 - 59 * 154 * 3 * 5120 * 1536
    assert active_param_count(lite) == 15_706_484_224 - 26 * 58 * 3 * 2048 * 1408


def test_lite_parameters_by_hand():
    # DeepSeek-V2-Lite (arXiv:2405.04434, section 2.1 and appendix; its config's sizes): a plain W^Q 2048 x 16 * 192,
    # W^DKV and W^KR together 2048 x (512 + 64), its RMSNorm 512, W^UK and W^UV together 512 x 16 * 256,
    # W^O 16 * 128 x 2048.
    attention = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    arch = architecture_from_hf_config(DEEPSEEK_V2_LITE)
    mlp = 3 * 2048 * 10944
    moe = 64 * 3 * 2048 * 1408 + 64 * 2048 + 3 * 2048 * 2 * 1408  # routed experts, router, two shared experts
    norms = 2 * 2048
    assert sum(t.elements for t in layer_tensors(arch, dense=True)) == attention + mlp + norms
    assert sum(t.elements for t in layer_tensors(arch)) == attention + moe + norms
    embeddings = 2 * 102400 * 2048 + 2048  # embedding, lm_head, final norm
    assert embeddings + (attention + mlp + norms) + 26 * (attention + moe + norms) == 15_706_484_224


def test_config_json_import_reads_v2s_own_fields():
    lite = architecture_from_hf_config(DEEPSEEK_V2_LITE)
    assert (lite.q_lora_rank, lite.topk_method, lite.n_group, lite.topk_group) == (None, "greedy", 1, 1)
    assert (lite.num_local_experts, lite.num_experts_per_tok, lite.n_shared_experts, lite.dense_layers) == (64, 6, 2, 1)
    assert (lite.norm_topk_prob, lite.extra("routed_scaling_factor"), lite.max_position_embeddings) == (False, 1.0,
                                                                                                      163840)
    v2 = architecture_from_hf_config(DEEPSEEK_V2)
    assert (v2.q_lora_rank, v2.topk_method, v2.n_group, v2.topk_group) == (1536, "group_limited_greedy", 8, 3)
    assert v2.extra("routed_scaling_factor") == 16.0
    # DeepseekV2Config maps num_experts to n_routed_experts.
    renamed = {key: value for key, value in DEEPSEEK_V2.items() if key != "n_routed_experts"} | {"num_experts": 160}
    assert architecture_from_hf_config(renamed) == v2


@pytest.mark.parametrize(("preset_id", "config"), [("deepseek-v2", DEEPSEEK_V2), ("deepseek-v2-lite", DEEPSEEK_V2_LITE)])
def test_presets_are_their_config_imports(preset_id, config):
    imported = architecture_from_hf_config(config)
    assert replace(get_preset(preset_id).architecture, attention_dropout=0.0, extras=imported.extras) == imported


@pytest.mark.parametrize(("changes", "measured"), [
    ({}, 219_728),
    ({"q_lora_rank": None}, 222_704),  # a plain q_proj
    ({"attention_bias": True, "n_group": 8, "topk_group": 3}, 220_088),  # biases on q_a_proj, kv_a_proj, o_proj
    ({"q_lora_rank": None, "n_routed_experts": 6, "num_experts_per_tok": 3, "n_shared_experts": 1, "n_group": 1,
      "topk_group": 1}, 185_584),
    ({"topk_method": "greedy", "n_shared_experts": 0}, 195_152),
])
def test_small_counts_match_transformers(changes, measured):
    # sum(p.numel()) of DeepseekV2ForCausalLM for these configs (validation/deepseek_v2.py, transformers 5.24)
    assert param_count(architecture_from_hf_config({**SMALL, **changes})) == measured


@pytest.mark.parametrize(("changes", "precision", "attention", "batch", "seq", "dense", "sparse"), [
    # In bf16 the router's fp32 weight cast (E × h × 4 = 2,048 B) is kept with the layer.
    ({}, "bf16", "eager", 2, 32, 230_400, 308_256),
    ({}, "bf16", "sdpa", 2, 32, 246_784, 324_640),  # CPU sdpa takes the math path: d_v 16 < d_n + d_r 24
    ({"topk_method": "greedy"}, "bf16", "eager", 2, 24, 163_584, 219_808),
    ({"topk_method": "greedy", "q_lora_rank": None}, "fp32", "eager", 1, 48, 269_376, 348_128),
    ({"q_lora_rank": None}, "fp32", "sdpa", 3, 16, 232_512, 313_952),
])
def test_saved_tensors_per_layer_as_measured(changes, precision, attention, batch, seq, dense, sparse):
    # Bytes autograd keeps in layer 0 (dense) and layer 1 (sparse), measured on CPU (validation/deepseek_v2.py).
    arch = architecture_from_hf_config({**SMALL, **changes})
    setup = ActivationSetup(micro_batch_size=batch, seq_len=seq, precision=precision_preset(precision),
                            attention=attention, device="cpu")
    assert total_bytes(layer_activations(arch, setup, dense=True)) == dense
    assert total_bytes(layer_activations(arch, setup)) == sparse


def test_router_tensors_by_hand():
    # n = 64 tokens, E = 8, k = 2, 4 groups of which 2 are chosen: the fp32 input and softmax probabilities, the
    # int64 index of each group's best expert (n x 4), of the chosen groups (n x 2) and of the k experts (n x 2), and
    # the bool mask (n x E); nothing renormalises the k weights. Greedy keeps the input, probabilities and indices.
    setup = ActivationSetup(micro_batch_size=2, seq_len=32, precision=precision_preset("bf16"), device="cpu")
    for method, grouped in (("group_limited_greedy", True), ("greedy", False)):
        arch = architecture_from_hf_config({**SMALL, "topk_method": method})
        router = {t.name: t.bytes for t in layer_activations(arch, setup) if t.name.startswith("moe.") and
                  not t.name.startswith("moe.shared")}
        assert router["moe.router_input_fp32"] == 64 * 64 * 4
        assert router["moe.router_probs_fp32"] == 64 * 8 * 4
        assert router["moe.topk_indices"] == 64 * 2 * 8
        assert "moe.topk_weights_fp32" not in router
        group = {name: router.get(name) for name in ("moe.group_max_indices", "moe.group_indices", "moe.group_mask")}
        assert group == ({"moe.group_max_indices": 64 * 4 * 8, "moe.group_indices": 64 * 2 * 8,
                          "moe.group_mask": 64 * 8} if grouped else dict.fromkeys(group))


def test_rotary_frequencies_are_kept_as_complex_numbers():
    # DeepseekV2RotaryEmbedding returns 1 x s x d_r/2 complex64 (torch.polar), 8 bytes each: 32 x 4 x 8 = 1,024 B at
    # s 32, d_r 8, beside the int64 token ids (2 x 32 x 8 = 512 B); measured: 1,536 B (validation/deepseek_v2.py).
    arch = architecture_from_hf_config(SMALL)
    setup = ActivationSetup(micro_batch_size=2, seq_len=32, precision=precision_preset("bf16"), device="cpu")
    assert total_bytes(embedding_activations(arch, setup)) == 1_536


@pytest.mark.parametrize(("changes", "field"), [
    ({"topk_method": "noaux_tc"}, "model.hf_config.topk_method"),
    ({"mlp_bias": True}, "model.hf_config.mlp_bias"),
    ({"n_group": None}, "model.hf_config.n_group"),  # group_limited_greedy needs its groups
    ({"num_experts_per_tok": None}, "model.hf_config.num_experts_per_tok"),  # DeepseekV2Config has no default
    ({"n_group": 3}, "model.hf_config.n_group"),
    ({"num_key_value_heads": 2}, "model.hf_config.num_key_value_heads"),
])
def test_impossible_or_unmodelled_configs_name_their_field(changes, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({**SMALL, **changes})
    assert error.value.field == field


def test_greedy_routing_has_no_groups():
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100, num_local_experts=8,
                     n_group=2, topk_method="greedy")
    assert error.value.field == "model.n_group"


@pytest.mark.parametrize("preset_id", ["deepseek-v2", "deepseek-v2-lite"])
def test_estimate_counts_like_transformers(preset_id):
    arch = get_preset(preset_id).architecture
    result = estimate(architecture=arch, training=Training(precision=precision_preset("bf16"), seq_len=1024,
                                                           attention="flash"))
    assert result.param_count == {"deepseek-v2": 235_741_434_880, "deepseek-v2-lite": 15_706_484_224}[preset_id]
