"""Megatron-LM's layer, embedding and head with its fused kernels (Korthikanti et al. 2022, Table 2), and with
Transformer Engine's FP8 recipes."""

from __future__ import annotations

from typing import Final

from app.core.architecture import Architecture
from app.core.saved.attention import attention_kernel
from app.core.saved.common import FP32_BYTES, INDEX_BYTES, ActivationSetup, SavedTensor, _Saved
from app.core.units import ceil_div


def _megatron_layer(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """One layer as Megatron-LM saves it (Korthikanti et al. 2022, section 4.1, generalised).

    Attention block (11sbh + 5as²b for GPT): the norm's input, the QKV matmul input, Q and K, V,
    the softmax output, its dropout mask and output, the output projection input and the
    residual dropout mask. MLP block (19sbh for GPT): the norm's input, the first matmul's input,
    the activation's input and output (8sbh each at I = 4h) and the residual dropout mask.
    Generalised: K and V take g*d columns (grouped-query attention); a gated MLP keeps the gate
    and up projections (2I) and their product (I); masks exist only when dropout > 0; a fused
    (flash) kernel keeps its fp32 log-sum-exp instead of any s-squared tensor.
    """
    saved = _Saved(setup)
    b, s, h = setup.micro_batch_size, setup.seq_len, arch.hidden_size
    n = setup.tokens
    a, d, g, inter = arch.num_attention_heads, arch.head_size, arch.kv_heads, arch.ffn_size
    w = setup.half_bytes
    saved.add("attn_norm.input", n * h, w, "sequence")
    saved.add("attn.qkv_input", n * h, w, "sequence")
    saved.add("attn.query", n * a * d, w, "tensor")
    saved.add("attn.key", n * g * d, w, "tensor")
    saved.add("attn.value", n * g * d, w, "tensor")
    if attention_kernel(arch, setup) == "eager":
        saved.add("attn.softmax", b * a * s * s, w, "tensor", core=True)
        if arch.attn_dropout > 0:
            saved.mask("attn.softmax_dropout_mask", b * a * s * s, w, "tensor", core=True)
            saved.add("attn.softmax_dropout_output", b * a * s * s, w, "tensor", core=True)
    else:
        saved.add("attn.logsumexp", b * a * s, FP32_BYTES, "tensor", core=True)  # recomputed with the core
    saved.add("attn.out_proj_input", n * a * d, w, "tensor")
    if arch.dropout > 0:
        saved.mask("attn.residual_dropout_mask", n * h, w, "sequence")
    saved.add("mlp_norm.input", n * h, w, "sequence")
    saved.add("mlp.input", n * h, w, "sequence")
    if arch.is_gated:
        saved.add("mlp.gate_up", 2 * n * inter, w, "tensor")
        saved.add("mlp.act_output", n * inter, w, "tensor")
    else:
        saved.add("mlp.act_input", n * inter, w, "tensor")
        saved.add("mlp.act_output", n * inter, w, "tensor")
    if arch.dropout > 0:
        saved.mask("mlp.residual_dropout_mask", n * h, w, "sequence")
    return saved.items


def _megatron_embedding(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """First stage, outside the layers: token ids for the embedding's backward, the embedding dropout mask."""
    saved = _Saved(setup)
    n, h = setup.tokens, arch.hidden_size
    saved.add("embed.token_ids", n, INDEX_BYTES, "none")
    if arch.dropout > 0:
        saved.mask("embed.dropout_mask", n * h, setup.half_bytes, "sequence")
    return saved.items


def _megatron_head(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """Last stage, outside the layers (Korthikanti et al. 2022, section 4.3).

    The final norm's input and the output layer's input (2sbh each at 16 bits), and the
    vocabulary-parallel cross entropy's fp32 softmax (4sbv/t), plus the int64 labels.
    """
    saved = _Saved(setup)
    n, h, v = setup.tokens, arch.hidden_size, arch.vocab_size
    w = setup.half_bytes
    saved.add("final_norm.input", n * h, w, "sequence")
    saved.add("lm_head.input", n * h, w, "sequence")
    saved.add("loss.softmax_fp32", n * v, FP32_BYTES, "tensor")
    saved.add("loss.labels", n, INDEX_BYTES, "none")
    return saved.items


def _megatron_logits_workspace(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """Transient: the half-precision logits before the fp32 cross entropy (its gradient reuses the saved softmax)."""
    saved = _Saved(setup)
    saved.add("logits", setup.tokens * arch.vocab_size, setup.half_bytes, "tensor")
    return saved.items



FP8_BYTES: Final = 1
TE_SCALE_BYTES: Final = 4  # one fp32 scale_inv per per-tensor-scaled FP8 tensor
MXFP8_ROW_PAD: Final = (128, 4)  # row-wise scales padded to [rows, cols ÷ 32] multiples (mxfp8_tensor.py)
MXFP8_COLUMN_PAD: Final = (4, 128)  # column-wise scales padded to [rows ÷ 32, cols] multiples


def te_scale_bytes(rows: int, cols: int, *, block: int, columnwise: bool) -> int:
    """Bytes of the scales of one rows × cols FP8 tensor in Transformer Engine.

    ``block`` 0 (delayed and current scaling): one fp32 scale_inv per tensor, shared by its row-wise data and its
    transpose (transformer_engine/pytorch/tensor/float8_tensor.py, Float8CurrentScalingQuantizer.inner_tensor_specs:
    ``_scale_inv`` of shape (1,), float32). ``block`` 32 (MXFP8): one E8M0 byte per 32 elements along the scaled
    axis, padded (tensor/mxfp8_tensor.py, MXFP8Quantizer.get_scale_shape): row-wise
    ``roundup(rows, 128) × roundup(cols ÷ 32, 4)``, column-wise ``roundup(rows ÷ 32, 4) × roundup(cols, 128)``.
    """
    if not block:
        return TE_SCALE_BYTES
    if columnwise:
        return _round_up(rows // block, MXFP8_COLUMN_PAD[0]) * _round_up(cols, MXFP8_COLUMN_PAD[1])
    return _round_up(rows, MXFP8_ROW_PAD[0]) * _round_up(cols // block, MXFP8_ROW_PAD[1])


def _round_up(value: int, multiple: int) -> int:
    return ceil_div(value, multiple) * multiple


def megatron_fp8_layer(arch: Architecture, setup: ActivationSetup, *, block: int,
                       proj_saves_original: bool) -> tuple[SavedTensor, ...]:
    """One dense layer as Megatron-LM saves it with Transformer Engine's FP8 linear layers (`_megatron_layer`
    otherwise; Megatron-LM's TE layer spec, megatron/core/models/gpt/gpt_layer_specs.py: linear_qkv and linear_fc1
    are TE LayerNormLinear, linear_proj and linear_fc2 TE Linear).

    * The QKV and first MLP projections quantize their norm's output in the norm kernel and save the FP8 copy
      their weight gradient reads instead of a 16-bit one (layernorm_linear.py, _LayerNormLinear.forward:
      with_quantized_norm, then ``ln_out.update_usage(rowwise_usage=False)``; under sequence parallelism the
      local shard, kept row-wise for per-tensor scaling since column-wise FP8 cannot be all-gathered): one byte
      an element. The norm's 16-bit input stays saved (``inputmat``).
    * The down projection saves the FP8 column-wise copy of its input (linear.py, _linear_forward_impl:
      ``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``); the 16-bit activation output is
      then kept by nothing (Megatron-LM's SwiGLU and bias-GeLU save their input, which stays 16-bit).
    * The attention output projection does the same, unless Megatron-LM has it save its original input
      (``proj_saves_original``, every recipe but delayed): then nothing changes. The fused attention keeps its
      16-bit output for its own backward, so under delayed scaling the FP8 copy comes in addition to it; the
      unfused softmax path keeps no output, so there the copy replaces it.
    * Each FP8 tensor carries its scales (`te_scale_bytes`, column-wise as saved).
    """
    layer = _megatron_layer(arch, setup)
    n, h, t = setup.tokens, arch.hidden_size, setup.tensor_parallel
    local = ceil_div(n, t) if setup.sequence_parallel else n
    inputs = {"attn.qkv_input": (local, h), "mlp.input": (local, h),
              "mlp.act_output": (n, ceil_div(arch.ffn_size, t))}
    if not proj_saves_original:
        inputs["attn.out_proj_input"] = (n, ceil_div(arch.num_attention_heads * arch.head_size, t))
    fused = attention_kernel(arch, setup) != "eager"
    items: list[SavedTensor] = []
    for item in layer:
        shape = inputs.get(item.name)
        if shape is None:
            items.append(item)
            continue
        if item.name == "attn.out_proj_input" and fused:
            items.append(item._replace(name="attn.output"))  # the fused attention's own 16-bit output
        elements = item.bytes // setup.half_bytes
        items.append(SavedTensor(f"{item.name}_fp8", elements * FP8_BYTES, item.core_attention, elements))
        scales = te_scale_bytes(*shape, block=block, columnwise=True)
        scale_elements = scales if block else scales // TE_SCALE_BYTES  # E8M0 bytes under MXFP8, else one fp32
        items.append(SavedTensor(f"{item.name}_fp8.scales", scales, elements=scale_elements))
    return tuple(items)
