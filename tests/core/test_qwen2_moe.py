"""Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) against transformers 5.24's Qwen2MoeForCausalLM: counts measured
on the meta device, saved tensors on CPU (validation/qwen2_moe.py)."""

import pytest

from app.core import DomainError, architecture_from_hf_config, param_count, precision_preset
from app.core.activations import ActivationSetup, layer_activations, total_bytes
from app.core.architecture import Architecture, active_param_count, layer_tensors

# Qwen1.5-MoE-A2.7B's config.json (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json), the fields
# Qwen2MoeForCausalLM reads.
QWEN15_MOE = {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
              "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
              "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
              "num_experts_per_tok": 4, "max_position_embeddings": 8192, "decoder_sparse_step": 1,
              "norm_topk_prob": False, "tie_word_embeddings": False, "use_sliding_window": False,
              "sliding_window": 32768, "max_window_layers": 21, "hidden_act": "silu", "rope_theta": 1000000.0}
# Qwen2-57B-A14B's config.json (https://huggingface.co/Qwen/Qwen2-57B-A14B/blob/main/config.json).
QWEN2_57B = {"model_type": "qwen2_moe", "vocab_size": 151936, "hidden_size": 3584, "intermediate_size": 18944,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480, "num_experts": 64,
             "num_experts_per_tok": 8, "max_position_embeddings": 131072, "decoder_sparse_step": 1,
             "norm_topk_prob": False, "tie_word_embeddings": False, "use_sliding_window": False,
             "sliding_window": 131072, "max_window_layers": 28, "hidden_act": "silu", "rope_theta": 1000000.0}
# The small model validation/qwen2_moe.py measures: hidden 64, 4 heads (2 key/value), 6 experts of 32 (k 2), a
# shared expert of 80, dense MLPs of 96.
SMALL = {"model_type": "qwen2_moe", "vocab_size": 300, "hidden_size": 64, "intermediate_size": 96,
         "moe_intermediate_size": 32, "shared_expert_intermediate_size": 80, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 6, "num_experts_per_tok": 2,
         "max_position_embeddings": 256}


@pytest.mark.parametrize(("config", "total", "active"), [
    # sum(p.numel()) of Qwen2MoeForCausalLM(Qwen2MoeConfig(**config)) on the meta device, transformers 5.24; Qwen
    # publishes 14.3B total and 2.7B activated (Qwen1.5-MoE), 57B and 14B (Qwen2-57B-A14B).
    (QWEN15_MOE, 14_315_784_192, 2_689_173_504),
    (QWEN2_57B, 57_408_658_944, 14_249_270_784),
])
def test_published_counts_are_what_transformers_counts(config, total, active):
    arch = architecture_from_hf_config(config)
    assert param_count(arch) == total
    assert active_param_count(arch) == active
    assert (arch.has_shared_expert, arch.shared_expert_gate, arch.has_qkv_bias, arch.norm_topk_prob) == \
        (True, True, True, False)


def test_sparse_layer_parameters_by_hand():
    # Qwen1.5-MoE-A2.7B's layer: q, k, v 2048 x 2048 with biases, o without; a router 60 x 2048; 60 experts of
    # 3 x 2048 x 1408; the shared expert 3 x 2048 x 5632 and its gate 1 x 2048; two RMSNorms.
    attention = 4 * 2048 * 2048 + 3 * 2048
    moe = 60 * 2048 + 60 * 3 * 2048 * 1408 + 3 * 2048 * 5632 + 2048
    arch = architecture_from_hf_config(QWEN15_MOE)
    assert sum(t.elements for t in layer_tensors(arch)) == attention + moe + 2 * 2048
    assert param_count(arch) == 2 * 151936 * 2048 + 2048 + 24 * (attention + moe + 2 * 2048)
    # active: the other 56 experts of each layer unused
    assert active_param_count(arch) == param_count(arch) - 24 * 56 * 3 * 2048 * 1408


