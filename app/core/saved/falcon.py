"""Falcon's attention (FalconAttention, modeling_falcon.py, transformers 5.24) with rotary positions: what each kernel
keeps. Measured on CPU: docs/VALIDATION.md, "More families"."""

from __future__ import annotations

from app.core.architecture import Architecture
from app.core.saved.common import FP32_BYTES, INDEX_BYTES, MEM_EFFICIENT_LSE_ALIGN, ActivationSetup, Kernel, _Saved
from app.core.units import ceil_div


def falcon_kernel(arch: Architecture, setup: ActivationSetup) -> Kernel:
    """The kernel Falcon's attention runs under ``sdpa``. FalconModel always materialises the causal mask
    (create_causal_mask with allow_is_causal_skip False) and hands it to torch's scaled_dot_product_attention without
    enable_gqa. Multi-query K and V keep their one head, which neither fused kernel broadcasts: the math path. With
    the new decoder architecture K and V arrive broadcast to every head: on CPU the flash-style kernel, which takes a
    mask; on CUDA the memory-efficient one (flash takes none)."""
    if arch.kv_heads < arch.num_attention_heads and not new_decoder(arch):
        return "math"
    return "flash" if setup.device == "cpu" else "memory-efficient"


def new_decoder(arch: Architecture) -> bool:
    """Falcon's new decoder architecture (Falcon-40B, -180B): more than one key/value head, broadcast to all heads."""
    return arch.kv_heads > 1


def falcon_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, kernel: Kernel,
                     out_proj_input: bool, grads: tuple[bool, bool, bool]) -> None:
    """What FalconAttention keeps, for b micro-batch, s sequence, n = b·s tokens, a heads, g key/value heads, d head.

    ``_split_heads`` indexes K and V out of the fused output with ``[-2]`` and ``[-1]``, and each index keeps its
    1-element int64 tensor. The rotary multiply makes new Q and K (cos and sin are the model's, kept once).

    * eager: ``Q @ K^T`` keeps Q and K, broadcast to all a heads: the new decoder architecture's K already is, and
      a multi-query K is copied by the matmul's fold, except at micro-batch 1 where the fold stays a view of its one
      head (V likewise); softmax runs in the activations' dtype and keeps its output, b·a·s², which the product with
      V keeps too; the merged heads are copied for the output projection, which keeps them.
    * flash/memory-efficient (the new decoder architecture): the materialised mask, converted to the query's dtype
      (b·s²), Q, K and V at all a heads, the output (the output projection's input, a view of it) and the fp32
      log-sum-exp.
    * math (multi-query under sdpa): `_falcon_math`.
    """
    q_grad, k_grad, _ = grads
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, d, wa = arch.num_attention_heads, arch.head_size, setup.half_bytes
    saved.add("attn.kv_indices", 2, INDEX_BYTES, "none")
    heads = a if new_decoder(arch) or b > 1 else arch.kv_heads
    if kernel == "eager":
        if k_grad:
            saved.add("attn.query", n * a * d, wa, "tensor")
        if q_grad:
            saved.add("attn.key", n * heads * d, wa, "tensor")
        saved.add("attn.value", n * heads * d, wa, "tensor")
        saved.add("attn.softmax", b * a * s * s, setup.stream_bytes, "tensor", core=True)
        if out_proj_input:
            saved.add("attn.out_proj_input", n * a * d, wa, "tensor")
        return
    if kernel == "math":
        _falcon_math(saved, arch, setup, heads=heads, out_proj_input=out_proj_input)
        return
    saved.add("attn.causal_mask", b * s * s, wa, "none", core=True)
    for name in ("query", "key", "value", "output"):
        saved.add(f"attn.{name}", n * a * d, wa, "tensor")
    queries = s if kernel == "flash" else ceil_div(s, MEM_EFFICIENT_LSE_ALIGN) * MEM_EFFICIENT_LSE_ALIGN
    saved.add("attn.logsumexp", b * a * queries, FP32_BYTES, "tensor", core=True)


def _falcon_math(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, heads: int,
                 out_proj_input: bool) -> None:
    """torch's math path for multi-query K and V: Q and K upcast to fp32 and scaled by sqrt(scale), V upcast, the
    matmuls keeping K and V broadcast to all a heads (`heads`: one at micro-batch 1, where the fold stays a view),
    the fp32 softmax output (b·a·s²); the output, cast back, is copied for the output projection."""
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, d = arch.num_attention_heads, arch.head_size
    saved.add("attn.query_scaled_fp32", n * a * d, FP32_BYTES, "tensor")
    saved.add("attn.key_scaled_fp32", n * heads * d, FP32_BYTES, "tensor")
    saved.add("attn.value_fp32", n * heads * d, FP32_BYTES, "tensor")
    saved.add("attn.softmax", b * a * s * s, FP32_BYTES, "tensor", core=True)
    if out_proj_input:
        saved.add("attn.out_proj_input", n * a * d, setup.half_bytes, "tensor")
