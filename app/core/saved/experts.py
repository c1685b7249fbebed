"""A mixture of experts' layer in Hugging Face's modules: the routers of each family, the routed and shared
experts, and experts wrapped for fine-tuning."""

from __future__ import annotations

from typing import Final, Protocol

from app.core.architecture import Architecture
from app.core.families import Router, family_of
from app.core.saved.common import (
    FP32_BYTES,
    INDEX_BYTES,
    MASK_BYTES,
    ActivationSetup,
    _Adapters,
    _Saved,
)
from app.core.saved.hf_parts import _hf_adapters


def _hf_moe(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True,
            shared_weights: bool | None = None, shared_adapters: tuple[_Adapters, _Adapters] = ((), ())) -> None:
    """A sparse MoE block as transformers 5.24 runs Mixtral's (modeling_mixtral.py: MixtralTopKRouter, then
    MixtralExperts over the tokens sorted by expert), for n tokens, k experts each, E experts of width I: the
    family's router and the routing (`_hf_routing`), the routed experts (`_hf_routed_experts`), and the shared
    experts where the family has them.

    With the router's and the experts' weights frozen (`weights` False: adapters elsewhere, a frozen layer that
    gradients pass through) their F.linear calls need no weight gradient and keep no input: neither the router's
    input, nor the gathered tokens, nor the down matmul's input; what the gradients to the tokens need stays.
    The shared experts' weights train as `shared_weights` says (as `weights` where it is None).
    Measured on CPU: docs/VALIDATION.md. Llama 4's block runs every expert on every token (`_llama4_moe`).
    """
    if family_of(arch).router == "llama4":
        _llama4_moe(saved, arch, setup, weights=weights)
        return
    _hf_routing(saved, arch, setup, weights=weights)
    _hf_routed_experts(saved, arch, setup, weights=weights)
    shared = weights if shared_weights is None else shared_weights
    if arch.n_shared_experts or family_of(arch).deepseek_experts:
        _hf_shared_experts(saved, arch, setup, weights=shared)
    elif arch.shared_expert_gate:
        _hf_gated_shared_expert(saved, arch, setup, weights=shared, adapters=shared_adapters)


def _llama4_moe(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True) -> None:
    """Llama4TextMoe (modeling_llama4.py, transformers 5.24), for n tokens, E experts of width I, k per token.

    Llama4Router's linear keeps its input (n × h; the shared expert's gate and up projections read the same
    tensor); top-k keeps its int64 indices (n × k), which the scatter of the top logits into a row of -inf reuses;
    the sigmoid, run in fp32, keeps its fp32 output (n × E), zero off the top k. Every token is then repeated for
    every expert (E·n × h) and multiplied by its score, a column of E·n copied out of the transposed scores: the
    multiply keeps both. Llama4TextExperts runs all E experts on all n tokens with two batched matmuls: the first
    keeps the scaled tokens (E·n × h), SiLU the gate-and-up output (E·n × 2I, whose up half the product keeps as a
    view), the product SiLU's output (E·n × I), the second matmul the product (E·n × I). So the experts keep E·n
    rows whatever k is, and however tokens are routed. The shared expert, a gated MLP of width I, keeps its gate,
    SiLU's output, its up projection and their product (n × I each); the block adds the experts' sum to it in
    place. All in the activations' dtype. With the weights frozen (`weights` False) the linears and matmuls keep
    no input for a weight gradient. Measured on CPU: docs/VALIDATION.md, "More families"."""
    n, h, e, k, width = setup.tokens, arch.hidden_size, arch.num_local_experts, arch.num_experts_per_tok, \
        arch.expert_size
    wa = setup.half_bytes
    if weights:
        saved.add("moe.router_input", n * h, wa, "sequence")
    saved.add("moe.topk_indices", n * k, INDEX_BYTES, "none")
    saved.add("moe.router_scores_fp32", n * e, FP32_BYTES, "none")
    saved.add("moe.scores_column", e * n, wa, "none")
    saved.add("moe.repeated_tokens", e * n * h, wa, "none")
    if weights:
        saved.add("moe.scaled_tokens", e * n * h, wa, "none")
    saved.add("moe.gate_up", e * n * 2 * width, wa, "expert")
    saved.add("moe.act_output", e * n * width, wa, "expert")
    if weights:
        saved.add("moe.product", e * n * width, wa, "expert")
    for name in ("gate", "act_output", "up", "product"):
        if weights or name != "product":
            saved.add(f"moe.shared.{name}", n * arch.shared_expert_size, wa, "tensor")


