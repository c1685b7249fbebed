"""Attention in Hugging Face's modules: which kernel runs (flash, memory-efficient, math, eager) and what each
saves, with eager attention's sinks and the query and key norms."""

from __future__ import annotations

from app.core.architecture import Architecture
from app.core.families import family_of
from app.core.saved.common import (
    FLASH_MAX_HEAD_DIM,
    FP32_BYTES,
    HALF_DTYPES,
    INDEX_BYTES,
    MEM_EFFICIENT_LSE_ALIGN,
    ActivationSetup,
    Kernel,
    _Saved,
)
from app.core.saved.falcon import falcon_attention, falcon_kernel
from app.core.units import ceil_div


def attention_kernel(arch: Architecture, setup: ActivationSetup) -> Kernel:
    """The attention kernel that runs for this choice, model and device.

    * ``eager``: eager; ``flash``: the fused kernel (on CPU, the math path when attention dropout is
      on, see `_cpu_sdpa_falls_back_to_math`).
    * ``sdpa`` on CPU: as ``flash`` (CPU sdpa runs its flash-style kernel without dropout).
    * ``sdpa`` on CUDA, torch's dispatch order (sdp_utils.cpp, select_sdp_backend): flash when the
      activations are fp16 or bf16 and the head size is at most 256; otherwise memory-efficient,
      unless K/V heads are grouped, which it refuses; otherwise math. Megatron-LM has no math path:
      where flash cannot run it uses its unfused softmax, modelled as eager.

    Multi-head latent attention's value heads (d_v) are narrower than its query and key heads (d_n + d_r), and
    the flash kernels take one head size for all three (sdp_utils_cpp.h check_head_dim_size_cpp on CPU,
    check_head_dim_size_flash on CUDA): CPU sdpa then takes the math path, CUDA sdpa the memory-efficient kernel
    (which allows a different value head size, and MLA's key and value heads are never grouped).

    transformers has no sdpa path for gpt-oss (GptOssPreTrainedModel._supports_sdpa is False: sdpa takes no sink
    logits), so ``sdpa`` is its default, eager (`Family.eager_under_sdpa`).
    """
    choice = setup.attention
    if choice in ("eager", "memory-efficient", "math"):
        return choice  # an already resolved kernel
    if choice == "sdpa" and family_of(arch).eager_under_sdpa:
        return "eager"
    if choice == "sdpa" and family_of(arch).falcon_attention:
        return falcon_kernel(arch, setup)
    unequal_heads = arch.is_mla and arch.v_head_dim != arch.head_size and choice == "sdpa"
    if setup.device == "cpu" or choice == "flash":
        return "math" if unequal_heads or _cpu_sdpa_falls_back_to_math(arch, setup) else "flash"
    if unequal_heads:
        return "memory-efficient"
    if setup.precision.activations in HALF_DTYPES and arch.head_size <= FLASH_MAX_HEAD_DIM:
        return "flash"
    if setup.implementation == "megatron":
        return "eager"
    return "memory-efficient" if arch.kv_heads == arch.num_attention_heads else "math"


def output_copied(arch: Architecture, setup: ActivationSetup) -> bool:
    """Whether a fused kernel's output reaches the output projection as a copy rather than as itself: Q is joined by
    torch.cat, so it is contiguous as (b, a, s, d), the kernel's output takes Q's layout, and the attention's reshape
    to (b, s, a·d) must copy it. transformers does so for the families that rotate a prefix of each head
    (`Family.rotary_cat`); LitGPT for every model (lit_gpt/model.py at 8641822, CausalSelfAttention.forward:
    ``q = torch.cat((q_roped, q[..., rope_n_elem:]), dim=-1)``, then ``y.reshape(B, T, C)``) where the flash kernel
    runs, which allocates its output as ``empty_like`` of Q (PyTorch's flash_api.cpp, mha_fwd); the memory-efficient
    kernel allocates (b, s, a, d) whatever Q's layout (torch/_meta_registrations.py, meta__efficient_attention_forward:
    ``torch.empty(B, M, num_heads, Kv)``), so LitGPT's reshape is then a view."""
    litgpt_copies = setup.implementation == "litgpt" and attention_kernel(arch, setup) == "flash"
    return family_of(arch).rotary_cat or litgpt_copies


