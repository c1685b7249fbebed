"""Precision: an explicit dtype per tensor class, and the named conventions people actually train with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.core.errors import DomainError
from app.core.units import DTYPE_BITS

TENSOR_CLASSES: Final = ("weights", "gradients", "master_weights", "optimizer_states", "activations")


@dataclass(frozen=True)
class Precision:
    """Dtype names (keys of ``DTYPE_BITS``) per tensor class; ``master_weights`` is None when there is no copy."""

    weights: str
    gradients: str
    master_weights: str | None
    optimizer_states: str
    activations: str

    def __post_init__(self) -> None:
        for name in TENSOR_CLASSES:
            value = getattr(self, name)
            if value is None and name == "master_weights":
                continue
            if value not in DTYPE_BITS:
                raise DomainError(
                    f"training.precision.{name}",
                    f"unknown dtype {value!r}; use one of {', '.join(DTYPE_BITS)}",
                )
        widths = {name: 0 if getattr(self, name) is None else DTYPE_BITS[getattr(self, name)] for name in TENSOR_CLASSES}
        object.__setattr__(self, "_bits", widths)

    def bits(self, tensor_class: str) -> int:
        """Width in bits of one element of `tensor_class` (0 for an absent master copy)."""
        return self._bits[tensor_class]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PrecisionPreset:
    id: str
    name: str
    precision: Precision
    description: str
    numerics: str  # what training in it does to the arithmetic, beside the memory


PRECISION_PRESETS: Final[dict[str, PrecisionPreset]] = {
    preset.id: preset
    for preset in (
        PrecisionPreset(
            "fp32",
            "fp32",
            Precision("fp32", "fp32", None, "fp32", "fp32"),
            "Everything in fp32: plain PyTorch training with no autocast. Adam: 4 + 4 + 8 = 16 bytes per parameter.",
            "every tensor in fp32 (24 significant bits): the reference, and the slowest on tensor cores",
        ),
        PrecisionPreset(
            "autocast-bf16",
            "Autocast bf16 (HF Trainer bf16=True)",
            Precision("fp32", "fp32", None, "fp32", "bf16"),
            "torch.autocast: fp32 weights, gradients and optimizer state; matmuls run on bf16 copies of the weights, "
            "so activations are mostly bf16. This is what Hugging Face Trainer's bf16=True does.",
            "matmuls and most activations in bf16 (8 significant bits); weights, gradients and optimizer state "
            "stay fp32, so the update is applied in fp32",
        ),
        PrecisionPreset(
            "autocast-fp16",
            "Autocast fp16 (HF Trainer fp16=True)",
            Precision("fp32", "fp32", None, "fp32", "fp16"),
            "torch.autocast with fp16 and a loss scaler: as autocast-bf16, with fp16 activations.",
            "matmuls and most activations in fp16 (11 significant bits, largest value 65,504); a loss scaler "
            "keeps small gradients from underflowing",
        ),
        PrecisionPreset(
            "fp16-fp32-master",
            "fp16 + fp32 master (ZeRO, DeepSpeed)",
            Precision("fp16", "fp16", "fp32", "fp32", "fp16"),
            "fp16 weights and gradients, an fp32 master copy and fp32 Adam moments: the 2 + 2 + 4 + 8 = 16 bytes per "
            "parameter of Rajbhandari et al. 2019 (ZeRO, arXiv:1910.02054, section 3.1).",
            "weights and gradients in fp16 with loss scaling; the update is applied to an fp32 master copy",
        ),
        PrecisionPreset(
            "bf16-fp32-master",
            "bf16 + fp32 master (DeepSpeed, FSDP)",
            Precision("bf16", "bf16", "fp32", "fp32", "bf16"),
            "As fp16-fp32-master with bf16 in place of fp16: 2 + 2 + 4 + 8 = 16 bytes per parameter with Adam.",
            "weights and gradients in bf16 (8 significant bits); the update is applied to an fp32 master copy",
        ),
        PrecisionPreset(
            "megatron-bf16",
            "bf16, fp32 grads (Megatron-LM)",
            Precision("bf16", "fp32", "fp32", "fp32", "bf16"),
            "Megatron-LM's default for bf16: bf16 weights, gradients accumulated in fp32 main-grad buffers, an fp32 "
            "master copy and fp32 Adam moments: 2 + 4 + 4 + 8 = 18 bytes per parameter (Megatron-LM, "
            "docs/source/distrib_optimizer.md, 'bf16 param, fp32 grads').",
            "bf16 weights, gradients accumulated in fp32, the update applied to an fp32 master copy",
        ),
        PrecisionPreset(
            "bf16",
            "Pure bf16",
            Precision("bf16", "bf16", None, "bf16", "bf16"),
            "The model cast to bf16 with no master copy (model.to(torch.bfloat16)); the optimizer's state takes the "
            "parameters' dtype. Adam: 2 + 2 + 4 = 8 bytes per parameter, at the cost of lost small updates.",
            "no fp32 copy: each update is rounded to bf16, so an update smaller than about 1/256 of its weight "
            "is lost (stochastic rounding or Kahan summation recovers it)",
        ),
    )
}

DEFAULT_PRECISION_PRESET: Final = "bf16-fp32-master"


def precision_preset(preset_id: str) -> Precision:
    if preset_id not in PRECISION_PRESETS:
        raise DomainError(
            "training.precision",
            f"unknown precision preset {preset_id!r}; known: {', '.join(PRECISION_PRESETS)}",
        )
    return PRECISION_PRESETS[preset_id].precision
