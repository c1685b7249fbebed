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

transformers 5.24's `activation_checkpointing_enable(offload=True)` (the Trainer's `activation_checkpointing_kwargs`
`{"offload": true}`; transformers/modeling_utils.py, `_activation_checkpointing_enable`) runs each layer's checkpoint
inside `torch.autograd.graph.save_on_cpu(pin_memory=True)`: every tensor the checkpoint saves, whatever its size, is
copied into a new pinned tensor on the compute stream, so no GPU copy waits in a stash, and copied back for the
layer's recomputation in backward. The checkpoint saves the layer's positional inputs only (transformers binds the
keyword ones with `functools.partial`, modeling_layers.py `GradientCheckpointingLayer`): the b·s·h hidden states.

Megatron-LM's `--cpu-offloading-num-layers N` (N > 0 turns it on; megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py at NVIDIA/Megatron-LM d98e8a6, which refuse it with any recomputation,
with pipeline parallelism, and unless 0 < N < num_layers) runs each layer's forward inside Transformer Engine's
`get_cpu_offload_context` (transformer_block.py). In Transformer Engine 2.10 and later (NVIDIA/TransformerEngine
d0067d0, transformer_engine/pytorch/cpu_offload.py, `DefaultOffloadSynchronizer`, lines 602-647) the first N layers
are offloaded: layer i's saved tensors are copied to new pinned host tensors once layer i + 1 starts, and their GPU
copies are let go only when layer L − N + i starts; in backward layer i is copied back when layer L − 1 − N + i's
backward starts. So at most L − N layers' saved tensors are on the GPU at once, forward and backward (the limit
Transformer Engine's documentation states). A saved tensor of fewer than 262,144 elements (since 2.12, lines
454-475), a parameter, or a non-contiguous one stays on the GPU with its layer's autograd node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.core.saved.common import SavedTensor

# Transformer Engine's smallest offloaded tensor (cpu_offload.py, OffloadableLayerState._check_if_offload, 256 × 1024
# elements, since TE 2.12).
MEGATRON_MIN_OFFLOAD_ELEMENTS: Final = 256 * 1024


@dataclass(frozen=True)
class ActivationOffload:
    """One way of moving saved activations to host memory, with the settings that decide its GPU buffers."""

    id: str
    label: str
    about: str
    min_offload_bytes: int = 0  # smaller saved tensors stay on the GPU
    forward_stash: int = 0  # packs after which a moved tensor's GPU copy is let go (max_fwd_stash_size)
    fix: str = ""  # the fix's summary where the solver offers it
    copies: str = ""  # where the copies run, for the fix's cost
    first_layers: bool = False  # whole layers' saved tensors, of the first `activation_offload_layers` (Megatron)
    min_offload_elements: int = 0  # smaller saved tensors stay on the GPU

    def stays(self, tensor: SavedTensor) -> bool:
        """Whether a saved tensor stays on the GPU for being under `min_offload_elements` (its count known)."""
        return 0 < tensor.elements < self.min_offload_elements


ACTIVATION_OFFLOADS: Final[dict[str, ActivationOffload]] = {
    item.id: item
    for item in (
        ActivationOffload("none", "None", "Saved activations stay in GPU memory."),
        ActivationOffload(
            "torchtune", "torchtune (saved-tensor hooks, pinned memory, streams)",
            "torchtune's enable_activation_offloading: with full recomputation, each layer's input saved for its "
            "recomputation is copied to pinned host memory on a second stream; the GPU keeps the last five until "
            "their copies are done, and in backward the layer being recomputed and the one before it.",
            min_offload_bytes=1024, forward_stash=5,
            fix="Offload activations to the CPU (torchtune's enable_activation_offloading)",
            copies="overlapped with compute on a second stream"),
        ActivationOffload(
            "checkpoints-to-host", "Checkpoints in host memory (transformers' offload, save_on_cpu)",
            "transformers' activation_checkpointing_enable(offload=True): with full recomputation, each layer's "
            "checkpointed input is copied to pinned host memory on the compute stream (torch's save_on_cpu) and "
            "copied back for its recomputation; the GPU keeps only the input of the layer being recomputed.",
            fix="Keep the checkpoints in host memory (activation_checkpointing_kwargs offload: true)",
            copies="on the compute stream, which waits for them"),
        ActivationOffload(
            "megatron", "Megatron-LM (Transformer Engine's CPU offloading)",
            "Megatron-LM's --cpu-offloading-num-layers N, without recomputation: every saved tensor of the first N "
            "layers of at least 262,144 elements, weights aside, goes to pinned host memory, and the GPU holds at "
            "most the saved tensors of layers − N layers at once, forward and backward.",
            first_layers=True, min_offload_elements=MEGATRON_MIN_OFFLOAD_ELEMENTS,
            copies="on a side stream; compute waits where a layer's copy is not done"),
    )
}


def pinned_bytes(size: int) -> int:
    """Host bytes PyTorch's pinned allocator takes for a tensor of `size` bytes: 2^⌈log₂ size⌉
    (CachingHostAllocator.h, `PowerOf2Ceil`; e.g. 40 MiB takes 64 MiB)."""
    return 1 << (size - 1).bit_length() if size > 1 else size
