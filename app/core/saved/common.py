"""What every activation room shares: the choices (implementations, attention kernels, recomputation), the
sizes of a saved tensor's elements, the families' traits, the setup a layer is computed for, and the list a layer
writes its saved tensors to."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Final, Literal, NamedTuple

from app.core.finetuning import Finetuning
from app.core.precision import Precision
from app.core.units import ceil_div

Implementation = Literal["megatron", "transformers", "liger", "litgpt"]
Attention = Literal["eager", "sdpa", "flash"]
Kernel = Literal["eager", "flash", "memory-efficient", "math"]
Checkpointing = Literal["none", "selective", "op", "full"]
Compile = Literal["none", "inductor"]  # torch.compile of each decoder layer (app/core/saved/compiled.py)
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
    Choice("litgpt", "LitGPT", "LitGPT's GPT model (litgpt/model.py) under LoRA or QLoRA, as the Hugging Face modules "
           "but for two things: its attention joins the rotated Q by torch.cat, so the flash kernel's output is "
           "copied before the output projection, and Lightning's bitsandbytes plugin quantizes every nn.Linear, the "
           "output layer's too. Modelled for Llama-style decoders."),
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
    Choice("op", "Op-level (torchtitan)", "each layer recomputed but the outputs of every other matmul and of the "
           "attention kernel"),
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

# The width of a complex64 element: DeepSeek-V2's rotary frequencies (app.core.families, complex_rotary).
COMPLEX64_BYTES: Final = 8


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
    compile: Compile = "none"

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
    elements: int = 0  # per rank; 0 where not known (a sum of tensors, a rebuilt layer)


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
            size = _on_rank(elements, element_bytes, split, self.setup)
            self.items.append(SavedTensor(name, size, core, size // element_bytes))

    def mask(self, name: str, elements: int, dropped_width: int, split: Split, *, core: bool = False) -> None:
        """A dropout mask: one byte on CUDA (native_dropout's bool mask), the dropped tensor's width on CPU."""
        width = MASK_BYTES if self.setup.device == "cuda" else dropped_width
        self.add(name, elements, width, split, core=core)
