"""The layers' saved tensors, in GPU memory or moved to host memory by activation offloading
(`app.core.activation_offload`): what moves leaves the GPU but for the copies in flight."""

from __future__ import annotations

from app.core import activations as act
from app.core.activation_offload import ACTIVATION_OFFLOADS, pinned_bytes
from app.core.contributors.base import ACTS, BWD_LAYER_LAST, FWD_LAYER_FIRST, Buffer, StageBase
from app.core.timeline import Life


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
