"""Multi-head latent attention and DeepSeek-V3's mixture of experts, against transformers 5.24's
DeepseekV3ForCausalLM: counts measured on the meta device, saved tensors on CPU (validation/mla.py)."""

import pytest

from app.core import DomainError, architecture_from_hf_config, estimate, param_count, precision_preset
from app.core.activations import ActivationSetup, attention_kernel, layer_activations, total_bytes
from app.core.architecture import Architecture, active_param_count, layer_tensors, parameter_tensors
from app.core.setup import Parallelism, Training

# DeepSeek-V3's config.json (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json), the fields
# DeepseekV3ForCausalLM reads; num_nextn_predict_layers (the multi-token prediction module) is not part of it.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc",
    "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
    "norm_topk_prob": True, "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
    "num_nextn_predict_layers": 1,
}

# The small model validation/mla.py measures: 3 layers, the first dense, hidden 64, 4 heads, q_lora_rank 32,
# kv_lora_rank 16, d_n 16, d_r 8, d_v 16, 8 routed experts (k 2) in 2 groups (1 chosen), 1 shared, width 32.
SMALL = {"model_type": "deepseek_v3", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
         "moe_intermediate_size": 32, "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4,
         "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
         "n_group": 2, "topk_group": 1, "norm_topk_prob": True, "q_lora_rank": 32, "kv_lora_rank": 16,
         "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "max_position_embeddings": 256}


def test_deepseek_v3_count_is_what_transformers_counts_without_the_mtp_module():
    arch = architecture_from_hf_config(DEEPSEEK_V3)
    # sum(p.numel()) of DeepseekV3ForCausalLM(DeepseekV3Config(**config)) on the meta device, transformers 5.24;
    # DeepSeek publishes 671B total and 37B activated per token (arXiv:2412.19437, abstract).
    assert param_count(arch) == 671_026_404_352
    assert sum(tensor.elements for tensor in parameter_tensors(arch)) == 671_026_404_352
    assert active_param_count(arch) == 37_552_282_624
    assert (arch.dense_layers, arch.q_lora_rank, arch.extra("routed_scaling_factor")) == (3, 1536, 2.5)


def test_mla_layer_parameters_by_hand():
    # DeepSeek-V3's attention (arXiv:2412.19437, section 2.1.1, with its config's sizes): W^DQ 7168 x 1536, its
    # RMSNorm 1536, W^UQ and W^QR together 1536 x 128 * (128 + 64), W^DKV and W^KR together 7168 x (512 + 64),
    # its RMSNorm 512, W^UK and W^UV together 512 x 128 * (128 + 128), W^O 128 * 128 x 7168.
    attention = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)
    assert attention == 187_107_328
    arch = architecture_from_hf_config(DEEPSEEK_V3)
    mlp = 3 * 7168 * 18432
    moe = 256 * 3 * 7168 * 2048 + 256 * 7168 + 3 * 7168 * 2048  # routed experts, router, one shared expert
    norms = 2 * 7168
    assert sum(t.elements for t in layer_tensors(arch, dense=True)) == attention + mlp + norms
    assert sum(t.elements for t in layer_tensors(arch)) == attention + moe + norms
    embeddings = 2 * 129280 * 7168 + 7168  # embedding, lm_head, final norm
    assert param_count(arch) == embeddings + 3 * (attention + mlp + norms) + 58 * (attention + moe + norms)


@pytest.mark.parametrize(("changes", "measured"), [
    ({}, 207_440),
    ({"q_lora_rank": None}, 210_416),  # a plain q_proj
    ({"attention_bias": True}, 207_800),  # biases on q_a_proj, kv_a_proj_with_mqa and o_proj
    ({"n_shared_experts": 2, "n_group": 4, "topk_group": 2, "num_experts_per_tok": 3}, 219_728),
])
def test_small_counts_match_transformers(changes, measured):
    # sum(p.numel()) of DeepseekV3ForCausalLM for these configs (validation/mla.py, transformers 5.24)
    assert param_count(architecture_from_hf_config({**SMALL, **changes})) == measured


@pytest.mark.parametrize(("precision", "attention", "batch", "seq", "dense", "sparse"), [
    # In bf16 the router's fp32 weight cast (E × h × 4 = 2,048 B) is kept with the layer.
    ("bf16", "eager", 2, 32, 230_400, 292_128),
    ("bf16", "sdpa", 2, 32, 246_784, 308_512),  # CPU sdpa takes the math path: d_v 16 < d_n + d_r 24
    ("fp32", "eager", 1, 48, 288_000, 345_056),  # at b = 1, V keeps kv_b_proj's whole output
    ("fp32", "sdpa", 2, 32, 351_232, 427_296),
])
def test_saved_tensors_per_layer_as_measured(precision, attention, batch, seq, dense, sparse):
    # Bytes autograd keeps in layer 0 (dense) and layer 1 (sparse), measured on CPU (validation/mla.py).
    arch = architecture_from_hf_config(SMALL)
    setup = ActivationSetup(micro_batch_size=batch, seq_len=seq, precision=precision_preset(precision),
                            attention=attention, device="cpu")
    assert total_bytes(layer_activations(arch, setup, dense=True)) == dense
    assert total_bytes(layer_activations(arch, setup)) == sparse