@pytest.mark.parametrize(("changes", "measured", "dense"), [
    ({}, 168_896, 0),  # sum(p.numel()) of Qwen2MoeForCausalLM(Qwen2MoeConfig(**SMALL, ...)), transformers 5.24
    ({"num_hidden_layers": 3, "mlp_only_layers": [0]}, 199_872, 1),
    ({"num_experts": 4, "num_experts_per_tok": 1, "decoder_sparse_step": 2}, 122_240, 1),
    ({"num_experts": 0}, 100_416, 2),  # every layer a dense MLP of intermediate_size
])
def test_small_counts_and_dense_layers(changes, measured, dense):
    arch = architecture_from_hf_config({**SMALL, **changes})
    assert param_count(arch) == measured
    assert arch.dense_layers == dense


@pytest.mark.parametrize(("changes", "precision", "attention", "batch", "seq", "layers"), [
    # Each layer's saved tensors as validation/measure.py's recorder measured them for Qwen2MoeForCausalLM on CPU,
    # transformers 5.24 (torch 2.13): dense layers first.
    ({}, "bf16", "sdpa", 2, 32, [212_376, 212_376]),
    ({}, "fp32", "eager", 1, 48, [336_984, 336_984]),
    ({"num_experts": 8, "num_experts_per_tok": 3, "norm_topk_prob": True}, "bf16", "sdpa", 2, 24, [186_656, 186_656]),
    ({"num_hidden_layers": 3, "mlp_only_layers": [0]}, "fp32", "sdpa", 2, 16, [123_648, 192_408, 192_408]),
    ({"num_experts": 4, "num_experts_per_tok": 1, "decoder_sparse_step": 2}, "bf16", "eager", 3, 16,
     [129_408, 156_496]),
])
def test_saved_tensors_as_measured(changes, precision, attention, batch, seq, layers):
    arch = architecture_from_hf_config({**SMALL, **changes})
    setup = ActivationSetup(micro_batch_size=batch, seq_len=seq, attention=attention, device="cpu",
                            precision=precision_preset(precision))
    dense = total_bytes(layer_activations(arch, setup, dense=True))
    sparse = total_bytes(layer_activations(arch, setup))
    assert [dense] * arch.dense_layers + [sparse] * (arch.num_hidden_layers - arch.dense_layers) == layers


def test_shared_expert_gate_keeps_its_sigmoid_and_the_shared_output():
    # b·s = 64 tokens, bf16: the sigmoid n x 1 and the shared expert's output n x h (64 x 64) at 2 bytes
    arch = architecture_from_hf_config(SMALL)
    setup = ActivationSetup(micro_batch_size=2, seq_len=32, attention="sdpa", device="cpu",
                            precision=precision_preset("bf16"))
    saved = {item.name: item.bytes for item in layer_activations(arch, setup)}
    assert saved["moe.shared_gate_sigmoid"] == 64 * 2
    assert saved["moe.shared.output"] == 64 * 64 * 2
    assert saved["moe.shared.gate"] == 64 * 80 * 2


@pytest.mark.parametrize(("changes", "field"), [
    ({"num_hidden_layers": 4, "decoder_sparse_step": 2}, "decoder_sparse_step"),  # layers 0 and 2 dense
    ({"num_hidden_layers": 4, "mlp_only_layers": [1]}, "mlp_only_layers"),
    ({"mlp_only_layers": "0"}, "mlp_only_layers"),
    ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size"),
])
def test_refusals_name_the_key(changes, field):
    with pytest.raises(DomainError) as error:
        architecture_from_hf_config({**SMALL, **changes})
    assert error.value.field == f"model.hf_config.{field}"


def test_shared_expert_fields_need_a_mixture():
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=300,
                     shared_expert_gate=True)
    assert error.value.field == "model.shared_expert_gate"
    with pytest.raises(DomainError) as error:
        Architecture(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=300,
                     num_local_experts=4, shared_expert_intermediate_size=32, n_shared_experts=1)
    assert error.value.field == "model.shared_expert_intermediate_size"
