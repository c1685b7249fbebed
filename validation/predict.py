"""trainmem's predictions for a setup, through the core's public Python API (standard library only)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core import Architecture, Parallelism, Training, architecture_from_hf_config, estimate, precision_preset
from app.core import activations as act

# The harness's attention implementations and the kernel trainmem models for each.
ATTENTION_MODEL = {"eager": "eager", "sdpa": "flash"}


@dataclass(frozen=True)
class ActivationPrediction:
    layer: tuple[act.SavedTensor, ...]
    embedding: tuple[act.SavedTensor, ...]  # with the model-level tensors recomputation keeps
    head: tuple[act.SavedTensor, ...]
    logits: tuple[act.SavedTensor, ...]
    autocast_weight_copies: int
    layers: int

    @property
    def layer_bytes(self) -> int:
        return act.total_bytes(self.layer)

    @property
    def embedding_bytes(self) -> int:
        return act.total_bytes(self.embedding)

    @property
    def head_bytes(self) -> int:
        return act.total_bytes(self.head)

    @property
    def logits_bytes(self) -> int:
        return act.total_bytes(self.logits)

    @property
    def total(self) -> int:
        return self.embedding_bytes + self.layers * self.layer_bytes + self.head_bytes


def architecture(config: Mapping[str, Any]) -> Architecture:
    return architecture_from_hf_config(config)


def activation_setup(*, micro_batch_size: int, seq_len: int, precision: str, attention: str) -> act.ActivationSetup:
    """The CPU setup: dropout masks at the dropped tensor's width, CPU sdpa kernels (see activations.py)."""
    return act.ActivationSetup(
        micro_batch_size=micro_batch_size,
        seq_len=seq_len,
        precision=precision_preset(precision),
        attention=ATTENTION_MODEL[attention],
        implementation="transformers",
        device="cpu",
    )


def activations(arch: Architecture, setup: act.ActivationSetup, checkpointing: str) -> ActivationPrediction:
    return ActivationPrediction(
        layer=act.checkpointed_layer_activations(arch, setup, checkpointing),
        embedding=act.embedding_activations(arch, setup) + act.checkpoint_held_activations(arch, setup, checkpointing),
        head=act.head_activations(arch, setup),
        logits=act.logits_workspace(arch, setup),
        autocast_weight_copies=autocast_weight_copies(arch, setup, checkpointing),
        layers=arch.num_hidden_layers,
    )


def autocast_weight_copies(arch: Architecture, setup: act.ActivationSetup, checkpointing: str) -> int:
    """Autocast's half-precision weight copies that matmuls keep for backward, plus one recomputed layer's.

    Read off the ledger: the output layer's copy, and either every layer's copies (kept by the
    matmuls) or, under full recomputation, the one layer rebuilt at a time in backward.
    """
    training = Training(micro_batch_size=setup.micro_batch_size, seq_len=setup.seq_len, precision=setup.precision,
                        attention=setup.attention, activation_checkpointing=checkpointing)
    result = estimate(architecture=arch, training=training, device="cpu")
    kept = {"autocast.head", "autocast.recompute" if checkpointing == "full" else "autocast.layers"}
    return sum(buffer.bytes for buffer in result.ledger if buffer.key in kept)


def model_states(arch: Architecture, *, precision: str, optimizer: str) -> dict[str, int]:
    """Per-GPU weights, gradients, master weights and optimizer state on one GPU with no parallelism.

    The model-state buffers of the ledger (keys ``weights``, ``gradients.*``, ...), without the
    short-lived ones that count in the same categories (autocast's half-precision gradient of the
    output layer's weight copy), since what is measured is the state after optimizer.step().
    """
    result = estimate(
        architecture=arch,
        training=Training(micro_batch_size=1, seq_len=8, precision=precision_preset(precision), optimizer=optimizer),
        parallelism=Parallelism(),
    )
    categories = ("weights", "gradients", "master_weights", "optimizer_states")
    return {category: sum(b.bytes for b in result.ledger if b.key.split(".")[0] == category) for category in categories}
