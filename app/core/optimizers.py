"""Optimizer state in bytes, from the parameter tensors' real shapes.

Per-tensor step counters are not counted: torch.optim keeps them as 0-d fp32 tensors on the host
unless ``capturable`` or ``fused`` is set (torch/optim/adam.py, ``_init_group``), and
bitsandbytes keeps them as Python integers, so they take no GPU memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from app.core.errors import DomainError
from app.core.units import ceil_div, tensor_bytes

OPTIMIZERS: Final = ("adam", "adamw", "sgd", "sgd-momentum", "adafactor", "adamw-8bit", "lion")

# bitsandbytes 8-bit optimizers (Dettmers et al. 2021, arXiv:2110.02861): tensors with fewer than
# `min_8bit_size` elements keep fp32 states; larger ones keep uint8 states with one fp32 absmax
# per block of 256 elements for each state (bitsandbytes/optim/optimizer.py, Optimizer2State.init_state,
# `blocksize = 256`, default `min_8bit_size=4096`).
BNB_MIN_8BIT_SIZE: Final = 4096
BNB_BLOCK_SIZE: Final = 256
BNB_STATE_BITS: Final = 8
BNB_ABSMAX_BITS: Final = 32
FP32_BITS: Final = 32


@dataclass(frozen=True)
class OptimizerInfo:
    id: str
    name: str
    states: str


OPTIMIZER_INFO: Final[dict[str, OptimizerInfo]] = {
    info.id: info
    for info in (
        OptimizerInfo("adam", "Adam", "two moments (m, v) per parameter (Kingma & Ba 2014)"),
        OptimizerInfo("adamw", "AdamW", "two moments (m, v) per parameter (Loshchilov & Hutter 2017)"),
        OptimizerInfo("sgd", "SGD", "no state"),
        OptimizerInfo("sgd-momentum", "SGD with momentum", "one momentum buffer per parameter"),
        OptimizerInfo(
            "adafactor",
            "Adafactor",
            "factored second moment: row and column statistics per matrix, full for vectors; optional momentum "
            "(Shazeer & Stern 2018, arXiv:1804.04235, section 3)",
        ),
        OptimizerInfo(
            "adamw-8bit",
            "AdamW 8-bit (bitsandbytes)",
            "two uint8 moments with an fp32 scale per 256-element block; tensors under 4,096 elements keep fp32 "
            "moments (Dettmers et al. 2021, arXiv:2110.02861)",
        ),
        OptimizerInfo("lion", "Lion", "one momentum per parameter (Chen et al. 2023, arXiv:2302.06675)"),
    )
}


def check_optimizer(optimizer: str) -> None:
    if optimizer not in OPTIMIZER_INFO:
        raise DomainError("training.optimizer", f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")


def adafactor_state_elements(shape: tuple[int, ...]) -> int:
    """Second-moment elements Adafactor keeps for one tensor: rows + columns for a matrix, all for a vector.

    Shazeer & Stern 2018, section 3: a matrix of shape (n, m) keeps row sums R (n) and column sums
    C (m) in place of the full n x m second moment. For tensors of more than two dimensions the
    leading dimensions are batch dimensions (torch.optim.Adafactor: ``row_var`` of shape[:-1],
    ``col_var`` of shape[:-2] + shape[-1:]).
    """
    if len(shape) < 2:
        return math.prod(shape)
    leading = math.prod(shape[:-2])
    return leading * (shape[-2] + shape[-1])


def bnb_8bit_state_bytes(elements: int) -> int:
    """bitsandbytes 8-bit Adam state for one tensor: 2 x (n x 1 B + ceil(n / 256) x 4 B), or 2 x 4n B if small."""
    if elements < BNB_MIN_8BIT_SIZE:
        return 2 * tensor_bytes(elements, FP32_BITS)
    per_state = tensor_bytes(elements, BNB_STATE_BITS) + tensor_bytes(ceil_div(elements, BNB_BLOCK_SIZE), BNB_ABSMAX_BITS)
    return 2 * per_state


def optimizer_state_bytes(
    optimizer: str,
    *,
    shapes: Iterable[tuple[int, ...]],
    state_bits: int,
    adafactor_momentum: bool = False,
) -> int:
    """Optimizer state for parameters of the given shapes, with moments of `state_bits` each.

    * Adam, AdamW: m and v, 2 x P elements (Kingma & Ba 2014, Algorithm 1).
    * SGD: nothing; SGD with momentum and Lion: one buffer, P elements.
    * Adafactor: sum of `adafactor_state_elements` over tensors, plus P if momentum is on.
    * AdamW 8-bit: sum of `bnb_8bit_state_bytes` (its widths are fixed; `state_bits` is ignored).
    """
    check_optimizer(optimizer)
    shapes = tuple(shapes)
    params = sum(math.prod(shape) for shape in shapes)
    if optimizer in ("adam", "adamw"):
        return 2 * tensor_bytes(params, state_bits)
    if optimizer == "sgd":
        return 0
    if optimizer in ("sgd-momentum", "lion"):
        return tensor_bytes(params, state_bits)
    if optimizer == "adafactor":
        factored = sum(tensor_bytes(adafactor_state_elements(shape), state_bits) for shape in shapes)
        return factored + (tensor_bytes(params, state_bits) if adafactor_momentum else 0)
    return sum(bnb_8bit_state_bytes(math.prod(shape)) for shape in shapes)


def optimizer_state_bytes_from_count(optimizer: str, *, param_count: int, state_bits: int) -> int:
    """Optimizer state when only the parameter count is known (no shapes).

    Adafactor cannot be computed without shapes; 8-bit AdamW assumes every tensor is large enough
    to be quantised, which is true of all but biases and norms.
    """
    check_optimizer(optimizer)
    if optimizer == "adafactor":
        raise DomainError(
            "training.optimizer",
            "Adafactor factors each weight matrix by its rows and columns, so it needs the architecture: "
            "choose a preset, give the architecture fields or paste a config.json",
        )
    if optimizer == "adamw-8bit":
        return 2 * (tensor_bytes(param_count, BNB_STATE_BITS) + tensor_bytes(ceil_div(param_count, BNB_BLOCK_SIZE), BNB_ABSMAX_BITS))
    return optimizer_state_bytes(optimizer, shapes=[(param_count,)], state_bits=state_bits)