def _hf_routing(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool) -> None:
    """The family's router (`_ROUTERS`); with ``norm_topk_prob`` the renormalisation of the k weights, which keeps
    them and their sum (fp32; Qwen3-MoE renormalises only with it, and gpt-oss's weights already sum to one); and
    the int64 order of the n·k routed tokens, which routing keeps twice."""
    n, k = setup.tokens, arch.num_experts_per_tok
    router = family_of(arch).router
    _ROUTERS[router](saved, arch, setup, weights=weights)
    if arch.norm_topk_prob and router != "gpt-oss":  # the division by their sum keeps the k weights and the sum
        saved.add("moe.topk_weights_fp32", n * k, FP32_BYTES, "none")
        saved.add("moe.topk_weight_sum_fp32", n, FP32_BYTES, "none")
    saved.add("moe.routing_order", 2 * n * k, INDEX_BYTES, "none")


def _hf_softmax_router(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True) -> None:
    """MixtralTopKRouter (modeling_mixtral.py, transformers 5.24; Qwen3-MoE's is the same): the router's linear
    keeps its input (n × h), softmax its fp32 output (n × E), top-k its int64 indices (n × k). Frozen (`weights`
    False), its linear keeps no input.

    Under autocast the block's input is the post-attention norm's fp32 output (the residual stream's width). The
    router is an F.linear, which autocast runs in half precision: it keeps its own half cast of the input (n × h,
    the same bytes as above) and returns half-precision logits, so Qwen3-MoE's cast of the weights to the logits'
    dtype makes them half precision, as in a half-precision model."""
    n, h, e, k = setup.tokens, arch.hidden_size, arch.num_local_experts, arch.num_experts_per_tok
    if weights:
        saved.add("moe.router_input", n * h, setup.half_bytes, "sequence")
    saved.add("moe.router_probs_fp32", n * e, FP32_BYTES, "none")
    saved.add("moe.topk_indices", n * k, INDEX_BYTES, "none")


def _hf_routed_experts(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool) -> None:
    """MixtralExperts over the n·k routed tokens sorted by expert: routing keeps int32 counts per expert; the
    experts' gate-and-up matmul keeps the gathered tokens (n·k × h) and SiLU its whole (n·k × 2I) output, the
    product the activation's output (n·k × I), the down matmul its input (n·k × I); the weighting keeps the fp32
    routing weights (n·k) and the experts' outputs (n·k × h); the scatter back its int64 index. The sum over
    experts does not depend on how evenly tokens are routed. Qwen3-MoE casts the weights to the activations'
    dtype. Experts with biases (gpt-oss) gather each routed token's biases by its expert, an index that keeps the
    n·k sorted int64 expert ids; gpt-oss's clamped SwiGLU keeps what `_hf_clamped_swiglu` says. Frozen (`weights`
    False), neither the gathered tokens nor the down matmul's input are kept.

    Under autocast the routed experts run transformers' default ``grouped_mm`` path (integrations/moe.py,
    grouped_mm_experts_forward): torch._grouped_mm has no autocast kernel (neither AutocastCPU nor AutocastCUDA,
    torch 2.13), and `_grouped_mm` casts the tokens to the weights' dtype, fp32; so the experts compute in fp32 on
    the stacked fp32 parameters, which they keep by reference (no half copies of the experts' weights), and every
    n·k-row tensor of the experts (gathered tokens, gate-and-up output, activation, product, outputs) is kept at
    the stream's width (`ActivationSetup.stream_bytes`).
    """
    h, e, width = arch.hidden_size, arch.num_local_experts, arch.expert_size
    we = setup.stream_bytes  # the routed experts' dtype: the activations', or fp32 under autocast (grouped_mm)
    # What the experts keep per token copy follows the copies this GPU's experts take (ActivationSetup.received_on_rank),
    # their intermediate tensors at each expert's width over the expert-tensor GPUs.
    received = setup.received_on_rank(setup.tokens * arch.num_experts_per_tok)
    if arch.mlp_bias and weights:  # the biases' gathers by expert id keep the ids (one storage) for the biases' grads
        saved.add("moe.sorted_expert_ids", received, INDEX_BYTES, "none")
    saved.add("moe.tokens_per_expert", e, 4, "none")
    if weights:
        saved.add("moe.gathered_tokens", received * h, we, "none")
    saved.add("moe.gate_up", received * 2 * width, we, "expert")
    if family_of(arch).router == "gpt-oss":
        _hf_clamped_swiglu(saved, received * width, we, down_input=weights)
    else:
        saved.add("moe.act_output", received * width, we, "expert")
        if weights:
            saved.add("moe.product", received * width, we, "expert")
    # Mixtral and DeepSeek-V3 apply their fp32 routing weights as they are; Qwen3-MoE casts them to the router
    # logits' dtype first (the activations', half precision under autocast).
    saved.add("moe.routing_weights", received, FP32_BYTES if family_of(arch).fp32_routing else setup.half_bytes, "none")
    saved.add("moe.expert_output", received * h, we, "none")
    saved.add("moe.scatter_index", received, INDEX_BYTES, "none")