def test_router_tensors_by_hand():
    # n = 64 tokens, E = 8, k = 2, 2 groups of which 1 is chosen: the fp32 input and sigmoid scores, int64
    # indices of each group's two best (n x 2 x 2), of the chosen group (n x 1) and of the k experts (n x 2),
    # the bool mask (n x E), and the renormalisation's weights and sum (fp32).
    arch = architecture_from_hf_config(SMALL)
    setup = ActivationSetup(micro_batch_size=2, seq_len=32, precision=precision_preset("bf16"), device="cpu")
    router = {t.name: t.bytes for t in layer_activations(arch, setup) if t.name.startswith("moe.") and
              not t.name.startswith("moe.shared")}
    assert router["moe.router_input_fp32"] == 64 * 64 * 4
    assert router["moe.router_scores_fp32"] == 64 * 8 * 4
    assert router["moe.group_top2_indices"] == 64 * 2 * 2 * 8
    assert router["moe.group_indices"] == 64 * 1 * 8
    assert router["moe.group_mask"] == 64 * 8
    assert router["moe.topk_indices"] == 64 * 2 * 8
    # the linear's fp32 cast of the bf16 weight (E x h), kept for the input's gradient
    assert router["moe.router_weight_fp32"] == 8 * 64 * 4


def test_cuda_sdpa_picks_the_memory_efficient_kernel_for_unequal_head_sizes():
    arch = architecture_from_hf_config(DEEPSEEK_V3)
    setup = ActivationSetup(micro_batch_size=1, seq_len=4096, precision=precision_preset("bf16"), attention="sdpa")
    assert attention_kernel(arch, setup) == "memory-efficient"


@pytest.mark.parametrize(("parallelism", "training", "field"), [
    ({"tensor": 2}, {}, "parallelism.tensor"),
    ({}, {"implementation": "megatron"}, "training.implementation"),
])
def test_unmodelled_mla_setups_are_refused_by_name(parallelism, training, field):
    arch = architecture_from_hf_config(SMALL)
    with pytest.raises(DomainError) as error:
        estimate(architecture=arch, training=Training(precision=precision_preset("bf16"), seq_len=64, **training),
                 parallelism=Parallelism(**parallelism))
    assert error.value.field == field


def test_mla_estimate_runs_and_counts_like_transformers_when_every_layer_is_sparse():
    arch = architecture_from_hf_config({**SMALL, "first_k_dense_replace": 0})
    result = estimate(architecture=arch, training=Training(precision=precision_preset("bf16"), seq_len=64))
    assert result.param_count == param_count(arch)


@pytest.mark.parametrize(("changes", "field"), [
    ({"num_key_value_heads": 2}, "model.hf_config.num_key_value_heads"),
    ({"n_group": 3}, "model.hf_config.n_group"),
    ({"topk_group": 3}, "model.hf_config.topk_group"),
    ({"qk_rope_head_dim": 0}, "model.hf_config.qk_rope_head_dim"),
])
def test_impossible_configs_name_their_field(changes, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({**SMALL, **changes})
    assert error.value.field == field


def test_mla_fields_need_kv_lora_rank():
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100, v_head_dim=16)
    assert error.value.field == "model.v_head_dim"


def test_deepseek_v3_estimate_counts_its_three_dense_layers():
    """The estimate's stages take DeepSeek-V3's first three layers as dense: its count and its bf16 weights are
    DeepseekV3ForCausalLM's 671,026,404,352 parameters (measured on the meta device) and its active parameters
    37,552,282,624, on one stage and on the first stage of two."""
    arch = architecture_from_hf_config(DEEPSEEK_V3)
    training = Training(precision=precision_preset("bf16"), seq_len=1024, attention="flash")
    result = estimate(architecture=arch, training=training)
    assert result.param_count == 671_026_404_352
    assert result.active_param_count == 37_552_282_624
    assert result.cluster["weights"] == 2 * 671_026_404_352
    from app.core import states
    assert states.dense_layers_on(arch, first_layer=0, layers=61, count=1) == 3
    assert states.dense_layers_on(arch, first_layer=0, layers=1, count=1) == 1
    assert states.dense_layers_on(arch, first_layer=1, layers=1, count=59) == 0  # the middle kind: its sparse stages
    sparse = architecture_from_hf_config({**DEEPSEEK_V3, "first_k_dense_replace": 0})
    assert param_count(sparse) > param_count(arch)
