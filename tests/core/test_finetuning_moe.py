"""LoRA and partly frozen full fine-tuning of a mixture of experts (Mixtral, Qwen3-MoE): the attention adapted,
the router and the experts frozen. Measured against peft 0.21.2 on CPU (docs/VALIDATION.md, "Fine-tuning")."""

import pytest

from app import core
from app.core import activations as act
from app.core.finetuning import Finetuning

MIXTRAL = core.get_preset("mixtral-8x7b").architecture
BF16 = core.precision_preset("bf16")


def training(finetuning: Finetuning) -> core.Training:
    return core.Training(seq_len=4096, precision=BF16, finetuning=finetuning)


def test_lora_count_by_hand() -> None:
    """Mixtral-8x7B (https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json: hidden 4,096, 32
    layers, 8 K/V heads of 128): LoRA r = 16 on q_proj (4,096 -> 4,096) and v_proj (4,096 -> 1,024) adds
    r × (in + out) per module (Hu et al. 2021, A is r × in, B is out × r) in every layer."""
    adapters = 32 * 16 * ((4096 + 4096) + (4096 + 1024))
    assert adapters == 6_815_744
    result = core.estimate(architecture=MIXTRAL,
                           training=training(Finetuning(method="lora", rank=16, target_modules=("q_proj", "v_proj"))))
    assert result.trainable_param_count == adapters
    assert result.param_count == 46_702_792_704 + adapters


def test_frozen_experts_keep_no_linear_inputs() -> None:
    """A frozen F.linear needs no weight gradient, so the router's input, the gathered tokens and the down matmul's
    input are not kept; the rest of the block's tensors are, for the gradients to the tokens."""
    setup = act.ActivationSetup(micro_batch_size=1, seq_len=4096, precision=BF16, attention="flash",
                                finetuning=Finetuning(method="lora", target_modules=("q_proj", "v_proj")))
    full = {item.name for item in act.layer_activations(MIXTRAL, setup, "full")}
    frozen_names = {"moe.router_input", "moe.gathered_tokens", "moe.product"}
    assert not frozen_names & full
    assert {"moe.gate_up", "moe.act_output", "moe.routing_weights", "moe.expert_output"} <= full
    trained = act.ActivationSetup(micro_batch_size=1, seq_len=4096, precision=BF16, attention="flash")
    assert frozen_names <= {item.name for item in act.layer_activations(MIXTRAL, trained)}


def test_frozen_layers_of_a_mixture() -> None:
    """Full fine-tuning with the first 8 layers frozen: 24 layers' parameters train (everything else does too)."""
    result = core.estimate(architecture=MIXTRAL, training=training(Finetuning(method="full", frozen_layers=8)))
    per_layer = (46_702_792_704 - 2 * 32_000 * 4096 - 4096) // 32
    assert result.trainable_param_count == 46_702_792_704 - 8 * per_layer


def test_k_norm_without_gradient_keeps_nothing() -> None:
    """Qwen3's per-head K norm in the lowest layer with only q_proj and v_proj adapted: K's projection is frozen
    and its input needs no gradient, so its norm records nothing; Q's norm (before an adapted projection's
    output) keeps its fp32 input and reciprocal RMS (measured: Qwen3-MoE's first layer, 8,704 bytes fewer)."""
    # Qwen3-8B's shape (https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json).
    arch = core.architecture_from_hf_config({
        "model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
        "tie_word_embeddings": False})
    setup = act.ActivationSetup(micro_batch_size=1, seq_len=64, precision=BF16, attention="flash",
                                finetuning=Finetuning(method="lora", target_modules=("q_proj", "v_proj")))
    bottom = {item.name for item in act.layer_activations(arch, setup, "bottom")}
    assert not any(name.startswith("attn.k_norm") for name in bottom)
    assert {"attn.q_norm.input_fp32", "attn.q_norm.rstd"} <= bottom
    assert {"attn.k_norm.input_fp32", "attn.k_norm.rstd"} <= {item.name for item in
                                                              act.layer_activations(arch, setup, "full")}


@pytest.mark.parametrize(("finetuning", "layout", "field", "message"), [
    (Finetuning(method="lora", target_modules=("all-linear",), dropout=0.1), {}, "finetuning.dropout", "no dropout"),
    (Finetuning(method="lora", target_modules=("all-linear",)), {"tensor": 2}, "parallelism.tensor", "tensor"),
    (Finetuning(method="lora", target_modules=("gate_proj",)), {}, "finetuning.target_modules", "not a linear module"),
    (Finetuning(method="lora"), {"data": 8, "expert": 8}, "parallelism.expert", "no expert"),
])
def test_refused_by_name(finetuning: Finetuning, layout: dict, field: str, message: str) -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=MIXTRAL, training=training(finetuning), parallelism=core.Parallelism(**layout))
    assert caught.value.field == field
    assert message in caught.value.message


