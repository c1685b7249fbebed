"""Assumptions that bite for a request, in words, the ones that matter most for it first.

Each caveat has a weight: inputs that do not do what they seem to, then what may dominate the figures or makes them
a bound, then the model's assumptions, then general notes that hold for every setup of the kind (`is_general`), which
the page folds away. The lists are sorted by weight, each weight's caveats in the order they are made.
"""

from __future__ import annotations

from typing import Final

from app.core.architecture import Architecture
from app.core.categories import Breakdown
from app.core.families import family_of
from app.core.optimizers import OPTIMIZER_INFO
from app.core.setup import UNUSUAL_MICRO_BATCH, UNUSUAL_SEQ_LEN, Parallelism, Training
from app.core.timeline import Peak

INPUTS: Final = 0  # an input that does not do what it seems to, or is out of any realistic range
DOMINANT: Final = 1  # a term that may dominate the figures, or figures that are only a bound
MODEL: Final = 2  # an assumption of the model that moves the figures
GENERAL: Final = 3  # true of every setup of the kind: how to read the figures rather than news about this one

# How each general caveat opens: `is_general` knows them by it.
ADAM_BYTES: Final = "The often-quoted 16 bytes per parameter for Adam"
PEAK_BELOW_SUM: Final = "The peak is at '"
RECOMPUTATION: Final = "Recomputation replays the forward pass in backward"
_GENERAL_OPENINGS: Final = (ADAM_BYTES, PEAK_BELOW_SUM, RECOMPUTATION)


# A PCIe 4.0 x16 link each way: 16 GT/s on 16 lanes with 128b/130b encoding (PCI Express Base Specification 4.0).
PCIE4_X16_BYTES_PER_S: Final = 16 * 10**9 * 16 * 128 // 130 // 8


def paged_warnings(paged_bytes: int, *, free_bytes: int | None) -> list[str]:
    """What a paged optimizer's state does beside the peak (optimizers.BNB_PAGED_MIN_ELEMENTS): it is left out of
    the peak and the verdict, since the driver moves it to host memory rather than fail; where it does not fit in
    what the peak leaves free (`free_bytes`: the capacity less the reserve and what lies outside it), the part that
    does not is paged out in forward and backward and back in for each optimizer step."""
    if not paged_bytes:
        return []
    opening = (f"{paged_bytes:,} B of optimizer state are paged (bitsandbytes, CUDA unified memory): outside the peak "
               "and the verdict, because the driver moves them to host memory when the GPU runs short instead of "
               "failing; torch.cuda.memory_allocated() does not count them either.")
    if free_bytes is None:
        return [opening + " Choose a GPU to see whether they stay on it."]
    if paged_bytes <= free_bytes:
        return [opening + f" They fit in the {free_bytes:,} B the peak leaves free, so they stay on the GPU and "
                          "cost no transfers."]
    spilled = paged_bytes - max(free_bytes, 0)
    seconds = 2 * spilled / PCIE4_X16_BYTES_PER_S
    return [opening + f" Only {max(free_bytes, 0):,} B are free beside the peak: about {spilled:,} B go to host "
                      f"memory in forward and backward and come back for each optimizer step, 2 × {spilled:,} B "
                      f"over PCIe a step (about {seconds:.2f} s at PCIe 4.0 x16's {PCIE4_X16_BYTES_PER_S:,} B/s each "
                      "way)."]


def is_general(caveat: str) -> bool:
    """Whether a caveat holds for every setup of its kind (weight GENERAL), so that it can wait behind the rest."""
    return caveat.startswith(_GENERAL_OPENINGS)


def _ranked(caveats: list[tuple[int, str]]) -> list[str]:
    """The texts, those of least weight first; of equal weight, in the order they were made."""
    return [text for _, text in sorted(caveats, key=lambda caveat: caveat[0])]


def _state_warnings(training: Training, parallelism: Parallelism) -> list[tuple[int, str]]:
    precision = training.precision
    warnings = []
    if training.optimizer in ("adam", "adamw"):
        per_param = (precision.bits("weights") + precision.bits("gradients") + precision.bits("master_weights")
                     + 2 * precision.bits("optimizer_states")) // 8
        warnings.append((GENERAL,
            f"{ADAM_BYTES} assume mixed precision with an fp32 master copy "
            f"(2 + 2 + 4 + 8); this precision gives {per_param} bytes per parameter before sharding."
        ))
    if parallelism.zero_stage and parallelism.data == 1:
        warnings.append((INPUTS, "ZeRO shards over the data-parallel group; with a data-parallel degree of 1 it saves "
                                 "nothing."))
    if parallelism.zero_stage == 0 and parallelism.data > 1:
        warnings.append((MODEL, "Each data-parallel rank holds a full replica of the model states; ZeRO stage 1-3 "
                                "would shard them."))
    if "fp8" in (precision.weights, precision.activations):
        warnings.append((DOMINANT, "fp8 training keeps higher-precision copies and scaling factors that vary by "
                                   "recipe; treat fp8 figures as a lower bound."))
    return warnings