def _hf_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, out_proj_input: bool = True,
                  grads: tuple[bool, bool, bool] = (True, True, True)) -> None:
    """`grads`: whether Q, K and V need gradients (in the lowest trainable layer, only those with adapters do)."""
    kernel = attention_kernel(arch, setup)
    if family_of(arch).falcon_attention:
        falcon_attention(saved, arch, setup, kernel=kernel, out_proj_input=out_proj_input, grads=grads)
    elif kernel == "eager" and arch.attention_sinks:
        _hf_sink_eager_attention(saved, arch, setup, out_proj_input=out_proj_input, grads=grads)
    elif kernel == "eager":
        _hf_eager_attention(saved, arch, setup, out_proj_input=out_proj_input, grads=grads)
    elif kernel == "math":
        _hf_sdpa_math_attention(saved, arch, setup, out_proj_input=out_proj_input)
    else:
        # A fused kernel keeps Q, K, V, its output (also the output projection's input) and the
        # fp32 log-sum-exp per query and head (Dao et al. 2022, arXiv:2205.14135, Algorithm 2).
        # Grouped K and V are passed with their g heads (sdpa's enable_gqa). On CPU, sdpa without
        # attention dropout runs such a kernel too (_scaled_dot_product_flash_attention_for_cpu).
        b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
        a, d, g = arch.num_attention_heads, arch.head_size, arch.kv_heads
        wa = setup.half_bytes
        saved.add("attn.query", n * a * d, wa, "tensor")
        saved.add("attn.key", n * g * d, wa, "tensor")
        saved.add("attn.value", n * (a + 2 * g if family_of(arch).value_in_fused_qkv else g) * d, wa, "tensor")
        saved.add("attn.output", n * a * d, wa, "tensor")
        queries = s if kernel == "flash" else ceil_div(s, MEM_EFFICIENT_LSE_ALIGN) * MEM_EFFICIENT_LSE_ALIGN
        # Part of the attention core: selective recomputation reruns the kernel and keeps only its inputs.
        saved.add("attn.logsumexp", b * a * queries, FP32_BYTES, "tensor", core=True)
        if out_proj_input and output_copied(arch, setup):
            saved.add("attn.out_proj_input", n * a * d, wa, "tensor")
    if arch.dropout > 0:
        saved.mask("attn.residual_dropout_mask", setup.tokens * arch.hidden_size, setup.half_bytes, "sequence")