def test_deepseek_lora_on_the_attention() -> None:
    """DeepSeek's mixtures take LoRA on their latent attention (measured with peft: docs/VALIDATION.md,
    "Fine-tuning"); the frozen routers, shared experts and dense first layers keep no inputs. Frozen parts of a
    trained model and modules the attention does not have stay refused by name."""
    arch = core.get_preset("deepseek-v2-lite").architecture
    lora = Finetuning(method="lora", target_modules=("q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"))
    result = core.estimate(architecture=arch, training=training(lora))
    assert result.trainable_param_count == 27 * 16 * sum(  # 27 layers, r = 16: A (r x in) and B (out x r)
        into + out for into, out in ((2048, 16 * 192), (2048, 512 + 64), (512, 16 * 256), (16 * 128, 2048)))
    setup = act.ActivationSetup(micro_batch_size=1, seq_len=64, precision=BF16, device="cpu", finetuning=lora)
    names = {item.name for item in act.layer_activations(arch, setup, "full")}
    assert not {"moe.router_input_fp32", "moe.shared.input", "moe.shared.product", "moe.gathered_tokens",
                "attn.qkv_input", "attn.kv_b_input", "attn.out_proj_input"} & names
    assert {"lora.kv_b_proj.input_cast", "attn.kv_a_norm.input_fp32", "moe.router_weight_fp32"} <= names
    dense = {item.name for item in act.layer_activations(arch, setup, "full", dense=True)}
    assert "mlp.product" not in dense and "mlp.input" not in dense
    for finetuning, field, message in (
            (Finetuning(method="full", frozen_layers=2), "finetuning.method", "LoRA"),
            (Finetuning(method="lora", target_modules=("v_proj",)), "finetuning.target_modules", "kv_b_proj")):
        with pytest.raises(core.DomainError) as caught:
            core.estimate(architecture=arch, training=training(finetuning))
        assert caught.value.field == field
        assert message in caught.value.message


def _qwen2_moe() -> core.Architecture:
    # Qwen1.5-MoE-A2.7B's shape (https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json).
    return core.architecture_from_hf_config({
        "model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 16,
        "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936,
        "tie_word_embeddings": False})


def test_frozen_gated_shared_expert_keeps_no_down_input() -> None:
    """Qwen2-MoE with its shared expert frozen: the shared down projection keeps no input (measured with peft:
    docs/VALIDATION.md, "Fine-tuning"); gpt-oss's frozen biased router keeps no input either."""
    arch = _qwen2_moe()
    tuned = act.ActivationSetup(micro_batch_size=1, seq_len=64, precision=BF16, attention="flash",
                                finetuning=Finetuning(method="lora", target_modules=("q_proj", "v_proj")))
    names = {item.name for item in act.layer_activations(arch, tuned, "full")}
    assert "moe.shared.product" not in names and "moe.router_input" not in names
    assert {"moe.shared.gate", "moe.shared.up", "moe.shared_gate_sigmoid"} <= names
    oss = core.get_preset("gpt-oss-20b").architecture
    oss_names = {item.name for item in act.layer_activations(oss, tuned, "full")}
    assert not {"moe.router_input", "moe.product", "moe.sorted_expert_ids"} & oss_names


def test_shared_expert_targets_refused_with_the_reason() -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=_qwen2_moe(),
                      training=training(Finetuning(method="lora", target_modules=("q_proj", "gate_proj"))))
    assert caught.value.field == "finetuning.target_modules"
    assert "shared expert" in caught.value.message


def test_qlora_quantizes_the_linear_modules_only() -> None:
    """transformers 5.24 swaps bitsandbytes' 4-bit layers in for nn.Linear modules only
    (integrations/bitsandbytes.py, replace_with_bnb_linear): Mixtral's attention is stored in NF4, its routed
    experts (stacked parameters) and router stay in bf16. Mixtral-8x7B, r = 16 on q_proj and v_proj, by hand."""
    def nf4_double(elements: int) -> int:  # two weights a byte, an 8-bit absmax per 64, an fp32 constant per 256 of those
        return elements // 2 + elements // 64 + 4 * -(-elements // (64 * 256))

    h, kv, inter, experts, layers, vocab = 4096, 1024, 14336, 8, 32, 32000
    attention = 2 * nf4_double(h * h) + 2 * nf4_double(kv * h)  # q, o; k, v
    routed = experts * 3 * inter * h * 2  # gate_up and down, bf16
    per_layer = attention + routed + experts * h * 2 + 2 * h * 2  # + router and two norms, bf16
    adapters = layers * 16 * ((h + h) + (h + kv)) * 4  # A and B of q_proj and v_proj, fp32
    expected = layers * per_layer + 2 * vocab * h * 2 + h * 2 + adapters  # + embedding, output layer, final norm
    qlora = Finetuning(method="qlora", rank=16, target_modules=("q_proj", "v_proj"))
    assert core.estimate(architecture=MIXTRAL, training=training(qlora)).per_gpu["weights"] == expected


