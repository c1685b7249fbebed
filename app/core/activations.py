"""Activation memory, tensor by tensor: what each layer saves for the backward pass.

The accounting follows Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198), section 4: list every tensor an operator keeps for its
gradient, once per storage, and add up their bytes. Two implementations are modelled because the
same architecture saves different tensors depending on the code that runs it:

``megatron``
    Fused kernels as in Megatron-LM: 16-bit softmax, 1-byte dropout masks, fused bias-GeLU and
    bias-dropout-add, fused rotary embeddings. For the GPT architecture (LayerNorm, GeLU MLP of 4h,
    multi-head attention, dropout > 0) with 16-bit activations, one layer saves exactly Table 2's
    ``sbh(34 + 5as/h)`` bytes; with tensor parallelism ``sbh(10 + 24/t + 5as/(ht))``, with sequence
    parallelism ``sbh(34/t + 5as/(ht))``, with selective recompute ``sbh(10 + 24/t)`` or
    ``34sbh/t``, and with full recompute ``2sbh``.

``transformers``
    Hugging Face modules as written (modeling_llama.py, modeling_gpt2.py, ...). Where they differ
    from Megatron, the reason is given next to the tensor: RMSNorm upcasts its input to fp32 and
    keeps it; eager attention keeps an fp32 softmax and its half-precision cast; grouped key and
    value heads are repeated to full width before the eager matmuls; SiLU, GeLU and the gate
    product each keep an intermediate-width tensor; GPT-2's ``gelu_new`` is composed of Python
    operations that keep four intermediate-width tensors; the loss keeps fp32 log-probabilities.

Notation: b micro-batch, s sequence, h hidden, a query heads, g key/value heads, d head size,
I intermediate size, V vocabulary, t tensor-parallel degree, N = b*s tokens.

`device` selects whose kernels decide what is saved: ``cuda`` (the product's target: dropout keeps a
1-byte mask, CUDA autocast runs softmax in fp32) or ``cpu`` (used to validate against CPU
measurements: dropout keeps its mask at the width of the tensor it drops).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Final, Literal, NamedTuple

from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.finetuning import Finetuning, Role, embeddings_train, head_trains, module_names, targeted
from app.core.precision import Precision
from app.core.units import ceil_div

Implementation = Literal["megatron", "transformers", "liger"]
Attention = Literal["eager", "sdpa", "flash"]
Kernel = Literal["eager", "flash", "memory-efficient", "math"]
Checkpointing = Literal["none", "selective", "full"]
Device = Literal["cuda", "cpu"]
Split = Literal["tensor", "sequence", "none", "expert"]  # "expert": a routed expert's width, over expert_tensor GPUs


@dataclass(frozen=True)
class Choice:
    """One value of a choice input: its id (the API's value), a short label and what it means."""

    id: str
    label: str
    about: str


def choices(*records: Choice) -> dict[str, Choice]:
    """A registry: each record by its id."""
    return {choice.id: choice for choice in records}


IMPLEMENTATION_CHOICES: Final = choices(
    Choice("transformers", "Hugging Face transformers", "The Hugging Face modules as written (modeling_llama.py, ...)."),
    Choice("megatron", "Megatron-LM", "Megatron-LM's fused kernels (Korthikanti et al. 2022, Table 2)."),
    Choice("liger", "transformers + Liger Kernel", "The Hugging Face modules with Liger Kernel's patches as its "
           "apply_liger_kernel_to_* functions install them: its RMSNorm, SwiGLU/GeGLU and RoPE (choose the fused "
           "linear cross entropy with training.loss)."),
)
ATTENTION_CHOICES: Final = choices(
    Choice("eager", "Eager (stores scores)", "Two matmuls around an explicit softmax: the s × s scores are stored."),
    Choice("sdpa", "SDPA (PyTorch picks)", "torch's scaled_dot_product_attention: the kernel it picks on the device for "
           "this setup (flash, memory-efficient or math)."),
    Choice("flash", "Flash (fused)", "A fused kernel that keeps its output and an fp32 log-sum-exp instead of the scores."),
)
KERNELS: Final = choices(
    Choice("eager", "eager", "explicit softmax; the s × s probabilities are saved"),
    Choice("flash", "flash", "fused; saves Q, K, V, the output and an fp32 log-sum-exp per query"),
    Choice("memory-efficient", "memory-efficient", "fused; saves Q, K, V, the output and an fp32 log-sum-exp per query "
           "(padded to 32 queries)"),
    Choice("math", "math", "torch's reference sdpa: scaled Q and K, an fp32-or-wider softmax of s × s per head"),
)
CHECKPOINTING_CHOICES: Final = choices(
    Choice("none", "None", "every tensor saved for backward"),
    Choice("selective", "Selective (attention core)", "attention core recomputed"),
    Choice("full", "Full (layer inputs only)", "only each layer's input kept"),
)

IMPLEMENTATIONS: Final = tuple(IMPLEMENTATION_CHOICES)
ATTENTIONS: Final = tuple(ATTENTION_CHOICES)
CHECKPOINTING: Final = tuple(CHECKPOINTING_CHOICES)

# Flash attention in PyTorch handles head sizes up to 256 in fp16/bf16 only
# (aten/src/ATen/native/transformers/sdp_utils_cpp.h and cuda/sdp_utils.cpp: check_head_dim_size_flash,
# check_flash_attention_dtype); the memory-efficient kernel takes fp32 too but not grouped K/V heads
# (check_for_grouped_query_attention / enable_gqa is refused by mem-efficient in torch 2.13).
FLASH_MAX_HEAD_DIM: Final = 256
HALF_DTYPES: Final = ("fp16", "bf16")
# The memory-efficient kernel pads its log-sum-exp to a multiple of 32 queries
# (aten/src/ATen/native/transformers/cuda/attention.cu, _efficient_attention_forward: kAlignLSE = 32).
MEM_EFFICIENT_LSE_ALIGN: Final = 32

FP32_BYTES: Final = 4
INDEX_BYTES: Final = 8  # int64 token ids and labels
MASK_BYTES: Final = 1  # a bool/uint8 dropout mask from a fused dropout kernel
BOOL_BYTES: Final = 1  # a torch.bool tensor

# Models whose RMSNorm multiplies by its weight in fp32 before casting back, so the normalised tensor it keeps is
# fp32: Gemma's multiplies by (1 + weight), a new fp32 vector that the multiply keeps too (modeling_gemma.py,
# GemmaRMSNorm; Gemma3RMSNorm likewise), OLMo 2's and gpt-oss's by the weight itself (modeling_olmo2.py,
# Olmo2RMSNorm; modeling_gpt_oss.py, GptOssRMSNorm).
FP32_NORMALISED_MODELS: Final = ("gemma", "gemma2", "gemma3_text", "olmo2", "gpt_oss")
ONE_PLUS_WEIGHT_MODELS: Final = ("gemma", "gemma2", "gemma3_text")
# Models whose rotary embedding returns cos and sin in fp32, without casting them to the activations' dtype
# (modeling_olmo2.py, Olmo2RotaryEmbedding.forward; apply_rotary_pos_emb casts the rotated Q and K back).
FP32_ROTARY_MODELS: Final = ("olmo2",)
# Mixtures of experts whose experts multiply by the router's fp32 weights as they are (None: a custom architecture,
# modelled as Mixtral); Qwen3-MoE casts them to the activations' dtype first.
FP32_ROUTING_MODELS: Final = (None, "mixtral", "deepseek_v2", "deepseek_v3")
# DeepSeek's mixtures (DeepseekV2Moe, DeepseekV3MoE): a router whose linear runs in fp32, and a shared MLP built even
# with n_shared_experts 0.
DEEPSEEK_MODELS: Final = ("deepseek_v2", "deepseek_v3")
# Models whose sliding-window layers rotate with a base of their own, so that the rotary embedding computes a second
# cos/sin pair (Gemma 3: rope_local_base_freq); gpt-oss's two kinds of layer share one.
LOCAL_ROTARY_MODELS: Final = ("gemma3_text",)
# Models whose rotary cos and sin are d/2 wide (the frequencies once, not concatenated twice): gpt-oss rotates the
# two halves of each head with them (modeling_gpt_oss.py, GptOssRotaryEmbedding.forward and _apply_rotary_emb).
HALF_ROTARY_MODELS: Final = ("gpt_oss",)
# Models whose rotary embedding returns the frequencies as complex numbers, d/2 complex64 (two fp32 each) per position
# in place of cos and sin (modeling_deepseek_v2.py, DeepseekV2RotaryEmbedding.forward: torch.polar).
COMPLEX_ROTARY_MODELS: Final = ("deepseek_v2",)
COMPLEX64_BYTES: Final = 8
# Models transformers runs without an sdpa path (``_supports_sdpa = False``: gpt-oss, whose sinks sdpa cannot take);
# asked for sdpa, the estimate models the eager attention that from_pretrained then picks by default.
NO_SDPA_MODELS: Final = ("gpt_oss",)


@dataclass(frozen=True)
class ActivationSetup:
    """The shape of one micro-batch's forward pass on one rank."""

    micro_batch_size: int
    seq_len: int
    precision: Precision
    attention: Attention | Kernel = "eager"
    implementation: Implementation = "transformers"
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    device: Device = "cuda"
    finetuning: Finetuning = Finetuning()
    loss: str = "standard"  # setup.LOSSES
    expert_tensor_parallel: int = 0  # the GPUs a routed expert's matrices split over; 0: tensor_parallel
    expert_load: float = 1.0  # the most-loaded GPU's routed copies over balanced routing's (setup.Parallelism)

    def routed_on_rank(self, routed: int) -> int:
        """Of a micro-batch's `routed` token copies (n·k), those this GPU sends to the experts. With the experts
        split like the rest of the layer (the expert-tensor degree equal to the tensor-parallel one) every
        tensor-parallel rank routes them all, each computing its slice of the experts' width; with a smaller
        expert-tensor degree the tensor-parallel ranks share the tokens out, each expert slice taking expert_tensor ÷
        tensor of them at a wider slice (Megatron-LM's MoE parallel folding, Liu et al. 2025, arXiv:2504.14960,
        section 3): the experts' intermediate tensors stay n·k·I ÷ tensor per GPU, what is n·k × h wide shrinks."""
        etp = self.expert_tensor_parallel or self.tensor_parallel
        if etp == self.tensor_parallel:
            return routed
        return ceil_div(routed * etp, self.tensor_parallel)

    def received_on_rank(self, routed: int) -> int:
        """The token copies this GPU's experts take: what it sends under balanced routing (`routed_on_rank`),
        times `expert_load` on the most-loaded GPU (a capacity factor bounds it; imbalance raises it)."""
        balanced = self.routed_on_rank(routed)
        if self.expert_load == 1.0:
            return balanced
        return math.ceil(balanced * self.expert_load)

    @cached_property
    def tokens(self) -> int:
        return self.micro_batch_size * self.seq_len

    @cached_property
    def half_bytes(self) -> int:
        """Bytes of one activation element (the precision's activation dtype; at least one byte)."""
        return max(1, self.precision.bits("activations") // 8)

    @cached_property
    def autocast(self) -> bool:
        """Weights wider than activations: matmuls run on casts (torch.autocast), the residual stream stays wide."""
        return self.implementation != "megatron" and self.precision.bits("weights") > self.precision.bits("activations")

    @cached_property
    def stream_bytes(self) -> int:
        """Bytes of one element of the residual stream between layers.

        Under autocast the embedding output is fp32 and each residual add promotes the half-precision
        branch back to fp32, so the stream keeps the weights' width.
        """
        if self.autocast:
            return max(1, self.precision.bits("weights") // 8)
        return self.half_bytes


_Adapters = tuple[tuple[str, int], ...]  # adapted modules, each with its input features (`_hf_adapters`)


class SavedTensor(NamedTuple):
    """A tensor kept for the backward pass: its name, per-rank bytes, and whether it is core attention.

    ``core_attention`` marks the tensors that selective recomputation drops (the s-squared
    softmax, its dropout mask and output; Korthikanti et al. 2022, section 5).
    """

    name: str
    bytes: int
    core_attention: bool = False


def _on_rank(elements: int, element_bytes: int, split: Split, setup: ActivationSetup) -> int:
    """Bytes on the most-loaded rank: split over t for tensor-parallel tensors, and for the rest under SP."""
    if split == "expert":
        return ceil_div(elements, setup.expert_tensor_parallel or setup.tensor_parallel) * element_bytes
    divided = split == "tensor" or (split == "sequence" and setup.sequence_parallel)
    share = ceil_div(elements, setup.tensor_parallel) if divided else elements
    return share * element_bytes


class _Saved:
    """Collects SavedTensor entries for one setup."""

    def __init__(self, setup: ActivationSetup) -> None:
        self.setup = setup
        self.items: list[SavedTensor] = []

    def add(self, name: str, elements: int, element_bytes: int, split: Split, *, core: bool = False) -> None:
        if elements and element_bytes:
            self.items.append(SavedTensor(name, _on_rank(elements, element_bytes, split, self.setup), core))

    def mask(self, name: str, elements: int, dropped_width: int, split: Split, *, core: bool = False) -> None:
        """A dropout mask: one byte on CUDA (native_dropout's bool mask), the dropped tensor's width on CPU."""
        width = MASK_BYTES if self.setup.device == "cuda" else dropped_width
        self.add(name, elements, width, split, core=core)


# --- Megatron ---------------------------------------------------------------------------------


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


# --- Megatron-LM with Transformer Engine's FP8 --------------------------------------------------

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
        items.append(SavedTensor(f"{item.name}_fp8", elements * FP8_BYTES, item.core_attention))
        items.append(SavedTensor(f"{item.name}_fp8.scales", te_scale_bytes(*shape, block=block, columnwise=True)))
    return tuple(items)


# --- Hugging Face transformers ------------------------------------------------------------------


def _hf_norm(saved: _Saved, prefix: str, arch: Architecture, setup: ActivationSetup, *,
             weight_grad: bool = True, input_grad: bool = True) -> None:
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
    if arch.norm == "layernorm":
        stats_bytes = ws if setup.device == "cpu" else FP32_BYTES
        saved.add(f"{prefix}.input", n * h, ws, "sequence")
        saved.add(f"{prefix}.mean", n, stats_bytes, "sequence")
        saved.add(f"{prefix}.rstd", n, stats_bytes, "sequence")
        return
    if input_grad:
        saved.add(f"{prefix}.input_fp32", n * h, FP32_BYTES, "sequence")
        saved.add(f"{prefix}.rstd", n, FP32_BYTES, "sequence")
    fp32_normalised = arch.model_type in FP32_NORMALISED_MODELS
    if weight_grad:
        saved.add(f"{prefix}.normalised", n * h, FP32_BYTES if fp32_normalised else ws, "sequence")
    if input_grad and arch.model_type in ONE_PLUS_WEIGHT_MODELS:
        saved.add(f"{prefix}.one_plus_weight_fp32", h, FP32_BYTES, "none")


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
    logits), so ``sdpa`` is its default, eager (`NO_SDPA_MODELS`).
    """
    choice = setup.attention
    if choice in ("eager", "memory-efficient", "math"):
        return choice  # an already resolved kernel
    if choice == "sdpa" and arch.model_type in NO_SDPA_MODELS:
        return "eager"
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


def _hf_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, out_proj_input: bool = True,
                  grads: tuple[bool, bool, bool] = (True, True, True)) -> None:
    """`grads`: whether Q, K and V need gradients (in the lowest trainable layer, only those with adapters do)."""
    kernel = attention_kernel(arch, setup)
    if kernel == "eager" and arch.attention_sinks:
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
        saved.add("attn.value", n * g * d, wa, "tensor")
        saved.add("attn.output", n * a * d, wa, "tensor")
        queries = s if kernel == "flash" else ceil_div(s, MEM_EFFICIENT_LSE_ALIGN) * MEM_EFFICIENT_LSE_ALIGN
        # Part of the attention core: selective recomputation reruns the kernel and keeps only its inputs.
        saved.add("attn.logsumexp", b * a * queries, FP32_BYTES, "tensor", core=True)
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
    if arch.model_type == "gpt2":
        return FP32_BYTES if setup.autocast else setup.half_bytes
    return FP32_BYTES


def _hf_probs_bytes(arch: Architecture, setup: ActivationSetup) -> int:
    """Width of the probabilities attention dropout sees: the cast that follows softmax.

    GPT-2 casts them to the value's dtype (the activation dtype). The Llama family casts them to
    the query's dtype, and the query is the rotary output ``q * cos + rotate_half(q) * sin``:
    cos and sin are in the residual stream's dtype (fp32 under autocast), which the multiply
    promotes the half-precision query to.
    """
    if arch.model_type == "gpt2" or arch.position_embedding != "rope":
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
    normalised_bytes = FP32_BYTES if arch.model_type in FP32_NORMALISED_MODELS else setup.half_bytes
    one_plus_weight = arch.model_type in ONE_PLUS_WEIGHT_MODELS
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


def _hf_moe(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, weights: bool = True,
            shared_weights: bool | None = None, shared_adapters: tuple[_Adapters, _Adapters] = ((), ())) -> None:
    """A sparse MoE block as transformers 5.24 runs Mixtral's (modeling_mixtral.py: MixtralTopKRouter, then
    MixtralExperts over the tokens sorted by expert), for n tokens, k experts each, E experts of width I.

    The router's linear keeps its input (n × h); softmax its fp32 output (n × E); top-k its int64 indices
    (n × k); the renormalisation of the k weights keeps them and their sum (fp32). Routing keeps the
    int64 order of the n·k routed tokens twice and int32 counts per expert; the experts' gate-and-up
    matmul keeps the gathered tokens (n·k × h) and SiLU its whole (n·k × 2I) output, the product the
    activation's output (n·k × I), the down matmul its input (n·k × I); the weighting keeps the fp32
    routing weights (n·k) and the experts' outputs (n·k × h); the scatter back its int64 index.
    The sum over experts does not depend on how evenly tokens are routed. Qwen3-MoE renormalises
    only with ``norm_topk_prob`` and casts the weights to the activations' dtype. Experts with biases (gpt-oss)
    gather each routed token's biases by its expert, an index that keeps the n·k sorted int64 expert ids;
    gpt-oss's router and clamped SwiGLU keep what `_hf_gpt_oss_router` and `_hf_clamped_swiglu` say.
    With the router's and the experts' weights frozen (`weights` False: adapters elsewhere, a frozen layer that
    gradients pass through) their F.linear calls need no weight gradient and keep no input: neither the router's
    input, nor the gathered tokens, nor the down matmul's input; what the gradients to the tokens need stays.

    Under autocast the block's input is the post-attention norm's fp32 output (the residual stream's width). The
    router is an F.linear, which autocast runs in half precision: it keeps its own half cast of the input (n × h,
    the same bytes as above) and returns half-precision logits, so Qwen3-MoE's cast of the weights to the logits'
    dtype makes them half precision, as in a half-precision model. The routed experts run transformers' default
    ``grouped_mm`` path (integrations/moe.py, grouped_mm_experts_forward): torch._grouped_mm has no autocast kernel
    (neither AutocastCPU nor AutocastCUDA, torch 2.13), and `_grouped_mm` casts the tokens to the weights' dtype,
    fp32; so the experts compute in fp32 on the stacked fp32 parameters, which they keep by reference (no half
    copies of the experts' weights), and every n·k-row tensor of the experts (gathered tokens, gate-and-up output,
    activation, product, outputs) is kept at the stream's width (`ActivationSetup.stream_bytes`).
    Measured on CPU: docs/VALIDATION.md.
    """
    n, h, e, k = setup.tokens, arch.hidden_size, arch.num_local_experts, arch.num_experts_per_tok
    width, wa = arch.expert_size, setup.half_bytes
    we = setup.stream_bytes  # the routed experts' dtype: the activations', or fp32 under autocast (grouped_mm)
    routed = n * k
    gpt_oss = arch.model_type == "gpt_oss"
    if arch.model_type == "deepseek_v3":
        _hf_deepseek_v3_router(saved, arch, setup, weights=weights)
    elif arch.model_type == "deepseek_v2":
        _hf_deepseek_v2_router(saved, arch, setup, weights=weights)
    elif gpt_oss:
        _hf_gpt_oss_router(saved, arch, setup, weights=weights)
    else:
        if weights:
            saved.add("moe.router_input", n * h, wa, "sequence")
        saved.add("moe.router_probs_fp32", n * e, FP32_BYTES, "none")
        saved.add("moe.topk_indices", n * k, INDEX_BYTES, "none")
    if arch.norm_topk_prob and not gpt_oss:  # the division by their sum keeps the k weights and the sum
        saved.add("moe.topk_weights_fp32", n * k, FP32_BYTES, "none")
        saved.add("moe.topk_weight_sum_fp32", n, FP32_BYTES, "none")
    saved.add("moe.routing_order", 2 * routed, INDEX_BYTES, "none")
    # What the experts keep per token copy follows the copies this GPU's experts take (ActivationSetup.received_on_rank),
    # their intermediate tensors at each expert's width over the expert-tensor GPUs.
    received = setup.received_on_rank(routed)
    if arch.mlp_bias and weights:  # the biases' gathers by expert id keep the ids (one storage) for the biases' grads
        saved.add("moe.sorted_expert_ids", received, INDEX_BYTES, "none")
    saved.add("moe.tokens_per_expert", e, 4, "none")
    if weights:
        saved.add("moe.gathered_tokens", received * h, we, "none")
    saved.add("moe.gate_up", received * 2 * width, we, "expert")
    if gpt_oss:
        _hf_clamped_swiglu(saved, received * width, we, down_input=weights)
    else:
        saved.add("moe.act_output", received * width, we, "expert")
        if weights:
            saved.add("moe.product", received * width, we, "expert")
    # Mixtral and DeepSeek-V3 apply their fp32 routing weights as they are; Qwen3-MoE casts them to the router
    # logits' dtype first (the activations', half precision under autocast).
    saved.add("moe.routing_weights", received, FP32_BYTES if arch.model_type in FP32_ROUTING_MODELS else wa, "none")
    saved.add("moe.expert_output", received * h, we, "none")
    saved.add("moe.scatter_index", received, INDEX_BYTES, "none")
    shared = weights if shared_weights is None else shared_weights  # the shared experts', if not the router's
    if arch.n_shared_experts or arch.model_type in DEEPSEEK_MODELS:
        _hf_shared_experts(saved, arch, setup, weights=shared)
    elif arch.shared_expert_gate:
        _hf_gated_shared_expert(saved, arch, setup, weights=shared, adapters=shared_adapters)


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
    if arch.model_type not in DEEPSEEK_MODELS or wb == FP32_BYTES:
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
    if weights and not (arch.model_type in DEEPSEEK_MODELS and wa == FP32_BYTES):
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


def _hf_mlp(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, down_input: bool = True,
            dense: bool = False, wrapped: bool = False, shared_adapters: tuple[_Adapters, _Adapters] = ((), ())) -> None:
    if arch.is_moe and not dense:
        if wrapped:
            _hf_wrapped_experts(saved, arch, setup)
        _hf_moe(saved, arch, setup, weights=down_input or wrapped, shared_weights=down_input,
                shared_adapters=shared_adapters)
        return
    n, inter = setup.tokens, arch.ffn_size
    wa = setup.half_bytes
    if arch.is_gated and setup.implementation == "liger":
        # LigerSiLUMulFunction (GeGLU likewise) computes act(gate) * up in one kernel and keeps only gate and up
        # (liger_kernel/ops/swiglu.py, line 272; geglu.py, line 138); down_proj keeps the product.
        saved.add("mlp.gate", n * inter, wa, "tensor")
        saved.add("mlp.up", n * inter, wa, "tensor")
        if down_input:
            saved.add("mlp.product", n * inter, wa, "tensor")
    elif arch.is_gated:
        # act_fn(gate_proj(x)) * up_proj(x): the activation keeps the gate output, the product keeps
        # the activation's output and the up output, and down_proj keeps the product.
        saved.add("mlp.gate", n * inter, wa, "tensor")
        saved.add("mlp.act_output", n * inter, wa, "tensor")
        saved.add("mlp.up", n * inter, wa, "tensor")
        if down_input:
            saved.add("mlp.product", n * inter, wa, "tensor")
    else:
        if arch.hidden_act == "gelu_new":
            # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))): pow keeps x, tanh its
            # output, and the final product both 0.5*x and (1 + tanh(...)).
            saved.add("mlp.fc_output", n * inter, wa, "tensor")
            saved.add("mlp.gelu_tanh", n * inter, wa, "tensor")
            saved.add("mlp.gelu_half_x", n * inter, wa, "tensor")
            saved.add("mlp.gelu_one_plus_tanh", n * inter, wa, "tensor")
        elif arch.mlp != "relu":
            saved.add("mlp.act_input", n * inter, wa, "tensor")  # ReLU keeps only its output
        if down_input or arch.mlp == "relu":  # the down projection's input; ReLU's backward needs its output
            saved.add("mlp.act_output", n * inter, wa, "tensor")
    if arch.dropout > 0:
        saved.mask("mlp.residual_dropout_mask", n * arch.hidden_size, wa, "sequence")


def _layer_tuning(arch: Architecture, setup: ActivationSetup,
                  role: Role) -> tuple[bool, bool, Mapping[str, str], dict[str, tuple[int, ...]]]:
    """How a layer of this `role` (finetuning.layer_role) trains: whether its weights do, whether its input needs a
    gradient, the family's module names, and the adapted weights (internal name -> shape)."""
    ft = setup.finetuning
    adapted = {tensor.name.removesuffix(".weight"): tensor.shape for tensor in targeted(arch, ft)}
    return ft.method == "full" and role in ("full", "bottom"), role in ("full", "through"), module_names(arch), adapted


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

    The attention, Q and K of n × a × (d_n + d_r) each and V of n × a × d_v:

    * eager: the matmuls keep Q, K, the probabilities (fp32 softmax and its cast, as `_hf_eager_attention`) and
      V; V is a view of kv_b_proj's output (n × a × (d_n + d_v)) that the matmul's fold copies, except at
      micro-batch 1 where the fold stays a view and the whole output is kept;
    * math (CPU sdpa, whose fused kernel wants one head size): the scaled fp32 copies of Q and K, the fp32 V
      (an upcast copy of n × a × d_v; in an fp32 model the view itself, with the same rule as eager), and the
      fp32 softmax that the second matmul keeps too; with dropout its mask and output as well;
    * a fused kernel (CUDA's memory-efficient kernel under sdpa, or flash): Q, K, V as passed (the view keeps
      kv_b_proj's whole output), its output and the fp32 log-sum-exp (not measured: no GPU in the harness).

    o_proj keeps its input, n × a × d_v. Measured on CPU: docs/VALIDATION.md, "Multi-head latent attention".

    With frozen weights (`weights` False) the projections keep no input and the latent norms no normalised tensor;
    a norm keeps its fp32 input and reciprocal RMS where its input needs a gradient, adapters on q_b_proj and
    kv_b_proj (`q_b`, `kv_b`) what `_hf_adapters` says, and each matmul of the attention keeps one operand only
    where the other needs a gradient (`grads`, as `_hf_eager_attention`); the fused kernels keep all they keep
    where any of Q, K and V needs one. Measured on CPU: docs/VALIDATION.md, "Fine-tuning".
    """
    g = grads or _MlaGrads(True, True, True, True, True)
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, d_qk, d_v, d_n = arch.num_attention_heads, arch.head_size, arch.v_head_dim or 0, arch.qk_nope_head_dim or 0
    r_kv, d_r = arch.kv_lora_rank or 0, arch.rope_size
    wa = setup.half_bytes
    if arch.q_lora_rank is not None:
        _mla_latent_path(saved, arch, setup, "q", arch.q_lora_rank, arch.q_lora_rank, grad=g.q_a, weights=weights,
                         adapters=q_b)
    _mla_latent_path(saved, arch, setup, "kv", r_kv, r_kv + (d_r if wa == FP32_BYTES else 0), grad=g.kv_a,
                     weights=weights, adapters=kv_b)
    scores_grad = g.query or g.key
    scores = b * a * s * s
    value_view = n * a * ((d_n + d_v) if b == 1 else d_v)  # V as the matmul keeps it: a copy, or at b = 1 the view
    kernel = attention_kernel(arch, setup)
    if not (scores_grad or g.value):
        pass  # nothing before the attention needs a gradient: it keeps nothing
    elif kernel == "eager":
        if g.key:
            saved.add("attn.query", n * a * d_qk, wa, "tensor")
        if g.query:
            saved.add("attn.key", n * a * d_qk, wa, "tensor")
        if scores_grad:
            saved.add("attn.softmax", scores, FP32_BYTES, "tensor", core=True)
        if arch.attn_dropout > 0:
            if scores_grad:
                saved.mask("attn.softmax_dropout_mask", scores, wa, "tensor", core=True)
            if g.value:
                saved.add("attn.softmax_dropout_output", scores, wa, "tensor", core=True)
        elif wa != FP32_BYTES and g.value:
            saved.add("attn.probs_half", scores, wa, "tensor", core=True)
        if scores_grad:
            saved.add("attn.value", value_view, wa, "tensor")
    elif kernel == "math":
        if g.key:
            saved.add("attn.query_scaled_fp32", n * a * d_qk, FP32_BYTES, "tensor")
        if g.query:
            saved.add("attn.key_scaled_fp32", n * a * d_qk, FP32_BYTES, "tensor")
        if scores_grad:
            saved.add("attn.value_fp32", value_view if wa == FP32_BYTES else n * a * d_v, FP32_BYTES, "tensor")
        if scores_grad or g.value:
            saved.add("attn.softmax", scores, FP32_BYTES, "tensor", core=True)
        if arch.attn_dropout > 0:
            if scores_grad:
                saved.mask("attn.softmax_dropout_mask", scores, FP32_BYTES, "tensor", core=True)
            if g.value:
                saved.add("attn.softmax_dropout_output", scores, FP32_BYTES, "tensor", core=True)
    else:
        saved.add("attn.query", n * a * d_qk, wa, "tensor")
        saved.add("attn.key", n * a * d_qk, wa, "tensor")
        saved.add("attn.value", n * a * (d_n + d_v), wa, "tensor")
        saved.add("attn.output", n * a * d_v, wa, "tensor")
        queries = s if kernel == "flash" else ceil_div(s, MEM_EFFICIENT_LSE_ALIGN) * MEM_EFFICIENT_LSE_ALIGN
        saved.add("attn.logsumexp", b * a * queries, FP32_BYTES, "tensor", core=True)
    if kernel in ("eager", "math") and weights:  # a fused kernel's output is o_proj's input
        saved.add("attn.out_proj_input", n * a * d_v, wa, "tensor")
    if arch.dropout > 0:
        saved.mask("attn.residual_dropout_mask", n * arch.hidden_size, wa, "sequence")


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


def _hf_layer(arch: Architecture, setup: ActivationSetup, role: Role = "full", *,
              dense: bool = False) -> list[SavedTensor]:
    """One decoder layer as Hugging Face's modules save it (see module docstring).

    `role` says how the layer takes part in backward (finetuning.layer_role). With frozen weights
    autograd keeps only what the gradients still needed ask for: a frozen linear layer keeps no
    input (no weight gradient), a frozen norm no normalised tensor; in the lowest trainable layer
    the input needs no gradient, so its first norm keeps nothing for it; a layer with nothing
    trainable at or below it keeps nothing at all. Adapters add what `_hf_adapters` says.
    """
    saved = _Saved(setup)
    if role == "off":
        return saved.items
    weights, input_grad, names, adapted = _layer_tuning(arch, setup, role)

    def adapters_on(*modules: str) -> _Adapters:
        return tuple((names.get(m, m) + ("" if m not in ("attn.o", "mlp.down") or arch.model_type != "gpt2"
                                         else f" ({m.split('.')[0]})"), adapted[m][1]) for m in modules if m in adapted)

    attn_in = adapters_on("attn.q", "attn.k", "attn.v", "attn.qkv")
    attn_out = adapters_on("attn.o")
    mlp_in = adapters_on("mlp.gate", "mlp.up", "mlp.gate_up")
    mlp_out = adapters_on("mlp.down")
    attn_consumers = 1 if arch.fused_qkv else 3
    mlp_consumers = 1 if (arch.fused_gate_up or not arch.is_gated) else 2
    pre_norms = arch.norm_placement == "pre"  # OLMo 2 normalises each block's output instead (`post`)
    if pre_norms:
        _hf_norm(saved, "attn_norm", arch, setup, weight_grad=weights, input_grad=input_grad)
    if weights:
        _hf_linear_input(saved, "attn.qkv_input", attn_consumers, arch, setup)
    _hf_adapters(saved, attn_in, setup.stream_bytes, input_kept=weights, input_grad=input_grad, name="attn.qkv_input",
                 arch=arch, setup=setup)
    attention_records = input_grad or weights or bool(attn_in)

    def grad(*modules: str) -> bool:
        return input_grad or weights or any(m in adapted for m in (*modules, "attn.qkv"))

    if arch.qk_norm and attention_records:
        _hf_qk_norms(saved, arch, setup, weight_grad=weights, input_grads=(grad("attn.q"), grad("attn.k")))
    if attention_records:

        _hf_attention(saved, arch, setup, out_proj_input=weights,
                      grads=(grad("attn.q"), grad("attn.k"), grad("attn.v")))
    if attn_out:
        kernel_keeps_output = attention_records and attention_kernel(arch, setup) not in ("eager", "math")
        _hf_adapters(saved, attn_out, setup.half_bytes, input_kept=weights or kernel_keeps_output,
                     input_grad=attention_records, name="attn.out_proj_input", arch=arch, setup=setup)
    if not pre_norms:
        _hf_norm(saved, "attn_post_norm", arch, setup, weight_grad=weights, input_grad=attention_records)
    mlp_grad = input_grad or weights or bool(attn_in or attn_out)
    if pre_norms:
        _hf_norm(saved, "mlp_norm", arch, setup, weight_grad=weights, input_grad=mlp_grad)
    if weights and (dense or not arch.is_moe):  # a MoE block's router keeps its input (_hf_moe)
        _hf_linear_input(saved, "mlp.input", mlp_consumers, arch, setup)
    _hf_adapters(saved, mlp_in, setup.stream_bytes, input_kept=weights, input_grad=mlp_grad, name="mlp.input",
                 arch=arch, setup=setup)
    wrapped = "moe.experts.gate_up" in adapted and not dense  # the router and experts adapted (experts_wrapped)
    mlp_records = mlp_grad or weights or bool(mlp_in) or wrapped
    if mlp_records:
        _hf_mlp(saved, arch, setup, down_input=weights, dense=dense, wrapped=wrapped,
                shared_adapters=(adapters_on("moe.shared.gate", "moe.shared.up", "moe.shared_gate"),
                                 adapters_on("moe.shared.down")))
    _hf_adapters(saved, mlp_out, setup.half_bytes, input_kept=weights, input_grad=mlp_records, name="mlp.down_input",
                 arch=arch, setup=setup)
    if not pre_norms:
        _hf_norm(saved, "mlp_post_norm", arch, setup, weight_grad=weights, input_grad=mlp_records)
    for index in range(2, arch.norms_per_layer):
        # Extra norms (Gemma 2's post-attention and post-feedforward norms) feed the residual add,
        # which keeps nothing, so only their internals count.
        _hf_norm(saved, f"extra_norm{index}", arch, setup, weight_grad=weights, input_grad=True)
    return saved.items


def _hf_embedding(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """First stage: token ids (embedding backward), position ids or the shared rotary cos/sin, embedding dropout."""
    saved = _Saved(setup)
    n, s, h = setup.tokens, setup.seq_len, arch.hidden_size
    if embeddings_train(setup.finetuning):  # the embedding's weight gradient needs them
        saved.add("embed.token_ids", n, INDEX_BYTES, "none")
    if arch.position_embedding == "learned":
        if embeddings_train(setup.finetuning):  # for the position table's gradient
            saved.add("embed.position_ids", s, INDEX_BYTES, "none")
    else:
        # cos and sin, computed once per forward and kept by every layer's rotary multiply; Gemma 3 computes a
        # pair for each kind of layer (its sliding-window layers rotate with another base), in the stream's dtype;
        # gpt-oss's are half a head wide.
        local = arch.model_type in LOCAL_ROTARY_MODELS and 0 < arch.sliding_window_layers < arch.num_hidden_layers
        pairs = 2 if local else 1
        columns = arch.rope_size // 2 if arch.model_type in HALF_ROTARY_MODELS else arch.rope_size
        width = FP32_BYTES if arch.model_type in FP32_ROTARY_MODELS else setup.stream_bytes
        if arch.model_type in COMPLEX_ROTARY_MODELS:
            # DeepSeek-V2's freqs_cis, 1 x s x d_r/2 complex64, which each layer's complex multiply keeps
            # (apply_rotary_emb: the fp32 view_as_complex of Q's and K's rotary parts times freqs_cis).
            saved.add("rope.freqs_cis_complex64", s * columns // 2, COMPLEX64_BYTES, "none")
        else:
            saved.add("rope.cos_sin", pairs * 2 * s * columns, width, "none")
    if arch.dropout > 0:
        saved.mask("embed.dropout_mask", n * h, setup.stream_bytes, "sequence")
    return saved.items


def _hf_head(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """Last stage: the final norm, the output layer's input, and the loss.

    The loss (transformers' ForCausalLMLoss) upcasts the logits to fp32 and calls cross_entropy,
    whose log_softmax keeps its fp32 output (N x V) and whose nll_loss keeps the int64 labels.
    The labels are shifted by padding them to s + 1 positions and taking ``[..., 1:].contiguous()``:
    a copy of N labels, except at micro-batch 1, where the slice is already contiguous and stays a
    view of the padded storage of s + 1 labels.
    """
    saved = _Saved(setup)
    n, v = setup.tokens, arch.vocab_size
    labels = n + 1 if setup.micro_batch_size == 1 else n
    ft = setup.finetuning
    _hf_norm(saved, "final_norm", arch, setup, weight_grad=ft.method == "full", input_grad=True)
    if arch.output_router_logits:
        _hf_router_aux_loss(saved, arch, setup)
    if setup.loss == "fused-linear":
        # Liger's fused linear cross entropy keeps its input's and its weight's gradients instead (the ledger's
        # loss.grad_input and loss.grad_weight), not the input, the log-probabilities or the labels.
        return saved.items
    if head_trains(arch, ft):
        _hf_linear_input(saved, "lm_head.input", 1, arch, setup)
    if arch.extra("final_logit_softcapping"):
        saved.add("logits.softcap_tanh", n * v, setup.half_bytes, "tensor")
    saved.add("loss.log_softmax_fp32", n * v, FP32_BYTES, "tensor")
    saved.add("loss.labels", labels, INDEX_BYTES, "none")
    return saved.items


def _hf_router_aux_loss(saved: _Saved, arch: Architecture, setup: ActivationSetup) -> None:
    """The load-balancing loss that ``output_router_logits`` adds (load_balancing_loss_func, modeling_mixtral.py,
    transformers 5.24; Qwen2-MoE, Qwen3-MoE and gpt-oss copy it), for n tokens, E experts, k per token and L_s
    sparse layers (the layers with a router).

    For each sparse layer's router logits (n × E, the activations' dtype) the loop keeps softmax's output
    (n × E, same dtype) and the int64 indices of its top-k (n × k; topk is differentiable, so autograd keeps
    them although only the indices are used); the per-expert counts (torch.histc) carry no gradient. The final
    ``tokens_per_expert * router_prob_per_expert`` keeps the fp32 fraction of tokens per expert (E) once. No
    attention mask (the causal-LM batches trainmem models); with one, the loss keeps it as n fp32 once more.
    Switch Transformer's loss (Fedus et al. 2021, equations 4-6), L_s · n · (E · a + 8k) + 4E bytes.
    Measured on CPU (tests/core/test_router_aux_loss.py, docs/VALIDATION.md).

    Under autocast the router logits are half precision (the router's F.linear). CPU autocast leaves softmax alone
    (no AutocastCPU kernel for aten::softmax.int, torch 2.13), so its output stays half precision (measured); CUDA
    autocast runs a softmax given no dtype in fp32 (aten/src/ATen/autocast_mode.h, AT_FORALL_FP32_SET_OPT_DTYPE),
    so there it keeps n × E fp32 per layer (not measured: no GPU in the harness).
    """
    n, e, k, wa = setup.tokens, arch.num_local_experts, arch.num_experts_per_tok, setup.half_bytes
    sparse = arch.num_hidden_layers - arch.dense_layers
    probs_bytes = FP32_BYTES if setup.autocast and setup.device == "cuda" else wa
    saved.add("moe_aux.router_probs", sparse * n * e, probs_bytes, "none")
    saved.add("moe_aux.topk_indices", sparse * n * k, INDEX_BYTES, "none")
    saved.add("moe_aux.tokens_per_expert_fp32", e, FP32_BYTES, "none")


def _hf_logits_workspace(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """Transient around the loss: the logits the model returns, and two fp32 N x V gradients in backward.

    The output keeps the logits in the matmul's dtype while the step runs; the backward of
    nll_loss writes an fp32 gradient of the log-probabilities and log_softmax's backward another.
    """
    saved = _Saved(setup)
    n, v = setup.tokens, arch.vocab_size
    saved.add("logits", n * v, setup.half_bytes, "tensor")
    saved.add("loss.grad_log_probs_fp32", n * v, FP32_BYTES, "tensor")
    saved.add("loss.grad_logits_fp32", n * v, FP32_BYTES, "tensor")
    return saved.items


# --- Public functions ----------------------------------------------------------------------------


def layer_activations(arch: Architecture, setup: ActivationSetup, role: Role = "full", *,
                      dense: bool = False) -> tuple[SavedTensor, ...]:
    """Every tensor one layer keeps for backward, for one micro-batch, without recomputation.

    For a mixture of experts, a sparse layer; ``dense`` asks for one of its first ``first_k_dense_replace``
    layers (``arch.dense_layers`` of them), whose MLP is dense.
    """
    if arch.is_mla:
        _refuse_unmodelled_mla(arch, setup)
        return tuple(_hf_mla_layer(arch, setup, role, dense=dense))
    if setup.implementation == "megatron":
        return tuple(_megatron_layer(arch, setup))
    return tuple(_hf_layer(arch, setup, role, dense=dense))


def _window_masked(arch: Architecture, setup: ActivationSetup) -> bool:
    """Whether transformers hands sdpa the sliding window as a mask: sdpa with sliding-window layers and a
    sequence longer than the window (shorter ones need no mask beyond the causal one sdpa applies itself)."""
    return bool(arch.sliding_window_layers and arch.sliding_window is not None and setup.seq_len > arch.sliding_window
                and setup.implementation != "megatron" and setup.attention == "sdpa")


def sliding_window_layer(arch: Architecture, setup: ActivationSetup, role: Role = "full") -> tuple[SavedTensor, ...]:
    """Every tensor one of the ``sliding_window_layers`` keeps for backward, for one micro-batch.

    A sliding-window layer computes the same tensors as a full-attention one; only the mask differs. Eager
    attention adds the mask to the scores (an add keeps nothing) and a fused kernel given the window needs no
    mask, so they keep the same (`layer_activations`). sdpa is the exception once the sequence is longer than
    the window (Gemma 3 in transformers 5.24; measured on CPU and on a GPU: docs/VALIDATION.md): transformers
    then passes the window as a b x 1 x s x s boolean mask, which sdpa converts to the query's dtype and the
    kernel keeps for its backward (one per layer). A mask rules out sdpa's grouped-query path
    (integrations/sdpa_attention.py, use_gqa_in_sdpa), so K and V are repeated to all a heads first
    (repeat_kv) and the kernel keeps the repeated ones: (a - g) heads more, except with one K/V head, where the
    repeat is a view of it (expand, then a reshape that merges a dimension of one). On CUDA a mask rules out
    the flash kernel, and the repeated K/V leave nothing grouped, so the memory-efficient kernel runs in every
    dtype (its log-sum-exp padded to 32 queries): in fp32, in place of the math path the grouped full-attention
    layers take. On CPU the math path (attention dropout) adds the mask to its scores and repeats K/V anyway.
    """
    if not _window_masked(arch, setup):
        return layer_activations(arch, setup, role)
    kernel = attention_kernel(arch, setup)
    if kernel == "eager" or (setup.device == "cpu" and kernel == "math"):
        return layer_activations(arch, setup, role)
    masked = setup if setup.device == "cpu" else replace(setup, attention="memory-efficient")
    saved = _Saved(masked)
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, g, d = arch.num_attention_heads, arch.kv_heads, arch.head_size
    saved.add("attn.sliding_window_mask", b * s * s, setup.half_bytes, "none", core=True)
    if 1 < g < a:
        saved.add("attn.key_value_repeated", 2 * n * (a - g) * d, setup.half_bytes, "tensor")
    return layer_activations(arch, masked, role) + tuple(saved.items)


def checkpointed_layer_activations(
    arch: Architecture, setup: ActivationSetup, checkpointing: Checkpointing,
    *, full: tuple[SavedTensor, ...] | None = None,
) -> tuple[SavedTensor, ...]:
    """What one layer keeps under a recomputation policy.

    * ``none``: everything (`layer_activations`);
    * ``selective``: everything but core attention, recomputed in backward (Korthikanti et al.
      2022, section 5: sbh(10 + 24/t) with TP, 34sbh/t with SP);
    * ``full``: only the layer's input, 2sbh at 16 bits (/t with SP), the whole layer is recomputed.
    """
    if checkpointing == "none":
        return full if full is not None else layer_activations(arch, setup)
    if checkpointing == "selective":
        full = full if full is not None else layer_activations(arch, setup)
        return tuple(item for item in full if not item.core_attention)
    saved = _Saved(setup)
    saved.add("layer.input", setup.tokens * arch.hidden_size, setup.stream_bytes, "sequence")
    return tuple(saved.items)


FULL_ATTENTION_MASK: Final = "checkpoint.full_attention_mask"


def checkpoint_held_activations(
    arch: Architecture, setup: ActivationSetup, checkpointing: Checkpointing
) -> tuple[SavedTensor, ...]:
    """Model-level tensors that full recomputation keeps alive from forward to backward (``transformers``).

    torch.utils.checkpoint (non-reentrant, as transformers calls it) keeps each layer's keyword
    arguments in the recomputation closure until that layer's backward. They are shared by all
    layers, so they count once: the rotary cos and sin (already counted with the embedding), the
    position ids the rotary models pass to every layer (1 x s int64; GPT-2's are kept by its
    position embedding anyway), and with eager attention the additive causal mask transformers
    materialises for it, b x 1 x s x s in the residual stream's dtype. Without recomputation nothing
    keeps the mask or the position ids after the forward pass.
    """
    if setup.implementation == "megatron" or checkpointing != "full":
        return ()
    saved = _Saved(setup)
    b, s = setup.micro_batch_size, setup.seq_len
    if arch.position_embedding == "rope":
        saved.add("checkpoint.position_ids", s, INDEX_BYTES, "none")
    if attention_kernel(arch, setup) == "eager":
        saved.add("checkpoint.causal_mask", b * s * s, setup.stream_bytes, "none")
        if 0 < arch.sliding_window_layers < arch.num_hidden_layers:
            # one mask per kind of layer, the sliding-window layers' and the full-attention layers' (the ledger
            # keeps the second until the lowest full-attention layer's backward: `_Stage._full_attention_mask`)
            saved.add(FULL_ATTENTION_MASK, b * s * s, setup.stream_bytes, "none")
    if _window_masked(arch, setup):
        # sdpa past the window: the sliding-window layers' boolean mask (b x 1 x s x s), made once per forward
        # and handed to each of them (measured on an H200 with Gemma 3 1B at 32,768 tokens: docs/VALIDATION.md)
        saved.add("checkpoint.sliding_window_mask", b * s * s, BOOL_BYTES, "none")
    return tuple(saved.items)


def recompute_workspace(arch: Architecture, setup: ActivationSetup, checkpointing: Checkpointing,
                        *, full: tuple[SavedTensor, ...] | None = None) -> tuple[SavedTensor, ...]:
    """Transient during backward under recomputation: the tensors one layer rebuilds at a time."""
    if checkpointing == "none":
        return ()
    full = full if full is not None else layer_activations(arch, setup)
    if checkpointing == "selective":
        return tuple(item for item in full if item.core_attention)
    return full


def embedding_activations(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    if setup.implementation == "megatron":
        return tuple(_megatron_embedding(arch, setup))
    return tuple(_hf_embedding(arch, setup))


def head_activations(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    if setup.implementation == "megatron":
        return tuple(_megatron_head(arch, setup))
    return tuple(_hf_head(arch, setup))


def logits_workspace(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    if setup.implementation == "megatron":
        return tuple(_megatron_logits_workspace(arch, setup))
    return tuple(_hf_logits_workspace(arch, setup))


def total_bytes(items: tuple[SavedTensor, ...] | list[SavedTensor]) -> int:
    return sum(item.bytes for item in items)
