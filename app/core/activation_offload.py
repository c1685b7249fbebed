"""Activation offloading: each saved tensor copied to pinned host memory in forward and brought back in backward.

torchtune's `OffloadActivations` (pytorch/torchtune at bd2a0fc, torchtune/training/_activation_offloading.py) is a
`saved_tensors_hooks` pair. Its pack hook copies every saved tensor of at least `min_offload_size` bytes (1,024) that
lies on the GPU and is not a parameter into a new pinned host tensor (`torch.empty_like(..., pin_memory=True)`);
with `use_streams=True` (the recipes' choice) the copy runs on a second stream and the GPU tensor is kept in
`fwd_stash` until a later pack finds it at least `max_fwd_stash_size` (5) packs old. The unpack hook copies a tensor
back on the second stream and keeps it in `bwd_tensor_stash` until the next autograd node that unpacks has run. The
recipes refuse offloading without activation checkpointing (recipes/full_finetune_single_device.py, "should only be
True when enable_activation_checkpointing is True") and leave the output layer out (`NoOpManager`); with
non-reentrant checkpointing the tensors the hooks see in a decoder layer are its positional inputs, one a layer
(torch/utils/checkpoint.py, `_CheckpointFrame.save_inputs`; counted on CPU in docs/VALIDATION.md).

PyTorch's pinned host allocator rounds each allocation up to a power of two and keeps freed blocks cached for reuse
(aten/src/ATen/core/CachingHostAllocator.h, `CachingHostAllocatorImpl::allocate`, torch 2.13: `PowerOf2Ceil`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class ActivationOffload:
    """One way of moving saved activations to host memory, with the settings that decide its GPU buffers."""

    id: str
    label: str
    about: str
    min_offload_bytes: int = 0  # smaller saved tensors stay on the GPU
    forward_stash: int = 0  # packs after which a moved tensor's GPU copy is let go (max_fwd_stash_size)


ACTIVATION_OFFLOADS: Final[dict[str, ActivationOffload]] = {
    item.id: item
    for item in (
        ActivationOffload("none", "None", "Saved activations stay in GPU memory."),
        ActivationOffload(
            "torchtune", "torchtune (saved-tensor hooks, pinned memory, streams)",
            "torchtune's enable_activation_offloading: with full recomputation, each layer's input saved for its "
            "recomputation is copied to pinned host memory on a second stream; the GPU keeps the last five until "
            "their copies are done, and in backward the layer being recomputed and the one before it.",
            min_offload_bytes=1024, forward_stash=5),
    )
}


def pinned_bytes(size: int) -> int:
    """Host bytes PyTorch's pinned allocator takes for a tensor of `size` bytes: 2^⌈log₂ size⌉
    (CachingHostAllocator.h, `PowerOf2Ceil`; e.g. 40 MiB takes 64 MiB)."""
    return 1 << (size - 1).bit_length() if size > 1 else size