def test_all_linear_wraps_the_router_and_the_stacked_experts() -> None:
    """peft 0.21's all-linear on Mixtral adapts the router's weight and the stacked experts (ParamWrapper): A is
    (E·r x in) and B (out x E·r), twice the rank for the fused gate_up_proj; each forward folds the adapters into a
    new copy of each expert stack, which the layer keeps (measured with peft: docs/VALIDATION.md, "Fine-tuning").
    Mixtral-8x7B at r = 16, counted by hand."""
    h, kv, inter, experts, layers, r = 4096, 1024, 14336, 8, 32, 16
    attention = r * ((h + h) + (h + kv) + (h + kv) + (h + h))  # q, k, v, o
    router = r * (h + experts)
    gate_up = experts * 2 * r * (h + 2 * inter)
    down = experts * r * (inter + h)
    tuned = core.estimate(architecture=MIXTRAL, training=training(Finetuning(method="lora", rank=r,
                                                                             target_modules=("all-linear",))))
    assert tuned.trainable_param_count == layers * (attention + router + gate_up + down)
    setup = act.ActivationSetup(micro_batch_size=1, seq_len=64, precision=BF16, device="cpu",
                                finetuning=Finetuning(method="lora", rank=r, target_modules=("all-linear",)))
    saved = {item.name: item.bytes for item in act.layer_activations(MIXTRAL, setup, "full")}
    assert saved["moe.experts.gate_up.adapted_weight"] == experts * 2 * inter * h * 2
    assert saved["moe.experts.down.adapted_weight"] == experts * h * inter * 2
    assert {"moe.gathered_tokens", "moe.product", "moe.router_input"} <= set(saved)
    # gpt-oss's all-linear adapts the attention alone
    oss = core.get_preset("gpt-oss-20b").architecture
    assert core.estimate(architecture=oss, training=training(Finetuning(method="lora", target_modules=(
        "all-linear",)))).trainable_param_count == core.estimate(architecture=oss, training=training(Finetuning(
            method="lora", target_modules=("q_proj", "k_proj", "v_proj", "o_proj")))).trainable_param_count


def test_all_linear_on_deepseek_leaves_the_shared_experts_and_the_dense_layers() -> None:
    """peft 0.21's all-linear on DeepSeek adapts the latent attention, the router and the stacked experts of the
    sparse layers; the shared experts and the dense first layers' MLPs keep no adapters (their module names are the
    ones peft maps to the routed experts). DeepSeek-V2-Lite (27 layers, the first dense) at r = 16, by hand."""
    h, latent, experts, inter, layers, r = 2048, 512, 64, 1408, 27, 16
    attention = r * ((h + 16 * 192) + (h + latent + 64) + (latent + 16 * 256) + (16 * 128 + h))  # q, kv_a, kv_b, o
    sparse = r * (h + experts) + experts * 2 * r * (h + 2 * inter) + experts * r * (inter + h)  # router, experts
    lite = core.get_preset("deepseek-v2-lite").architecture
    result = core.estimate(architecture=lite, training=training(Finetuning(method="lora", rank=r,
                                                                           target_modules=("all-linear",))))
    assert result.trainable_param_count == layers * attention + (layers - 1) * sparse


def test_all_linear_on_qwen2_moe_adapts_its_linear_modules() -> None:
    """peft 0.21's all-linear on Qwen2-MoE adapts the attention, the shared expert's three linears and its gate,
    leaving the router and the stacked experts as they are (measured with peft: docs/VALIDATION.md, "Fine-tuning").
    Qwen1.5-MoE-A2.7B's shape at r = 16, counted by hand."""
    h, shared, layers, r = 2048, 5632, 24, 16
    per_layer = 4 * r * (h + h) + 2 * r * (h + shared) + r * (shared + h) + r * (h + 1)
    result = core.estimate(architecture=_qwen2_moe(), training=training(Finetuning(method="lora", rank=r,
                                                                                   target_modules=("all-linear",))))
    assert result.trainable_param_count == layers * per_layer
    setup = act.ActivationSetup(micro_batch_size=1, seq_len=64, precision=BF16, attention="flash",
                                finetuning=Finetuning(method="lora", rank=r, target_modules=("all-linear",)))
    names = {item.name for item in act.layer_activations(_qwen2_moe(), setup, "full")}
    assert {"lora.moe.shared.gate.input_cast", "lora.moe.shared.down.input_cast", "lora.moe.shared_gate.a_output"} <= names
    assert not {"moe.gathered_tokens", "moe.router_input", "moe.shared.product"} & names


def test_all_linear_on_a_custom_mixture_with_shared_experts_is_refused() -> None:
    # A custom mixture is modelled as Mixtral, which has no shared experts: what peft would adapt in one that has
    # them depends on the model's class, so trainmem asks for the attention's modules instead.
    from dataclasses import replace

    custom = replace(MIXTRAL, model_type=None, n_shared_experts=1)
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=custom, training=training(Finetuning(method="lora", target_modules=("all-linear",))))
    assert caught.value.field == "finetuning.target_modules"
