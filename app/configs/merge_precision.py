"""The precision preset a configuration implies, by the engine that trains it: DeepSpeed and FSDP keep an fp32 master
copy, Megatron-LM its own, and weights loaded in half precision with neither keep everything in their dtype."""

from __future__ import annotations

from typing import Any, Final

from app.configs.common import Fact, Reading
from app.configs.fsdp import FSDP_PRECISION_NOTE

# The precision preset for the mixed precision asked for ("no" for none), by the engine that keeps the weights.
MASTER_COPY: Final = {"bf16": "bf16-fp32-master", "fp16": "fp16-fp32-master", "no": "fp32"}  # DeepSpeed, FSDP
MEGATRON: Final = {"bf16": "megatron-bf16", "fp16": "fp16-fp32-master", "no": "fp32"}
FP16_WEIGHTS: Final = {"weights": "fp16", "gradients": "fp16", "master_weights": None, "optimizer_states": "fp16",
                       "activations": "fp16"}  # weights loaded in fp16, with no fp32 copy


def megatron_precision(mode: str, reasons: list[str]) -> str:
    if mode != "no":
        reasons.append(f"{mode} with Megatron-LM: half-precision weights, an fp32 master copy in its "
                       "optimizer" + (", gradients accumulated in fp32" if mode == "bf16" else ""))
    return MEGATRON[mode]


def fsdp_precision(mode: str, reasons: list[str]) -> str:
    if mode != "no":
        reasons.append(f"{mode} under FSDP: {FSDP_PRECISION_NOTE}")
    return MASTER_COPY[mode]


def loaded_precision(load: Fact, reasons: list[str]) -> Any:
    """Weights loaded in half precision with no engine keeping an fp32 copy: everything in their dtype."""
    reasons.append(f"{load.note or 'the weights are loaded in ' + load.value}, and no DeepSpeed or FSDP "
                   "keeps an fp32 copy: gradients and optimizer state take the weights' dtype")
    return "bf16" if load.value == "bf16" else FP16_WEIGHTS


def bf16_master(readings: list[Reading]) -> Any:
    """bf16 with DeepSpeed's master copy, as its "auto" file fills it (its gradients' dtype may say more)."""
    return next((r.autos["ds_precision:bf16"] for r in readings if "ds_precision:bf16" in r.autos),
                MASTER_COPY["bf16"])
