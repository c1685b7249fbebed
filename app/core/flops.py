"""Compute per training step, to say what recomputation costs beside what it saves.

A matmul of T tokens by an m × n weight takes 2·T·m·n floating-point operations. Per micro-batch
of b sequences of s tokens (T = b·s), counted as Korthikanti et al. 2022 (arXiv:2205.05198,
section 6) count them and generalised to grouped K/V heads and gated MLPs:

* forward = 2·T·(L·P_layer + V·h) + L·4·b·s²·a·d, where P_layer is one layer's matmul weights,
  V·h the output layer, and 4·b·s²·a·d the attention core (QKᵀ and the product with V);
* backward = 2 × forward, so a step without recomputation is 3 × forward. For GPT (I = 4h,
  a·d = h) this is the paper's 72·b·s·l·h²·(1 + s/6h + V/12lh);
* full recomputation runs each layer's forward again in backward: + 2·T·L·P_layer + L·4·b·s²·a·d,
  the paper's 96·b·s·l·h²·(1 + s/6h + V/16lh);
* a sequence classifier (BERT, RoBERTa) has no output layer over the vocabulary: its head's dense (h × h) and
  classifier (num_labels × h) read one token per sequence, 2·b·(h² + num_labels·h) in place of 2·T·V·h;
* selective recomputation reruns only the attention core's forward (section 5): + L·4·b·s²·a·d.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.architecture import Architecture, head_tensors, layer_tensors
from app.core.families import family_of
from app.core.saved.op_policy import op_recomputed_params


@dataclass(frozen=True)
class StepFlops:
    """Floating-point operations of one micro-batch on the whole model (before any parallel split)."""

    layer_matmuls: int  # the layers' matmuls, forward
    attention_core: int  # QKᵀ and the product with V, forward, all layers
    output_layer: int  # the logits' matmul, forward
    op_recomputed_matmuls: int = 0  # the layers' matmuls whose outputs torchtitan's op policy does not save, forward

    @property
    def forward(self) -> int:
        return self.layer_matmuls + self.attention_core + self.output_layer

    @property
    def step(self) -> int:
        """Forward and backward (twice the forward) without recomputation."""
        return 3 * self.forward

    def recomputed(self, checkpointing: str) -> int:
        """The forward work recomputation adds: all layers' forward (full), the attention core's (selective)."""
        if checkpointing == "full":
            return self.layer_matmuls + self.attention_core
        if checkpointing == "selective":
            return self.attention_core
        if checkpointing == "op":  # the attention kernel's outputs and every other matmul's are saved
            return self.op_recomputed_matmuls
        return 0

    def recompute_fraction(self, checkpointing: str, share: float = 1.0) -> float:
        """Extra compute of recomputation as a fraction of the step without it (0.33 for full at short s); `share`:
        the share of the layers full recomputation applies to (`recompute.recomputed_share`)."""
        return self.recomputed(checkpointing) * (share if checkpointing == "full" else 1.0) / self.step


def step_flops(arch: Architecture, *, micro_batch_size: int, seq_len: int) -> StepFlops:
    """FLOPs of one micro-batch (module docstring: Korthikanti et al. 2022, section 6, generalised)."""
    tokens = micro_batch_size * seq_len
    layer_params = sum(tensor.elements for tensor in layer_tensors(arch) if tensor.matmul)
    layers = arch.num_hidden_layers
    core = 4 * micro_batch_size * seq_len * seq_len * arch.num_attention_heads * arch.head_size
    return StepFlops(
        layer_matmuls=2 * tokens * layers * layer_params,
        attention_core=layers * core,
        output_layer=_output_layer(arch, micro_batch_size=micro_batch_size, tokens=tokens),
        op_recomputed_matmuls=2 * tokens * layers * op_recomputed_params(arch),
    )


def _output_layer(arch: Architecture, *, micro_batch_size: int, tokens: int) -> int:
    """The forward FLOPs of the output layer (module docstring): 2·T·V·h, or a classifier's head over b tokens."""
    if family_of(arch).classifier:
        return 2 * micro_batch_size * sum(tensor.elements for tensor in head_tensors(arch) if tensor.matmul)
    return 2 * tokens * arch.vocab_size * arch.hidden_size
