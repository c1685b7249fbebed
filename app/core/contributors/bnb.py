"""What bitsandbytes' 4-bit layers keep beyond their weights: before 0.43.2, each one's input until the backward
ends (app.core.saved.bnb)."""

from __future__ import annotations

from app.core import activations as act
from app.core.contributors.base import FORWARDED, FWD_LAYER_FIRST, FWD_LOSS, StageBase
from app.core.finetuning import layer_roles
from app.core.saved.bnb import kept_4bit_inputs
from app.core.timeline import Life


class Bitsandbytes(StageBase):
    def _kept_4bit_inputs(self) -> None:
        """QLoRA with bitsandbytes before 0.43.2: each 4-bit linear layer's input, kept on the matmul's ctx from its
        forward until the graph is freed after the whole backward, recomputation or not (app.core.saved.bnb)."""
        if not self.training.finetuning.keeps_4bit_inputs:
            return
        recomputed = self.training.activation_checkpointing == "full"
        roles = layer_roles(self.training.finetuning, self.kind.first_layer - 1, self.kind.layers)
        kept = {role: tuple(kept_4bit_inputs(self.arch, self.setup, role, recomputed=recomputed)) for role in roles}
        per_role = {role: act.total_bytes(tensors) for role, tensors in kept.items()}
        size = sum(count * per_role[role] for role, count in roles.items())
        if not size:
            return
        terms = " + ".join(f"{count} × {per_role[role]:,} B" for role, count in roles.items() if per_role[role])
        names = ", ".join(dict.fromkeys(x.name for tensors in kept.values() for x in tensors))
        formula = f"{terms} ({names})"
        label = "4-bit layers' inputs bitsandbytes before 0.43.2 keeps until the backward ends"
        ids = [phase.id for phase in self.phases]
        after_forward = ids[ids.index(self.fwd_end) + 1]
        self.add("qlora.kept_inputs", "activations", f"{label} (forward)", formula, size,
                 self.per_stage(size), Life("micro-batch", FWD_LAYER_FIRST, self.fwd_end, ramp=FORWARDED))
        self.add("qlora.kept_inputs.held", "activations", label, formula, size, self.per_stage(size),
                 Life("micro-batch", after_forward, self.bwd_end))

    def _kept_head_input(self) -> None:
        """The same for a quantized output layer (Training.quantizes_output_layer): its input, the final norm's
        output, which nothing else keeps while the output layer is frozen, from the loss's forward to the end of the
        backward."""
        training, arch = self.training, self.arch
        if not (training.finetuning.keeps_4bit_inputs and training.quantizes_output_layer and self.kind.last):
            return
        size = self.setup.tokens * arch.hidden_size * self.setup.stream_bytes
        formula = f"{self.setup.tokens:,} tokens × {arch.hidden_size:,} × {self.setup.stream_bytes} B (final norm's output)"
        self.add("qlora.kept_head_input", "activations",
                 "The 4-bit output layer's input bitsandbytes before 0.43.2 keeps until the backward ends", formula,
                 size, self.per_stage(size), Life("micro-batch", FWD_LOSS, self.bwd_end))