def _hf_eager_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, out_proj_input: bool = True,
                        grads: tuple[bool, bool, bool] = (True, True, True)) -> None:
    """eager_attention_forward as written: two matmuls around an explicit softmax.

    Grouped K and V are repeated to all a heads (repeat_kv) before the matmuls, which keep the
    repeated copies (`_hf_eager_kv_heads`). Softmax keeps its output (`_hf_softmax_bytes`); it is then cast to
    the dtype of the query (Llama family) or of the value (GPT-2) (`_hf_probs_bytes`), and with
    attention dropout the dropout keeps its mask at that width on CPU. The second matmul keeps the
    probabilities it multiplies, in the activation dtype (under autocast, its own half cast).
    Each matmul keeps one operand for the other's gradient: Q only if K needs a gradient, K only if
    Q does, the probabilities only if V does (`grads`, for frozen projections).
    """
    q_grad, k_grad, v_grad = grads
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, d = arch.num_attention_heads, arch.head_size
    wa = setup.half_bytes
    scores = b * a * s * s
    key_heads, value_heads = _hf_eager_kv_heads(arch, setup)
    if family_of(arch).value_in_fused_qkv and b == 1:  # V a view of the fused QKV output: that whole storage
        value_heads = a + 2 * arch.kv_heads
    if k_grad:
        saved.add("attn.query", n * a * d, wa, "tensor")
    if q_grad:
        saved.add("attn.key", n * key_heads * d, wa, "tensor")
    saved.add("attn.value", n * value_heads * d, wa, "tensor")
    if arch.extra("attn_logit_softcapping"):
        # Gemma 2: scores / cap -> tanh -> * cap; tanh keeps its output.
        saved.add("attn.softcap_tanh", scores, wa, "tensor", core=True)
    softmax_bytes = _hf_softmax_bytes(arch, setup)
    saved.add("attn.softmax", scores, softmax_bytes, "tensor", core=True)
    if arch.attn_dropout > 0:
        saved.mask("attn.softmax_dropout_mask", scores, _hf_probs_bytes(arch, setup), "tensor", core=True)
        saved.add("attn.softmax_dropout_output", scores, wa, "tensor", core=True)
    elif softmax_bytes != wa:
        # The matmul with V keeps the half-precision probabilities, a second copy.
        saved.add("attn.probs_half", scores, wa, "tensor", core=True)
    if out_proj_input:  # kept by the output projection for its weight's gradient
        saved.add("attn.out_proj_input", n * a * d, wa, "tensor")


def _hf_sink_eager_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, out_proj_input: bool = True,
                             grads: tuple[bool, bool, bool] = (True, True, True)) -> None:
    """gpt-oss's eager_attention_forward (modeling_gpt_oss.py, transformers 5.24): attention with sinks.

    Each row of scores is joined by its head's sink logit as an (s + 1)-th column, less the row's maximum, through a
    softmax in the activations' dtype (not fp32), and the sink column is dropped before the product with V. The
    matmuls keep Q, K and V as `_hf_eager_attention` says (K and V repeated to all a heads). The row maximum keeps
    its int64 index (b·a·s: max's backward sends the gradient there); softmax keeps its output, b·a·s·(s + 1), and
    the second matmul the view of it without the sink column, the same storage (it folds to b·a × s × s without a
    copy). The scaling, the mask, the concatenation and the subtraction keep nothing; the sink's gradient is the
    sum of its column's. With attention dropout, the dropout keeps its mask and the second matmul the dropped
    probabilities.

    Under autocast the sinks are a parameter in the weights' dtype (fp32), and torch.cat, on autocast's promote
    list (aten/src/ATen/autocast_mode.cpp), joins the half-precision scores to them in fp32: the row maximum, the
    softmax (``dtype=combined_logits.dtype``) and its output b·a·s·(s + 1) are fp32 (`ActivationSetup.stream_bytes`),
    and on CPU so is the dropout's mask. ``.to(value_states.dtype)`` casts the b·a·s·s probabilities to V's half
    precision (v_proj's output), a copy the second matmul keeps beside the fp32 softmax. Q and K arrive in fp32 from
    the rotary multiply (cos and sin at the stream's width) and the first matmul keeps its own half casts of them,
    the bytes a half-precision model keeps. Measured on CPU: docs/VALIDATION.md, "gpt-oss".
    """
    q_grad, k_grad, v_grad = grads
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, d = arch.num_attention_heads, arch.head_size
    wa = setup.half_bytes
    key_heads, value_heads = _hf_eager_kv_heads(arch, setup)
    if k_grad:
        saved.add("attn.query", n * a * d, wa, "tensor")
    if q_grad:
        saved.add("attn.key", n * key_heads * d, wa, "tensor")
    saved.add("attn.value", n * value_heads * d, wa, "tensor")
    softmax_bytes = setup.stream_bytes  # the sinks' dtype: the activations', or fp32 under autocast
    saved.add("attn.row_max_index", b * a * s, INDEX_BYTES, "tensor", core=True)
    saved.add("attn.softmax_with_sink", b * a * s * (s + 1), softmax_bytes, "tensor", core=True)
    if arch.attn_dropout > 0:
        saved.mask("attn.softmax_dropout_mask", b * a * s * s, softmax_bytes, "tensor", core=True)
        # The dropped probabilities, or under autocast their half cast, which the matmul with V keeps.
        saved.add("attn.softmax_dropout_output", b * a * s * s, wa, "tensor", core=True)
    elif softmax_bytes != wa:
        saved.add("attn.probs_half", b * a * s * s, wa, "tensor", core=True)
    if out_proj_input:
        saved.add("attn.out_proj_input", n * a * d, wa, "tensor")


