"""Parts of a Hugging Face layer that every family shares: the norms, the linear layers' inputs, and the
adapters (LoRA, QLoRA) on them."""

from __future__ import annotations

from app.core.architecture import Architecture
from app.core.families import family_of
from app.core.saved.common import (
    FP32_BYTES,
    ActivationSetup,
    _Adapters,
    _Saved,
)


def _hf_norm(saved: _Saved, prefix: str, arch: Architecture, setup: ActivationSetup, *,
             weight_grad: bool = True, input_grad: bool = True, input_kept: bool = False) -> None:
    """What one norm keeps, without its output (which the consumers keep).

    LayerNorm (torch.native_layer_norm) keeps its input and the per-token mean and reciprocal
    standard deviation: fp32 on CUDA (the kernel's accumulation type), but in the input's own dtype
    on CPU (the CPU kernel returns them as the input's dtype, so 2 bytes each for a bf16 input).
    RMSNorm as Hugging Face writes it (LlamaRMSNorm) casts the input to fp32 and keeps that copy
    (for ``pow``), the fp32 reciprocal RMS per token, and the normalised tensor cast back to the
    input dtype (for the multiply by ``weight``). Gemma's RMSNorm keeps the normalised tensor in
    fp32 and multiplies it by ``1.0 + self.weight.float()``, a new fp32 vector of h elements that
    the multiply keeps as well.

    With frozen weights or an input that needs no gradient, autograd keeps only what the gradients
    still asked for need: the RMSNorm's fp32 input and reciprocal RMS serve the input's gradient,
    the normalised tensor the weight's; LayerNorm keeps its three while either is asked for.
    `input_kept`: a LayerNorm's input that another norm keeps already (GPT-NeoX's two norms of the layer's input).
    """
    if not (weight_grad or input_grad):
        return
    if setup.implementation == "liger" and arch.norm == "rmsnorm":
        # LigerRMSNormFunction keeps its input in its own dtype and the fp32 reciprocal RMS, whichever gradient is
        # asked for (liger_kernel/ops/rms_norm.py, lines 465-466 and 674-676), and neither the fp32 copy nor the
        # normalised tensor.
        saved.add(f"{prefix}.input", setup.tokens * arch.hidden_size, setup.stream_bytes, "sequence")
        saved.add(f"{prefix}.rstd", setup.tokens, FP32_BYTES, "sequence")
        return
    n, h = setup.tokens, arch.hidden_size
    ws = setup.stream_bytes
    if family_of(arch).fp32_layernorm:
        _fp32_layernorm(saved, prefix, arch, setup, weight_grad=weight_grad, input_grad=input_grad)
        return
    if arch.norm == "layernorm":
        stats_bytes = ws if setup.device == "cpu" else FP32_BYTES
        if not input_kept:
            saved.add(f"{prefix}.input", n * h, ws, "sequence")
        saved.add(f"{prefix}.mean", n, stats_bytes, "sequence")
        saved.add(f"{prefix}.rstd", n, stats_bytes, "sequence")
        return
    if input_grad:
        saved.add(f"{prefix}.input_fp32", n * h, FP32_BYTES, "sequence")
        saved.add(f"{prefix}.rstd", n, FP32_BYTES, "sequence")
    fp32_normalised = family_of(arch).fp32_normalised
    if weight_grad:
        saved.add(f"{prefix}.normalised", n * h, FP32_BYTES if fp32_normalised else ws, "sequence")
    if input_grad and family_of(arch).one_plus_weight:
        saved.add(f"{prefix}.one_plus_weight_fp32", h, FP32_BYTES, "none")


def _fp32_layernorm(saved: _Saved, prefix: str, arch: Architecture, setup: ActivationSetup, *,
                    weight_grad: bool, input_grad: bool) -> None:
    """CohereLayerNorm (modeling_cohere.py, transformers 5.24): ``x`` cast to fp32, ``c = x - mean`` computed twice,
    ``c.pow(2)`` keeping the first, ``c * rsqrt(var + eps)`` the second and the fp32 reciprocal standard deviation
    (n), the weight's fp32 cast times that normalised tensor, cast back. For the input's gradient: 2·n·h + n fp32
    and the weight's cast (h fp32, a copy unless the weights are fp32 already); for the weight's: the normalised
    n·h fp32. Measured on CPU (docs/VALIDATION.md, "More families")."""
    n, h = setup.tokens, arch.hidden_size
    if input_grad:
        saved.add(f"{prefix}.centred_fp32 (x2)", 2 * n * h, FP32_BYTES, "sequence")
        saved.add(f"{prefix}.rstd", n, FP32_BYTES, "sequence")
        if setup.precision.bits("weights") != 8 * FP32_BYTES:
            saved.add(f"{prefix}.weight_fp32", h, FP32_BYTES, "none")
    if weight_grad:
        saved.add(f"{prefix}.normalised", n * h, FP32_BYTES, "sequence")


def _hf_linear_input(saved: _Saved, name: str, consumers: int, arch: Architecture, setup: ActivationSetup) -> None:
    """The input a norm feeds to `consumers` matmuls.

    Without autocast they share one tensor. Under autocast each matmul casts the fp32 input to
    half precision itself (autocast caches casts of leaf weights only) and keeps its own copy.
    """
    n, h = setup.tokens, arch.hidden_size
    if setup.autocast:
        saved.add(f"{name} (half cast x{consumers})", consumers * n * h, setup.half_bytes, "sequence")
    else:
        saved.add(name, n * h, setup.stream_bytes, "sequence")


def _hf_adapters(saved: _Saved, modules: _Adapters, input_bytes: int, *, input_kept: bool,
                 input_grad: bool, name: str, arch: Architecture, setup: ActivationSetup) -> None:
    """What LoRA adapters beside frozen linear layers keep, for `modules` (module name, input features)
    that read one input of `input_bytes` per element.

    peft's LoRA Linear.forward (peft/tuners/lora/layer.py) runs ``lora_B(lora_A(dropout(x)))`` after
    casting x to the adapter's dtype (``_cast_input_dtype``), fp32 by default: each adapter's A keeps
    that fp32 copy of its input (one per adapter, even where two read the same x), or with
    dropout the dropout keeps its mask and A the dropped fp32 copy; B keeps A's n × r output. Where
    the input is already fp32 and there is no dropout, A keeps x itself (once, if nothing else
    does). The dropout keeps its mask only where the input needs a gradient (not in the lowest
    trainable layer). Under autocast the matmuls run in half precision: A keeps a half cast of its
    input and B a half n × r output. Measured on CPU: docs/VALIDATION.md, "Fine-tuning".
    """
    ft = setup.finetuning
    n, r = setup.tokens, ft.rank
    adapter_bytes = setup.half_bytes if setup.autocast else FP32_BYTES
    shared = False
    for module, features in modules:
        if ft.dropout > 0:
            if input_grad:
                saved.mask(f"lora.{module}.dropout_mask", n * features, FP32_BYTES, "sequence")
            saved.add(f"lora.{module}.dropout_output", n * features, adapter_bytes, "sequence")
        elif adapter_bytes != input_bytes or setup.autocast:
            saved.add(f"lora.{module}.input_cast", n * features, adapter_bytes, "sequence")
        elif not (input_kept or shared):
            saved.add(f"{name} (kept by the adapters)", n * features, input_bytes, "sequence")
            shared = True
        saved.add(f"lora.{module}.a_output", n * r, adapter_bytes, "none")
