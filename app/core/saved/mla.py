"""Multi-head latent attention (DeepSeek-V2 and V3) in Hugging Face's modules: its layer, its latent paths and
what it refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.finetuning import Finetuning, Role
from app.core.saved.attention import attention_kernel
from app.core.saved.common import (
    FP32_BYTES,
    MEM_EFFICIENT_LSE_ALIGN,
    ActivationSetup,
    Kernel,
    SavedTensor,
    _Adapters,
    _Saved,
)
from app.core.saved.hf_parts import _hf_adapters, _hf_linear_input, _hf_norm
from app.core.saved.mlp import _hf_mlp, _layer_tuning
from app.core.units import ceil_div


def _hf_mla_layer(arch: Architecture, setup: ActivationSetup, role: Role = "full", *,
                  dense: bool = False) -> list[SavedTensor]:
    """A DeepSeek-V3 or DeepSeek-V2 decoder layer (DeepseekV3DecoderLayer, DeepseekV2DecoderLayer, transformers
    5.24): the input RMSNorm, multi-head latent attention (`_hf_mla_attention`) on the normalised input that
    q_a_proj (or q_proj) and kv_a_proj_with_mqa share, the post-attention RMSNorm, and a dense MLP (the first
    ``first_k_dense_replace`` layers, `dense`) or the mixture of experts with its shared experts (`_hf_moe`).

    With LoRA (`role` and the adapters, as `_hf_layer`): the frozen linears keep no input and the frozen norms
    no normalised tensor; the adapters keep what `_hf_adapters` says, and each path through the attention keeps
    what its gradient needs (`_MlaGrads`)."""
    saved = _Saved(setup)
    if role == "off":
        return saved.items
    weights, input_grad, names, adapted = _layer_tuning(arch, setup, role)

    def adapters_on(*modules: str) -> _Adapters:
        return tuple((names.get(m, m), adapted[m][1]) for m in modules if m in adapted)

    grads = _MlaGrads.of(adapted, upstream=input_grad or weights)
    _hf_norm(saved, "attn_norm", arch, setup, weight_grad=weights, input_grad=input_grad)
    if weights:
        _hf_linear_input(saved, "attn.qkv_input", 2, arch, setup)
    _hf_adapters(saved, adapters_on("attn.q", "attn.q_a", "attn.kv_a"), setup.stream_bytes, input_kept=weights,
                 input_grad=input_grad, name="attn.qkv_input", arch=arch, setup=setup)
    _hf_mla_attention(saved, arch, setup, weights=weights, grads=grads,
                      q_b=adapters_on("attn.q_b"), kv_b=adapters_on("attn.kv_b"))
    attention_records = grads.query or grads.key or grads.value
    attn_out = adapters_on("attn.o")
    if attn_out:
        kernel_keeps_output = attention_records and attention_kernel(arch, setup) not in ("eager", "math")
        _hf_adapters(saved, attn_out, setup.half_bytes, input_kept=weights or kernel_keeps_output,
                     input_grad=attention_records, name="attn.out_proj_input", arch=arch, setup=setup)
    mlp_grad = input_grad or weights or bool(adapted)
    _hf_norm(saved, "mlp_norm", arch, setup, weight_grad=weights, input_grad=mlp_grad)
    if weights and (dense or not arch.is_moe):  # a MoE block's router and shared experts keep its input (_hf_moe)
        _hf_linear_input(saved, "mlp.input", 2, arch, setup)
    wrapped = "moe.experts.gate_up" in adapted and not dense  # the router and experts adapted (experts_wrapped)
    if mlp_grad or weights or wrapped:
        _hf_mlp(saved, arch, setup, down_input=weights, dense=dense, wrapped=wrapped)
    return saved.items


@dataclass(frozen=True)
class _MlaGrads:
    """Which of multi-head latent attention's tensors need a gradient: the outputs of q_a_proj (or q_proj) and of
    kv_a_proj_with_mqa, and Q, K and V. Everything does where the layer's input or weights do (`upstream`); in
    the lowest layer under LoRA only what an adapter feeds."""

    q_a: bool
    kv_a: bool
    query: bool
    key: bool
    value: bool

    @classmethod
    def of(cls, adapted: Mapping[str, object], *, upstream: bool) -> _MlaGrads:
        q_a = upstream or "attn.q_a" in adapted or "attn.q" in adapted
        query = q_a or "attn.q_b" in adapted
        kv_a = upstream or "attn.kv_a" in adapted
        kv_b = kv_a or "attn.kv_b" in adapted
        return cls(q_a=q_a, kv_a=kv_a, query=query, key=kv_b, value=kv_b)

    @property
    def scores(self) -> bool:
        """Whether the scores need a gradient: Q's or K's."""
        return self.query or self.key


def _hf_mla_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True,
                      grads: _MlaGrads | None = None, q_b: _Adapters = (),
                      kv_b: _Adapters = ()) -> None:
    """Multi-head latent attention as DeepseekV3Attention runs it (modeling_deepseek_v3.py, transformers 5.24),
    for r_q = q_lora_rank, r_kv = kv_lora_rank, d_n, d_r and d_v the no-rope, rope and value head sizes.

    The projections: q_a_layernorm keeps its fp32 input (n × r_q), reciprocal RMS and normalised tensor, and
    q_b_proj its input (n × r_q); kv_a_layernorm likewise over the latent (n × r_kv), except that in an fp32
    model its fp32 "copy" is the split view of kv_a_proj_with_mqa's output and keeps all n × (r_kv + d_r) of it;
    kv_b_proj keeps its input (n × r_kv). The rotary multiplies keep only cos and sin (the embedding's), and the
    concatenations that build Q and K keep nothing. DeepseekV2Attention (modeling_deepseek_v2.py) is the same but
    for its rotary embedding, complex multiplies of fp32 views of Q's and K's rotary parts that keep only the
    embedding's complex frequencies (`COMPLEX_ROTARY_MODELS`); its fp32 copies and casts back keep nothing.

    The attention, Q and K of n × a × (d_n + d_r) each and V of n × a × d_v, keeps what its kernel keeps
    (`_mla_eager`, `_mla_math`, `_mla_fused`); o_proj keeps its input, n × a × d_v. Measured on CPU:
    docs/VALIDATION.md, "Multi-head latent attention".

    With frozen weights (`weights` False) the projections keep no input and the latent norms no normalised tensor;
    a norm keeps its fp32 input and reciprocal RMS where its input needs a gradient, adapters on q_b_proj and
    kv_b_proj (`q_b`, `kv_b`) what `_hf_adapters` says, and each matmul of the attention keeps one operand only
    where the other needs a gradient (`grads`, as `_hf_eager_attention`); the fused kernels keep all they keep
    where any of Q, K and V needs one. Measured on CPU: docs/VALIDATION.md, "Fine-tuning".
    """
    g = grads or _MlaGrads(True, True, True, True, True)
    r_kv, d_r, wa = arch.kv_lora_rank or 0, arch.rope_size, setup.half_bytes
    if arch.q_lora_rank is not None:
        _mla_latent_path(saved, arch, setup, "q", arch.q_lora_rank, arch.q_lora_rank, grad=g.q_a, weights=weights,
                         adapters=q_b)
    _mla_latent_path(saved, arch, setup, "kv", r_kv, r_kv + (d_r if wa == FP32_BYTES else 0), grad=g.kv_a,
                     weights=weights, adapters=kv_b)
    kernel = attention_kernel(arch, setup)
    sizes = _MlaSizes.of(arch, setup, kernel)
    if g.scores or g.value:  # where nothing before the attention needs a gradient, it keeps nothing
        _MLA_KERNELS[kernel](saved, sizes, g, arch.attn_dropout > 0)
    if kernel in ("eager", "math") and weights:  # a fused kernel's output is o_proj's input
        saved.add("attn.out_proj_input", sizes.value, wa, "tensor")
    if arch.dropout > 0:
        saved.mask("attn.residual_dropout_mask", setup.tokens * arch.hidden_size, wa, "sequence")


@dataclass(frozen=True)
class _MlaSizes:
    """Elements of multi-head latent attention's tensors (`_hf_mla_attention`), for n tokens of b × s positions and
    a heads, and the bytes of an activation (`wa`)."""

    query: int  # Q, and K: n × a × (d_n + d_r)
    value: int  # V, and the output: n × a × d_v
    value_view: int  # V as the matmul keeps it: a copy, or at b = 1 the view of kv_b_proj's whole output
    kv_b_output: int  # kv_b_proj's output, n × a × (d_n + d_v), of which V is a view
    scores: int  # b × a × s × s
    logsumexp: int  # b × a × the fused kernel's rows of queries
    wa: int

    @classmethod
    def of(cls, arch: Architecture, setup: ActivationSetup, kernel: Kernel) -> _MlaSizes:
        b, s, n, a = setup.micro_batch_size, setup.seq_len, setup.tokens, arch.num_attention_heads
        d_v, d_n = arch.v_head_dim or 0, arch.qk_nope_head_dim or 0
        aligned = ceil_div(s, MEM_EFFICIENT_LSE_ALIGN) * MEM_EFFICIENT_LSE_ALIGN
        return cls(query=n * a * arch.head_size, value=n * a * d_v, value_view=n * a * ((d_n + d_v) if b == 1 else d_v),
                   kv_b_output=n * a * (d_n + d_v), scores=b * a * s * s,
                   logsumexp=b * a * (s if kernel == "flash" else aligned), wa=setup.half_bytes)


def _mla_eager(saved: _Saved, x: _MlaSizes, g: _MlaGrads, dropout: bool) -> None:
    """eager: the matmuls keep Q, K, the probabilities (fp32 softmax and its cast, as `_hf_eager_attention`) and
    V; V is a view of kv_b_proj's output (n × a × (d_n + d_v)) that the matmul's fold copies, except at
    micro-batch 1 where the fold stays a view and the whole output is kept."""
    if g.key:
        saved.add("attn.query", x.query, x.wa, "tensor")
    if g.query:
        saved.add("attn.key", x.query, x.wa, "tensor")
    if g.scores:
        saved.add("attn.softmax", x.scores, FP32_BYTES, "tensor", core=True)
    if dropout:
        _mla_softmax_dropout(saved, x.scores, x.wa, g)
    elif x.wa != FP32_BYTES and g.value:
        saved.add("attn.probs_half", x.scores, x.wa, "tensor", core=True)
    if g.scores:
        saved.add("attn.value", x.value_view, x.wa, "tensor")


def _mla_math(saved: _Saved, x: _MlaSizes, g: _MlaGrads, dropout: bool) -> None:
    """math (CPU sdpa, whose fused kernel wants one head size): the scaled fp32 copies of Q and K, the fp32 V
    (an upcast copy of n × a × d_v; in an fp32 model the view itself, with the same rule as eager), and the
    fp32 softmax that the second matmul keeps too; with dropout its mask and output as well."""
    if g.key:
        saved.add("attn.query_scaled_fp32", x.query, FP32_BYTES, "tensor")
    if g.query:
        saved.add("attn.key_scaled_fp32", x.query, FP32_BYTES, "tensor")
    if g.scores:
        saved.add("attn.value_fp32", x.value_view if x.wa == FP32_BYTES else x.value, FP32_BYTES, "tensor")
    saved.add("attn.softmax", x.scores, FP32_BYTES, "tensor", core=True)
    if dropout:
        _mla_softmax_dropout(saved, x.scores, FP32_BYTES, g)


def _mla_fused(saved: _Saved, x: _MlaSizes, g: _MlaGrads, dropout: bool) -> None:
    """A fused kernel (CUDA's memory-efficient kernel under sdpa, or flash), where any of Q, K and V needs a
    gradient: Q, K, V as passed (the view keeps kv_b_proj's whole output), its output and the fp32 log-sum-exp
    (not measured: no GPU in the harness)."""
    saved.add("attn.query", x.query, x.wa, "tensor")
    saved.add("attn.key", x.query, x.wa, "tensor")
    saved.add("attn.value", x.kv_b_output, x.wa, "tensor")
    saved.add("attn.output", x.value, x.wa, "tensor")
    saved.add("attn.logsumexp", x.logsumexp, FP32_BYTES, "tensor", core=True)


def _mla_softmax_dropout(saved: _Saved, scores: int, width: int, g: _MlaGrads) -> None:
    """Attention dropout on the probabilities (`width` bytes each): its mask where Q or K needs a gradient, its
    output where V does."""
    if g.scores:
        saved.mask("attn.softmax_dropout_mask", scores, width, "tensor", core=True)
    if g.value:
        saved.add("attn.softmax_dropout_output", scores, width, "tensor", core=True)


# What each kernel keeps where Q, K or V needs a gradient.
_MLA_KERNELS: Final[dict[Kernel, Callable[[_Saved, _MlaSizes, _MlaGrads, bool], None]]] = {
    "eager": _mla_eager, "math": _mla_math, "flash": _mla_fused, "memory-efficient": _mla_fused}


def _mla_latent_path(saved: _Saved, arch: Architecture, setup: ActivationSetup, path: str, rank: int, fp32_width: int,
                     *, grad: bool, weights: bool, adapters: _Adapters) -> None:
    """One of multi-head latent attention's low-rank paths (`path` q or kv, `_hf_mla_attention`): the RMSNorm over
    its latent (`rank` wide; its fp32 input `fp32_width` wide) keeps its fp32 input and reciprocal RMS where the
    latent needs a gradient (`grad`) and its normalised tensor with trainable `weights`, as the up-projection keeps
    its input; `adapters` on the up-projection keep what `_hf_adapters` says."""
    n, wa = setup.tokens, setup.half_bytes
    if grad:
        saved.add(f"attn.{path}_a_norm.input_fp32", n * fp32_width, FP32_BYTES, "none")
        saved.add(f"attn.{path}_a_norm.rstd", n, FP32_BYTES, "none")
    if weights:
        saved.add(f"attn.{path}_a_norm.normalised", n * rank, wa, "none")
        saved.add(f"attn.{path}_b_input", n * rank, wa, "none")
    _hf_adapters(saved, adapters, wa, input_kept=weights, input_grad=grad, name=f"attn.{path}_b_input", arch=arch,
                 setup=setup)


def _refuse_unmodelled_mla(arch: Architecture, setup: ActivationSetup) -> None:
    """Multi-head latent attention is modelled as transformers runs it, on one tensor-parallel rank, in the
    training dtype, training every weight: refuse the rest by name rather than guess."""
    if setup.implementation != "transformers":
        raise DomainError("training.implementation", "multi-head latent attention (DeepSeek) is modelled as "
                                                     "Hugging Face transformers runs it")
    if setup.tensor_parallel > 1:
        raise DomainError("parallelism.tensor", "tensor parallelism for multi-head latent attention (DeepSeek) is "
                                                "not modelled yet: how the latent projections split is a choice of "
                                                "the framework; use tensor 1 with data, pipeline or ZeRO sharding")
    if setup.autocast:
        raise DomainError("training.precision", "multi-head latent attention (DeepSeek) is modelled in its training "
                                                "dtype (bf16, fp16 or fp32), not under autocast")
    ft = setup.finetuning
    if ft != Finetuning() and not ft.adapters:
        raise DomainError("finetuning.method", "fine-tuning multi-head latent attention (DeepSeek) is modelled with "
                                               "LoRA or QLoRA adapters on the attention, not with frozen parts of a "
                                               "trained model")