def _hf_wrapped_experts(saved: _Saved, arch: Architecture, setup: ActivationSetup) -> None:
    """peft 0.21's LoRA on a mixture's router weight and stacked experts (ParamWrapper, peft/tuners/lora/layer.py;
    `finetuning.experts_wrapped`), beyond what the block keeps with trainable weights (`_hf_moe`: the router's
    input, the gathered tokens and the down matmul's input, which the adapted weights' gradients need).

    Each forward the router's weight becomes W + B·A (one adapter on one matrix: `_LoraParameterProxy`), a new
    E × h tensor that its linear keeps; each expert stack becomes ``torch.baddbmm(W, lhs, rhs)`` (`_LoraFactorsProxy`),
    a new copy of the whole stack, E × 2I × h and E × h × I, which the grouped matmuls keep, and baddbmm keeps its
    two factors, the adapters' A and B cast to the weights' dtype: E × 2r × h and E × 2I × 2r for gate_up_proj (twice
    the rank: the gate and up projections fused), E × r × I and E × h × r for down_proj. In an fp32 model the casts
    are the adapters themselves. All in the weights' dtype. Measured on CPU: docs/VALIDATION.md, "Fine-tuning"."""
    e, h, width, r = arch.num_local_experts, arch.hidden_size, arch.expert_size, setup.finetuning.rank
    wb = setup.half_bytes
    if not family_of(arch).deepseek_experts or wb == FP32_BYTES:
        # DeepSeek's router casts the weight to fp32 and keeps that cast instead (`_router_weight_fp32`)
        saved.add("moe.router.adapted_weight", e * h, wb, "none")
    saved.add("moe.experts.gate_up.adapted_weight", e * 2 * width * h, wb, "none")
    saved.add("moe.experts.down.adapted_weight", e * h * width, wb, "none")
    if wb != FP32_BYTES:
        saved.add("moe.experts.gate_up.lora_factors", e * 2 * r * (h + 2 * width), wb, "none")
        saved.add("moe.experts.down.lora_factors", e * r * (width + h), wb, "none")


def _hf_gpt_oss_router(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True) -> None:
    """GptOssTopKRouter (modeling_gpt_oss.py, transformers 5.24): a linear with a bias over the E experts, top-k of
    its logits, and a softmax over those k logits alone, in the activations' dtype. The linear keeps its input
    (n × h), top-k its int64 indices (n × k; the experts route by the same tensor) and the softmax its output
    (n × k), the routing weights before they are gathered. No n × E probabilities are kept, and the k weights
    already sum to one (nothing to renormalise)."""
    n, h, k, wa = setup.tokens, arch.hidden_size, arch.num_experts_per_tok, setup.half_bytes
    if weights:  # a frozen router's linear keeps no input
        saved.add("moe.router_input", n * h, wa, "sequence")
    saved.add("moe.topk_indices", n * k, INDEX_BYTES, "none")
    saved.add("moe.router_topk_softmax", n * k, wa, "none")


def _hf_clamped_swiglu(saved: _Saved, elements: int, element_bytes: int, *, down_input: bool = True) -> None:
    """gpt-oss's clamped SwiGLU over the routed tokens (GptOssExperts._apply_gate, transformers 5.24), for
    `elements` = n·k·I: ``g = clamp(gate, max=limit)``, ``u = clamp(up, -limit, limit)``, then
    ``(u + 1) · (g · sigmoid(alpha · g))``. Both clamps keep their input, views of the gate-and-up output (kept
    already, `_hf_moe`'s moe.gate_up); the product g · sigmoid keeps g and the sigmoid's output (which sigmoid's
    backward needs too); the last product keeps u + 1 and g · sigmoid; the down projection keeps the result. The
    clamped u itself is kept by nothing (the + 1 needs no operand): five n·k·I tensors where Mixtral's SwiGLU
    keeps two; with frozen experts (`down_input` False) the down projection's input is not kept."""
    for name in ("gate_clamped", "gate_sigmoid", "up_plus_one", "glu", "product"):
        if down_input or name != "product":
            saved.add(f"moe.{name}", elements, element_bytes, "expert")