def _hf_eager_kv_heads(arch: Architecture, setup: ActivationSetup) -> tuple[int, int]:
    """Heads of the K and V tensors the eager matmuls keep.

    repeat_kv expands K and V from g to a heads (stride 0) and reshapes them, and torch.matmul
    folds batch and heads into one batch dimension; each reshape copies unless it can stay a view.
    With grouped heads (g > 1) repeat_kv's reshape copies, so a heads are kept. With one key/value
    head (multi-query attention) repeat_kv's reshape stays a view, and at micro-batch 1 so does the
    matmul's fold: the matmuls then keep views of the g-head K and V. Under autocast K arrives in
    fp32 (the rotary multiply promotes it to cos's dtype), and autocast's half cast of the expanded
    tensor materialises all a heads.
    """
    a, g = arch.num_attention_heads, arch.kv_heads
    if g == a or g > 1 or setup.micro_batch_size > 1:
        return a, a
    key_heads = a if setup.stream_bytes != setup.half_bytes else g
    return key_heads, g


def _cpu_sdpa_falls_back_to_math(arch: Architecture, setup: ActivationSetup) -> bool:
    """CPU sdpa runs its fused flash-style kernel only without attention dropout; otherwise the math path."""
    return setup.device == "cpu" and arch.attn_dropout > 0


def _hf_sdpa_math_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *,
                            out_proj_input: bool = True) -> None:
    """torch's _scaled_dot_product_attention_math, op by op: CPU sdpa with attention dropout, and CUDA sdpa
    where neither fused kernel takes the inputs (fp32 with grouped K/V heads, `attention_kernel`).

    The math path upcasts fp16/bf16 Q, K and V to fp32, repeats grouped K and V to all a heads
    (enable_gqa), and multiplies Q and K each by sqrt(scale), making scaled copies that the first
    batched matmul keeps; V is kept by the second. Softmax keeps its fp32 output (a b*a*s*s fp32
    tensor, the s-squared term a fused kernel avoids), which the second matmul keeps too; with attention
    dropout, the dropout keeps its mask (the dropped tensor's width on CPU, one byte on CUDA) and the
    second matmul the fp32 dropped probabilities instead. Without dropout only the softmax's output is
    kept: measured on an H200 with fp32 Gemma 3 1B (docs/VALIDATION.md, "On a GPU"). The output is cast
    back to the input dtype before the output projection, which keeps it in the activation dtype.
    """
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, d = arch.num_attention_heads, arch.head_size
    scores = b * a * s * s
    saved.add("attn.query_scaled_fp32", n * a * d, FP32_BYTES, "tensor")
    saved.add("attn.key_scaled_fp32", n * a * d, FP32_BYTES, "tensor")
    value_heads = a
    if arch.fused_qkv and setup.micro_batch_size == 1 and setup.half_bytes == FP32_BYTES and arch.kv_heads == a:
        # fp32 V needs no upcast copy, and at micro-batch 1 the fold to (heads, s, d) stays a view
        # of the fused QKV projection's output, so that whole storage stays alive.
        value_heads = a + 2 * arch.kv_heads
    saved.add("attn.value_fp32", n * value_heads * d, FP32_BYTES, "tensor")
    saved.add("attn.softmax", scores, FP32_BYTES, "tensor", core=True)
    if arch.attn_dropout > 0:
        saved.mask("attn.softmax_dropout_mask", scores, FP32_BYTES, "tensor", core=True)
        saved.add("attn.softmax_dropout_output", scores, FP32_BYTES, "tensor", core=True)
    if out_proj_input:
        saved.add("attn.out_proj_input", n * a * d, setup.half_bytes, "tensor")