def count_warnings(training: Training, parallelism: Parallelism, *, scratch_known: bool) -> list[str]:
    warnings = [(DOMINANT,
        "Activations and temporary buffers depend on the architecture (layers, hidden size, heads, vocabulary); "
        "with only a parameter count the peak covers model states and the optimizer step alone. Choose a preset, "
        "give the architecture or paste a config.json to include them."
    )]
    if not scratch_known:
        warnings.append((DOMINANT, "The for-loop optimizer's scratch is two copies of the largest tensor, which a bare "
                                   "parameter count does not give; it is left out."))
    if OPTIMIZER_INFO[training.optimizer].paged:
        warnings.append((MODEL, "A paged optimizer keeps the states of tensors of 100,000+ elements in CUDA unified "
                                "memory, which a bare parameter count cannot tell apart: all its state is counted on "
                                "the GPU."))
    return _ranked(warnings + _state_warnings(training, parallelism))


def estimate_warnings(arch: Architecture, training: Training, parallelism: Parallelism, *, kernel: str,
                      peak: Peak, per_gpu: Breakdown, experts_backward_known: bool = False) -> list[str]:
    warnings = _state_warnings(training, parallelism)
    if per_gpu.total_bytes != peak.bytes:
        warnings.append((GENERAL,
            f"{PEAK_BELOW_SUM}{peak.event}' in step {peak.step}; the sum of every buffer is an upper bound that "
            "never happens, because gradients appear as backward frees the activations and the loss's buffers "
            "come and go."
        ))
    unmodelled = _layer_backward_unmodelled(arch, training, experts_backward_known)
    if unmodelled and peak.event.startswith("backward: layer"):
        warnings.append((DOMINANT,
            f"The peak is in a layer's backward ('{peak.event}'), whose working set beyond the saved tensors (the "
            f"gradients the MLP's backward makes) is not modelled with {unmodelled}. Measured, such peaks came out "
            "up to 7.4% (dropout) and 9.6% (a mixture of experts without its backward counted) above the prediction "
            "on small CPU models where one layer is a large share of the memory (docs/VALIDATION.md)."
        ))
    warnings += _expert_warnings(parallelism)
    if training.seq_len > arch.max_position_embeddings:
        warnings.append((INPUTS, f"seq_len ({training.seq_len:,}) exceeds the model's max_position_embeddings "
                                 f"({arch.max_position_embeddings:,})."))
    if training.activation_checkpointing != "none":
        warnings.append((GENERAL, f"{RECOMPUTATION}: it needs deterministic operations "
                                  "(dropout restores its RNG state) and costs about one extra forward of compute."))
    if training.activation_checkpointing == "selective" and training.implementation != "megatron":
        warnings.append((MODEL, "Hugging Face transformers has no selective recomputation of its own; this models "
                                "Megatron-style recomputation of the attention core."))
    warnings += _kernel_warnings(training, kernel)
    warnings += _parallel_warnings(arch, training, parallelism)
    if training.seq_len > UNUSUAL_SEQ_LEN or training.micro_batch_size > UNUSUAL_MICRO_BATCH:
        warnings.append((INPUTS, "This batch shape is far outside what is trained in practice; check the inputs."))
    return _ranked(warnings)


def _expert_warnings(parallelism: Parallelism) -> list[tuple[int, str]]:
    """How expert parallelism's routing is counted."""
    warnings: list[tuple[int, str]] = []
    if parallelism.expert > 1 and parallelism.expert_load == 1.0:
        warnings.append((DOMINANT,
            f"Expert parallelism over {parallelism.expert} GPUs is counted with balanced routing: each GPU receives "
            "its share of the tokens' k copies. Routing is seldom balanced; the GPU whose experts receive the most "
            "tokens holds more activations than shown. Set parallelism.expert_load to your capacity factor (which "
            "bounds it) or to the imbalance you expect."
        ))
    elif parallelism.expert > 1:
        warnings.append((MODEL,
            f"The most-loaded expert-parallel GPU's experts are counted with {parallelism.expert_load:g} × the "
            "token copies of balanced routing (parallelism.expert_load)."
        ))
    return warnings