def _hf_deepseek_v3_router(saved: _Saved, arch: Architecture, setup: ActivationSetup, *,
                           weights: bool = True) -> None:
    """DeepseekV3TopkRouter (modeling_deepseek_v3.py, transformers 5.24): group-limited sigmoid routing.

    The router's linear runs in fp32 and keeps the fp32 cast of its input (n × h; in an fp32 model the input
    itself, which the shared experts read too); the sigmoid keeps its fp32 scores (n × E); each group is scored
    by its two best experts, whose topk keeps int64 indices (n × n_group × 2), the choice of the topk_group
    groups keeps its indices (n × topk_group), masking the other groups' experts keeps a bool mask (n × E) and
    the top-k over the rest its indices (n × k), which gathering the weights keeps too. With ``norm_topk_prob``
    the k weights and their sum are kept as for Mixtral (`_hf_moe`); ``routed_scaling_factor`` is a Python
    number, whose product keeps nothing. With the router frozen (`weights` False) its linear keeps no input.
    The linear's fp32 weight is a cast of the stored one where that is narrower (`_router_weight_fp32`).
    Measured on CPU: docs/VALIDATION.md, "Multi-head latent attention" and "Fine-tuning".
    """
    n, h, e, k = setup.tokens, arch.hidden_size, arch.num_local_experts, arch.num_experts_per_tok
    _router_weight_fp32(saved, arch, setup)
    if weights:
        saved.add("moe.router_input_fp32", n * h, FP32_BYTES, "sequence")
    saved.add("moe.router_scores_fp32", n * e, FP32_BYTES, "none")
    saved.add("moe.group_top2_indices", n * arch.n_group * 2, INDEX_BYTES, "none")
    saved.add("moe.group_indices", n * arch.topk_group, INDEX_BYTES, "none")
    saved.add("moe.group_mask", n * e, MASK_BYTES, "none")
    saved.add("moe.topk_indices", n * k, INDEX_BYTES, "none")


def _hf_deepseek_v2_router(saved: _Saved, arch: Architecture, setup: ActivationSetup, *,
                           weights: bool = True) -> None:
    """DeepseekV2TopkRouter (modeling_deepseek_v2.py, transformers 5.24): softmax routing, greedy or group-limited.

    The router's linear runs in fp32 and keeps the fp32 cast of its input (n × h; in an fp32 model the input
    itself, which the shared experts read too); the softmax keeps its fp32 probabilities (n × E). ``greedy``: the
    top-k over them keeps its int64 indices (n × k), the experts' routing. ``group_limited_greedy``: each of the
    n_group groups is scored by its best expert, a max that keeps its int64 index (n × n_group); the choice of the
    topk_group groups keeps its indices (n × topk_group), zeroing the other groups' probabilities a bool mask
    (n × E), and the top-k over the rest its indices (n × k). The k weights are the top-k's values, not
    renormalised, times ``routed_scaling_factor`` (a Python number, whose product keeps nothing). With the router
    frozen (`weights` False) its linear keeps no input. The linear's fp32 weight is a cast of the stored one where
    that is narrower (`_router_weight_fp32`). Measured on CPU: docs/VALIDATION.md, "DeepSeek-V2" and
    "Fine-tuning".
    """
    n, h, e, k = setup.tokens, arch.hidden_size, arch.num_local_experts, arch.num_experts_per_tok
    _router_weight_fp32(saved, arch, setup)
    if weights:
        saved.add("moe.router_input_fp32", n * h, FP32_BYTES, "sequence")
    saved.add("moe.router_probs_fp32", n * e, FP32_BYTES, "none")
    if arch.topk_method == "group_limited_greedy":
        saved.add("moe.group_max_indices", n * arch.n_group, INDEX_BYTES, "none")
        saved.add("moe.group_indices", n * arch.topk_group, INDEX_BYTES, "none")
        saved.add("moe.group_mask", n * e, MASK_BYTES, "none")
    saved.add("moe.topk_indices", n * k, INDEX_BYTES, "none")