def _hf_softmax_bytes(arch: Architecture, setup: ActivationSetup) -> int:
    """Width of the kept softmax output.

    The Llama family asks for fp32 (``softmax(..., dtype=torch.float32)``). GPT-2 calls softmax on
    the scores in their own dtype; under autocast those are fp32, because the additive causal mask
    transformers materialises for eager attention is in the model's dtype (fp32 weights, so fp32)
    and the add promotes the half-precision scores (CUDA autocast would run softmax in fp32 anyway).
    """
    if family_of(arch).gpt2_modules:
        return FP32_BYTES if setup.autocast else setup.half_bytes
    if family_of(arch).softmax_in_scores_dtype:  # CPU autocast has no softmax kernel of its own (torch 2.13)
        return FP32_BYTES if setup.autocast and setup.device == "cuda" else setup.half_bytes
    return FP32_BYTES


def _hf_probs_bytes(arch: Architecture, setup: ActivationSetup) -> int:
    """Width of the probabilities attention dropout sees: the cast that follows softmax.

    GPT-2 casts them to the value's dtype (the activation dtype). The Llama family casts them to
    the query's dtype, and the query is the rotary output ``q * cos + rotate_half(q) * sin``:
    cos and sin are in the residual stream's dtype (fp32 under autocast), which the multiply
    promotes the half-precision query to.
    """
    if family_of(arch).gpt2_modules or arch.position_embedding != "rope":
        return setup.half_bytes
    return setup.stream_bytes


def _hf_qk_norms(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weight_grad: bool,
                 input_grads: tuple[bool, bool] = (True, True)) -> None:
    """The RMSNorms of Q and K before the rotary multiply: as every RMSNorm (`_hf_norm`), its fp32 input and
    fp32 reciprocal RMS, and the normalised tensor for its weight's gradient. A norm whose projection's output
    needs no gradient (`input_grads`, for Q and K: frozen weights, no adapter, an input without a gradient) and
    whose weight is frozen keeps nothing.

    Qwen3 and Gemma 3 normalise each head (modeling_qwen3.py, modeling_gemma3.py: q_norm and k_norm over
    head_dim), so the reciprocal RMS has one value per token and head; OLMo 2 normalises the whole projection
    (modeling_olmo2.py: q_norm over a*d, k_norm over g*d), one value per token. Gemma's and OLMo 2's norms
    keep the normalised tensor in fp32, and Gemma's its fp32 (1 + weight) of d elements.
    """
    n, d = setup.tokens, arch.head_size
    per_head = arch.qk_norm_over == "head"
    normalised_bytes = FP32_BYTES if family_of(arch).fp32_normalised else setup.half_bytes
    one_plus_weight = family_of(arch).one_plus_weight
    for (name, heads), needed in zip((("q_norm", arch.num_attention_heads), ("k_norm", arch.kv_heads)), input_grads,
                                     strict=True):
        if not (needed or weight_grad):
            continue
        saved.add(f"attn.{name}.input_fp32", n * heads * d, FP32_BYTES, "tensor")
        saved.add(f"attn.{name}.rstd", n * heads if per_head else n, FP32_BYTES, "tensor" if per_head else "none")
        if weight_grad:
            saved.add(f"attn.{name}.normalised", n * heads * d, normalised_bytes, "tensor")
        if one_plus_weight:
            saved.add(f"attn.{name}.one_plus_weight_fp32", d, FP32_BYTES, "none")
