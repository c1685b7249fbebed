"""Model states (weights, gradients, master copy, optimizer state) and how ZeRO shards them.

Model states follow Rajbhandari et al. 2019 (ZeRO, arXiv:1910.02054, section 3.1 and Figure 1):
each is derived from the precision and the optimizer, never a fixed 16 bytes per parameter. ZeRO
stage 1 shards optimizer state and master weights over the data-parallel group, stage 2 adds
gradients and stage 3 the weights (section 5, P_os, P_os+g, P_os+g+p). Sharding moves bytes
between ranks: the cluster total of a sharded category is the unsharded total, and a replicated
one counts once per replica. The most-loaded rank holds the ceiling of an even share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from app.core.architecture import ParamTensor
from app.core.optimizers import optimizer_state_bytes, optimizer_state_bytes_from_count
from app.core.units import ceil_div, tensor_bytes

if TYPE_CHECKING:
    from app.core.setup import Parallelism, Training

Shapes = list[tuple[tuple[int, ...], int]]  # (shape, repetitions)


def sharded_categories(zero_stage: int) -> frozenset[str]:
    """ZeRO stage 1: optimizer states and master weights; 2: + gradients; 3: + weights (P_os, P_os+g, P_os+g+p)."""
    categories = set()
    if zero_stage >= 1:
        categories |= {"optimizer_states", "master_weights"}
    if zero_stage >= 2:
        categories.add("gradients")
    if zero_stage >= 3:
        categories.add("weights")
    return frozenset(categories)


def is_sharded(category: str, parallelism: Parallelism) -> bool:
    return category in sharded_categories(parallelism.zero_stage)


def on_rank(value: int, category: str, parallelism: Parallelism) -> int:
    """The most-loaded data-parallel rank's share of `value` bytes of `category`."""
    return ceil_div(value, parallelism.data) if is_sharded(category, parallelism) else value


def over_group(value: int, category: str, parallelism: Parallelism) -> int:
    """`value` bytes of one replica of `category`, summed over the data-parallel group."""
    return value if is_sharded(category, parallelism) else value * parallelism.data


def rank_shapes(tensors: Iterable[tuple[ParamTensor, int]], tensor_parallel: int) -> Shapes:
    """Shapes on the most-loaded tensor-parallel rank (rank 0)."""
    return [(tensor.shape_on_rank(tensor_parallel, 0), reps) for tensor, reps in tensors]


def all_rank_shapes(tensors: Iterable[tuple[ParamTensor, int]], tensor_parallel: int) -> Shapes:
    """Shapes over every tensor-parallel rank, each with how many ranks and repetitions hold it."""
    return [(shape, reps * ranks) for tensor, reps in tensors for shape, ranks in tensor.rank_shapes(tensor_parallel)]


def elements(shapes: Shapes) -> int:
    return sum(math.prod(shape) * count for shape, count in shapes)


def largest_elements(shapes: Shapes) -> int:
    return max((math.prod(shape) for shape, _ in shapes), default=0)


def states_bytes(shapes: Shapes, training: Training) -> dict[str, int]:
    """Unsharded model states for parameters of the given shapes."""
    precision = training.precision
    count = elements(shapes)
    optimizer_bytes = sum(
        reps * optimizer_state_bytes(
            training.optimizer, shapes=[shape], state_bits=precision.bits("optimizer_states"),
            adafactor_momentum=training.adafactor_momentum,
        )
        for shape, reps in shapes
    )
    return {
        "weights": tensor_bytes(count, precision.bits("weights")),
        "gradients": tensor_bytes(count, precision.bits("gradients")),
        "master_weights": tensor_bytes(count, precision.bits("master_weights")),
        "optimizer_states": optimizer_bytes,
    }


def count_states_bytes(params: int, training: Training) -> dict[str, int]:
    """Unsharded model states of `params` parameters whose shapes are unknown."""
    precision = training.precision
    return {
        "weights": tensor_bytes(params, precision.bits("weights")),
        "gradients": tensor_bytes(params, precision.bits("gradients")),
        "master_weights": tensor_bytes(params, precision.bits("master_weights")),
        "optimizer_states": optimizer_state_bytes_from_count(
            training.optimizer, param_count=params, state_bits=precision.bits("optimizer_states")
        ),
    }
