"""Mixtures of experts under autocast (fp32 weights, bf16 activations: the ``autocast-bf16`` preset).

The rules, measured on CPU with validation/measure.py's SavedTensorRecorder (transformers 5.24, torch 2.13, the
forward in ``torch.autocast("cpu", dtype=torch.bfloat16)``; validation/moe.py's autocast cases, docs/VALIDATION.md
"Mixture of experts and Qwen3"): the block's input is the post-attention norm's fp32 output; the router's F.linear
keeps its own bf16 cast of it (n x h x 2 B) and returns bf16 logits; the routed experts run transformers' default
grouped_mm path, which autocast does not cast (torch._grouped_mm has no autocast kernel), so every n·k-row tensor of
theirs is fp32 and no bf16 copy of their weights is made. Qwen2-MoE's shared expert's gate and up projections and
its gate keep a bf16 cast each of the same input.
"""

import pytest

from app.core import DomainError, architecture_from_hf_config, precision_preset
from app.core.activations import ActivationSetup, Device, head_activations, layer_activations, total_bytes
from app.core.finetuning import Finetuning
from app.core.rules import validate_setup
from app.core.setup import Parallelism, Training

SHAPE = {"vocab_size": 300, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 256, "num_hidden_layers": 2}
MIXTRAL = {"model_type": "mixtral", "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2, **SHAPE}
QWEN3_MOE = {"model_type": "qwen3_moe", "intermediate_size": 96, "moe_intermediate_size": 48, "head_dim": 32,
             "num_experts": 4, "num_experts_per_tok": 2, **SHAPE}
QWEN2_MOE = {"model_type": "qwen2_moe", "intermediate_size": 96, "moe_intermediate_size": 32,
             "shared_expert_intermediate_size": 80, "num_experts": 6, "num_experts_per_tok": 2, **SHAPE}
AUTOCAST = precision_preset("autocast-bf16")


def _setup(precision: str = "autocast-bf16", *, device: Device = "cpu") -> ActivationSetup:
    # b = 2, s = 32: n = 64 tokens; k = 2 gives n·k = 128 routed token copies.
    return ActivationSetup(micro_batch_size=2, seq_len=32, attention="sdpa", device=device,
                           precision=precision_preset(precision))


def _named(items) -> dict[str, int]:
    return {item.name: item.bytes for item in items}


def test_mixtral_layer_is_the_measured_one():
    # Measured: 392,976 B per layer (mixtral E4 k2 I96 autocast-bf16 sdpa b2 s32), by hand from the rules:
    # attention norm: fp32 input 64·64·4 = 16,384, rstd 64·4 = 256, fp32 normalised 16,384;
    # q, k, v: three bf16 casts of that input, 3·64·64·2 = 24,576;
    # sdpa (CPU flash kernel): Q 64·4·16·2 = 8,192, K and V 64·2·16·2 = 4,096 each, output 8,192, lse 2·4·32·4 = 1,024;
    # MLP norm: 16,384 + 256 + 16,384;
    # router: bf16 cast of its input 64·64·2 = 8,192, fp32 softmax 64·4·4 = 1,024, int64 top-k 64·2·8 = 1,024,
    # fp32 top-k weights 64·2·4 = 512 and their fp32 sum 64·4 = 256;
    # routing: int64 order 2·128·8 = 2,048, int32 counts 4·4 = 16;
    # experts in fp32: gathered tokens 128·64·4 = 32,768, gate-and-up 128·192·4 = 98,304, activation output and
    # product 128·96·4 = 49,152 each, fp32 routing weights 128·4 = 512, outputs 128·64·4 = 32,768, int64 scatter
    # index 128·8 = 1,024.
    arch = architecture_from_hf_config(MIXTRAL)
    layer = _named(layer_activations(arch, _setup()))
    assert layer["moe.router_input"] == 8_192
    assert layer["moe.gathered_tokens"] == 32_768
    assert layer["moe.gate_up"] == 98_304
    assert layer["moe.act_output"] == layer["moe.product"] == 49_152
    assert layer["moe.routing_weights"] == 512
    assert layer["moe.expert_output"] == 32_768
    assert sum(layer.values()) == 392_976
    # The head: final norm 16,384 + 256 + 16,384, the output layer's bf16 input cast 64·64·2 = 8,192, fp32
    # log-probabilities 64·300·4 = 76,800 and int64 labels 64·8 = 512: 118,528 measured.
    assert total_bytes(head_activations(arch, _setup())) == 118_528


def test_routed_experts_keep_the_stream_width_under_autocast_only():
    # Without autocast (bf16 weights and activations) the same experts keep bf16: half of the fp32 bytes above.
    arch = architecture_from_hf_config(MIXTRAL)
    bf16 = _named(layer_activations(arch, _setup("bf16")))
    assert bf16["moe.gate_up"] == 128 * 192 * 2
    assert bf16["moe.gathered_tokens"] == 128 * 64 * 2
    # The router's input is the same bytes either way: the bf16 tensor itself, or autocast's bf16 cast of it.
    assert bf16["moe.router_input"] == 8_192


def test_qwen3_moe_routing_weights_follow_the_bf16_logits():
    # Measured: 393,488 B per layer (qwen3_moe E4 k2 I48 autocast-bf16 sdpa b2 s32). Qwen3MoeTopKRouter casts the
    # top-k weights to the router logits' dtype, bf16 under autocast: 128·2 = 256 B; the experts' gate-and-up
    # 128·96·4 = 49,152 B in fp32.
    layer = _named(layer_activations(architecture_from_hf_config(QWEN3_MOE), _setup()))
    assert layer["moe.routing_weights"] == 256
    assert layer["moe.gate_up"] == 49_152
    assert sum(layer.values()) == 393_488


def test_qwen2_moe_shared_expert_casts_its_input_three_times_more():
    # Measured: 335,256 B per layer (qwen2_moe E6 k2 I32 autocast-bf16 sdpa b2 s32). Beside the router's cast, the
    # shared expert's gate_proj and up_proj and shared_expert_gate keep one bf16 cast each: 3·64·64·2 = 24,576 B;
    # the shared MLP's gate, activation output, up and product stay bf16, 64·80·2 = 10,240 B each.
    layer = _named(layer_activations(architecture_from_hf_config(QWEN2_MOE), _setup()))
    assert layer["moe.shared.input (half cast x3)"] == 24_576
    assert layer["moe.shared.gate"] == 10_240
    assert sum(layer.values()) == 335_256


def test_load_balancing_softmax_is_fp32_under_cuda_autocast():
    # CPU autocast leaves softmax alone (measured: the head keeps 2 layers · 64·4 bf16 = 1,024 B of probabilities);
    # CUDA autocast runs a softmax given no dtype in fp32 (aten/src/ATen/autocast_mode.h,
    # AT_FORALL_FP32_SET_OPT_DTYPE): 2 · 64·4·4 = 2,048 B.
    arch = architecture_from_hf_config({**MIXTRAL, "output_router_logits": True})
    assert _named(head_activations(arch, _setup()))["moe_aux.router_probs"] == 1_024
    assert _named(head_activations(arch, _setup(device="cuda")))["moe_aux.router_probs"] == 2_048


@pytest.mark.parametrize("config", [MIXTRAL, QWEN3_MOE, QWEN2_MOE])
def test_measured_families_are_accepted_under_autocast(config):
    validate_setup(Training(micro_batch_size=2, seq_len=32, precision=AUTOCAST), Parallelism(),
                   architecture_from_hf_config(config))


GPT_OSS = {"model_type": "gpt_oss", "intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2,
           "head_dim": 16, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"], **SHAPE}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "intermediate_size": 96, "moe_intermediate_size": 24,
               "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "n_shared_experts": 1,
               "first_k_dense_replace": 0, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
               "qk_rope_head_dim": 8, "v_head_dim": 16, **{**SHAPE, "num_key_value_heads": 4}}


def test_gpt_oss_is_accepted_under_autocast():
    # Measured exact under autocast too (docs/VALIDATION.md, "gpt-oss"; tests/core/test_gpt_oss_autocast.py).
    validate_setup(Training(micro_batch_size=2, seq_len=32, precision=AUTOCAST), Parallelism(),
                   architecture_from_hf_config(GPT_OSS))


@pytest.mark.parametrize(("config", "training", "parallelism"), [
    (DEEPSEEK_V3, Training(micro_batch_size=2, seq_len=32, precision=AUTOCAST), Parallelism()),
    (MIXTRAL, Training(micro_batch_size=2, seq_len=32, precision=AUTOCAST, finetuning=Finetuning(frozen_layers=1)),
     Parallelism()),
    (MIXTRAL, Training(micro_batch_size=2, seq_len=32, precision=AUTOCAST), Parallelism(data=2, expert=2)),
])
def test_unmeasured_mixtures_under_autocast_name_the_precision(config, training, parallelism):
    with pytest.raises(DomainError) as error:
        validate_setup(training, parallelism, architecture_from_hf_config(config))
    assert error.value.field == "training.precision"
    assert "autocast" in error.value.message
