"""The layers' saved tensors, in GPU memory or moved to host memory by activation offloading
(`app.core.activation_offload`): what moves leaves the GPU but for the copies in flight."""

from __future__ import annotations

from app.core import activations as act
from app.core.activation_offload import ACTIVATION_OFFLOADS, ActivationOffload, pinned_bytes
from app.core.contributors.base import (
    ACTS,
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    FWD_LAYER_FIRST,
    FWD_LAYER_LAST,
    Buffer,
    StageBase,
)
from app.core.timeline import Life
from app.core.units import ceil_div


class ActivationOffloading(StageBase):
    def _layers_saved(self, label: str, text: str, size: int) -> None:
        """The `activations.layers` line: on the GPU, or (offloaded) in host memory with the GPU's copies in
        flight beside it."""
        life = Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end, ramp=ACTS)
        offload = ACTIVATION_OFFLOADS[self.training.activation_offload]
        each = act.total_bytes(act.checkpointed_layer_activations(self.arch, self.setup, "full"))
        if offload.id == "none" or each < offload.min_offload_bytes:
            self.add("activations.layers", "activations", label, text, size, size * self.ranks * self.kind.count, life)
            return
        if offload.first_layers:
            self._first_layers_offloaded(label, size, offload)
            return
        inputs = size // each  # full recomputation (rules): each layer keeps its input, or nothing
        self.add("activations.layers", "activations", label + ", in host memory", f"{text}, moved", 0, 0, life)
        host = inputs * pinned_bytes(each)
        self.host.append(Buffer(
            "activations.offloaded", "activations", f"{inputs} layers' inputs saved for recomputation (in host memory)",
            f"{inputs} × {pinned_bytes(each):,} B (each {each:,} B rounded up to a power of two "
            "by the pinned allocator)", host, host * self.ranks * self.kind.count, life, self.names))
        stash = min(offload.forward_stash, inputs)
        if stash:  # torchtune's streams; save_on_cpu copies on the compute stream and keeps no GPU copy
            self.add("activations.offload_stash", "activations",
                     f"The last {stash} layers' inputs, kept on the GPU until their copies to the host are done",
                     f"{stash} × {each:,} B (max_fwd_stash_size {offload.forward_stash}, one saved input per layer)",
                     stash * each, stash * each * self.ranks * self.kind.count,
                     Life("micro-batch", FWD_LAYER_FIRST, self.fwd_end))
        # In backward a layer's input is copied back for its recomputation (torchtune keeps it until the next layer's
        # first node has run); the lowest layer's rebuild counts its own input (`recompute.lowest`), so one here.
        self.add("activations.offload_fetched", "activations",
                 "The input of the layer being recomputed, copied back from the host",
                 f"1 × {each:,} B", each, each * self.ranks * self.kind.count,
                 Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _first_layers_offloaded(self, label: str, size: int, offload: ActivationOffload) -> None:
        """Megatron-LM's offloading (`app.core.activation_offload`): of L layers, the first N move their saved tensors
        of at least `min_offload_elements` elements to pinned host memory, and at most L − N layers' saved tensors
        are on the GPU at once. At the timeline's events that is one layer at the lowest layer's forward and backward,
        and L − N from the top layer's forward to its backward, beside the offloaded layers' small tensors."""
        n, moved = self.kind.layers, self.training.activation_offload_layers
        kept = n - moved
        each = size // n  # every layer alike: the megatron implementation models dense decoders
        small = [x for x in self.layer_saved if offload.stays(x)]
        small_bytes = act.total_bytes(small)
        scale = self.ranks * self.kind.count
        # The layers' saved tensors as a ramp of L − N layers' bytes over the L layers (exact where all have run);
        # at the lowest layer's events, where a ramp holds (L − N) ÷ L of a layer, the rest of that layer beside it.
        self.add("activations.layers", "activations", f"{label}, at most {kept} layers' on the GPU at once",
                 f"{kept} layers × {each:,} B", kept * each, kept * each * scale,
                 Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end, ramp=ACTS))
        lowest = ceil_div(moved * each, n)  # each − ⌊kept × each ÷ n⌋
        self.add("activations.layers.lowest", "activations",
                 "The lowest layer's saved tensors beyond the ramp's share, at its forward and its backward",
                 f"⌈{moved} × {each:,} B ÷ {n} layers⌉", lowest, lowest * scale,
                 Life("micro-batch", FWD_LAYER_FIRST, only=(FWD_LAYER_FIRST, BWD_LAYER_FIRST)))
        if small_bytes:
            names = ", ".join(x.name for x in small)
            self.add("activations.offload_small", "activations",
                     f"The {moved} offloaded layers' tensors under {offload.min_offload_elements:,} elements, "
                     "which stay on the GPU", f"{moved} layers × {small_bytes:,} B ({names})",
                     moved * small_bytes, moved * small_bytes * scale,
                     Life("micro-batch", FWD_LAYER_LAST, BWD_LAYER_LAST))
        pinned = sum(pinned_bytes(x.bytes) for x in self.layer_saved if x not in small)
        host = moved * pinned
        self.host.append(Buffer(
            "activations.offloaded", "activations", f"{moved} layers' saved tensors (in host memory)",
            f"{moved} layers × {pinned:,} B (each tensor rounded up to a power of two by the pinned allocator)",
            host, host * scale, Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end), self.names))