def _router_weight_fp32(saved: _Saved, arch: Architecture, setup: ActivationSetup) -> None:
    """DeepSeek's routers compute ``F.linear(x.type(torch.float32), self.weight.type(torch.float32))``: with the
    weights stored narrower than fp32 the cast is a new E × h fp32 tensor each forward, which the linear keeps for
    the input's gradient until the layer's backward (trained or frozen). Measured on CPU (docs/VALIDATION.md,
    "Multi-head latent attention", "Fine-tuning"); 7,340,032 B a layer for DeepSeek-V3 (256 experts, h 7,168)."""
    if setup.precision.bits("weights") < 8 * FP32_BYTES:
        saved.add("moe.router_weight_fp32", arch.num_local_experts * arch.hidden_size, FP32_BYTES, "none")


def _hf_shared_experts(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True) -> None:
    """DeepSeekMoE's shared experts, one gated MLP of width I_s = n_shared_experts × moe_intermediate_size that
    every token passes through (DeepseekV3MLP, DeepseekV2MLP): its input (unless it is the router's fp32 input
    already, in an fp32 model), the gate, the activation's output, the up projection and their product, n × I_s
    each. DeepseekV3MoE and DeepseekV2Moe build the shared MLP even with n_shared_experts 0 (of width 0), whose
    linears still keep their input. Frozen (`weights` False), its linears keep no input: neither the block's
    input nor the product."""
    n, wa, width = setup.tokens, setup.half_bytes, arch.shared_expert_size
    if weights and not (family_of(arch).deepseek_experts and wa == FP32_BYTES):
        saved.add("moe.shared.input", n * arch.hidden_size, wa, "sequence")
    for name in ("gate", "act_output", "up", "product"):
        if weights or name != "product":
            saved.add(f"moe.shared.{name}", n * width, wa, "tensor")


def _hf_gated_shared_expert(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True,
                            adapters: tuple[_Adapters, _Adapters] = ((), ())) -> None:
    """Qwen2-MoE's shared expert and its gate (Qwen2MoeSparseMoeBlock, modeling_qwen2_moe.py, transformers 5.24):
    ``sigmoid(shared_expert_gate(x)) * shared_expert(x)`` with the shared expert a gated MLP of width
    I_s = shared_expert_intermediate_size. Its linears and the gate's read the router's input (one tensor, kept
    once: `_hf_moe`'s moe.router_input); the MLP keeps the gate, the activation's output, the up projection and
    their product (n × I_s each); the sigmoid keeps its output (n × 1), which the product with the shared
    expert's output (n × h) keeps too, beside that output.

    Under autocast the router, the shared expert's gate and up projections and the shared expert gate are four
    F.linear calls on the fp32 input, each casting it to half precision itself and keeping its own cast (autocast
    caches casts of leaf weights only, `_hf_linear_input`): three n × h half casts beyond the router's. The shared
    expert's outputs are half precision, as in a half-precision model. With its weights frozen (`weights` False)
    the down projection keeps no input (the product). peft's all-linear adapts the shared expert's three linears and
    its gate (`adapters`: those reading the block's input, then the down projection), which keep what
    `_hf_adapters` says (measured with peft: docs/VALIDATION.md, "Fine-tuning")."""
    n, wa, width = setup.tokens, setup.half_bytes, arch.shared_expert_size
    if setup.autocast:
        saved.add("moe.shared.input (half cast x3)", 3 * n * arch.hidden_size, wa, "sequence")
    for name in ("gate", "act_output", "up", "product"):
        if weights or name != "product":
            saved.add(f"moe.shared.{name}", n * width, wa, "tensor")
    saved.add("moe.shared_gate_sigmoid", n, wa, "none")
    saved.add("moe.shared.output", n * arch.hidden_size, wa, "sequence")
    reading_input, down = adapters
    _hf_adapters(saved, reading_input, setup.stream_bytes, input_kept=weights, input_grad=True, name="moe.router_input",
                 arch=arch, setup=setup)
    _hf_adapters(saved, down, wa, input_kept=weights, input_grad=True, name="moe.shared.product", arch=arch,
                 setup=setup)


class _RouterKeeps(Protocol):
    """What a router keeps (its linear's input only with trainable `weights`)."""

    def __call__(self, saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True) -> None: ...


# Each family's router (`Family.router`): what its linear, scores and choice of experts keep.
_ROUTERS: Final[dict[Router, _RouterKeeps]] = {
    "softmax": _hf_softmax_router, "gpt-oss": _hf_gpt_oss_router, "deepseek-v2": _hf_deepseek_v2_router,
    "deepseek-v3": _hf_deepseek_v3_router}