def _kernel_warnings(training: Training, kernel: str) -> list[tuple[int, str]]:
    """The attention kernels that store the s × s scores."""
    warnings: list[tuple[int, str]] = []
    if kernel == "eager" and training.seq_len >= 8192:
        warnings.append((DOMINANT, "Eager attention stores the s × s score matrix per head; at this length it "
                                   "dominates. A fused (flash) kernel avoids it."))
    if kernel == "math":
        warnings.append((DOMINANT,
            "PyTorch's scaled_dot_product_attention runs its math kernel here (flash needs fp16 or bf16, "
            "the memory-efficient kernel refuses grouped K/V heads), which stores the s × s "
            "probabilities as eager attention does and makes two more s × s fp32 tensors while each "
            "layer runs, forward and backward."))
    if training.attention == "flash" and training.precision.activations == "fp32":
        warnings.append((DOMINANT,
            "Flash attention kernels need fp16 or bf16 activations; in fp32 PyTorch falls back to a "
            "kernel that may store the score matrix (choose sdpa to model the fallback)."))
    return warnings


def _parallel_warnings(arch: Architecture, training: Training, parallelism: Parallelism) -> list[tuple[int, str]]:
    """What tensor, sequence and pipeline parallelism assume."""
    warnings: list[tuple[int, str]] = []
    if parallelism.sequence_parallel and parallelism.tensor == 1:
        warnings.append((INPUTS, "Sequence parallelism splits activations over the tensor-parallel group; with "
                                 "tensor=1 it has no effect."))
    if parallelism.tensor > 1 and training.implementation != "megatron":
        warnings.append((MODEL, "Tensor-parallel activations follow Megatron's split of attention heads and MLP "
                                "columns."))
    if parallelism.pipeline > 1:
        m, p = training.gradient_accumulation_steps, parallelism.pipeline
        if m < p:
            warnings.append((INPUTS, f"With {m} micro-batch{'es' if m > 1 else ''} per step and {p} pipeline stages "
                                     f"the pipeline idles; 1F1B needs at least {p} (gradient_accumulation_steps)."))
        warnings.append((MODEL, f"Pipeline figures assume 1F1B: stage k holds min({m}, {p} - k) micro-batches of "
                                "activations."))
        if arch.tie_word_embeddings:
            warnings.append((MODEL, "Tied embeddings are duplicated on the last pipeline stage for the output layer."))
    return warnings


def _layer_backward_unmodelled(arch: Architecture, training: Training, experts_backward_known: bool) -> str:
    """What keeps a layer's backward working set out of the estimate, in words ("" where it is counted or where its
    absence was measured to matter little). `experts_backward_known`: a mixture of experts whose backward working set
    is counted, as measured (`ledger.moe_backward_modelled`)."""
    if training.implementation not in ("transformers", "litgpt"):
        return ""
    if arch.is_moe and not experts_backward_known:
        return "this mixture of experts"
    if arch.dropout > 0 or arch.attn_dropout > 0:
        return "dropout"
    if not arch.is_gated and not family_of(arch).ungated_backward_measured:
        return "an MLP without a gate"
    if family_of(arch).fp32_layernorm:  # Cohere's: the blocks side by side, the norm's backward in fp32
        return "attention and the MLP side by side after one fp32 LayerNorm"
    return ""


# How far a folded replay's reserve moved from the replay layer by layer, at most, where both were run
# (docs/VALIDATION.md, "A replay of many layers"): real-size models, and configs of thousands of tiny layers.
FOLDED_ERROR: Final = 0.012
FOLDED_ERROR_TINY: Final = 0.09


def folded_warnings(fold: int, layers: int, headroom_share: float | None = None) -> list[str]:
    """The reserve of a stage replayed several layers at a time (`reserve.fold_for`); `headroom_share` is the
    headroom over the reserve, where there is a GPU: within the fold's error the verdict is uncertain."""
    if fold == 1:
        return []
    text = (f"The allocator's replay moved this stage's {layers:,} layers {fold} at a time, each of a layer's tensors "
            f"standing for the same tensor of {fold} layers, to answer within milliseconds: the reserved memory is "
            f"approximate (against a replay layer by layer it moved by at most {FOLDED_ERROR:.1%} on real-size "
            f"models, and by up to {FOLDED_ERROR_TINY:.0%} on configs of thousands of very small layers: "
            "docs/VALIDATION.md); the allocated peak is not.")
    if headroom_share is not None and abs(headroom_share) < FOLDED_ERROR_TINY:
        text += " The headroom lies within that error: the verdict is uncertain."
    return [text]
