"""One parameter tensor of a model: its shape, and how Megatron-style tensor parallelism splits it across ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

TensorSplit = Literal["column", "row", "vocab", "replicated"]


@dataclass(frozen=True)
class ParamTensor:
    """One parameter tensor: its shape, where it lives, and how Megatron-style tensor parallelism splits it.

    ``split`` is ``column`` (output dimension, the first of a ``(out, in)`` weight, split across
    ranks), ``row`` (input dimension split), ``vocab`` (vocabulary rows split) or ``replicated``.
    ``split_dim`` is the index of the dimension that is split. ``matmul`` marks weights that feed a
    matrix multiply (cast to half precision under autocast).
    """

    name: str
    shape: tuple[int, ...]
    split: TensorSplit = "replicated"
    split_dim: int = 0
    matmul: bool = False

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def shape_on_rank(self, tensor_parallel: int, rank: int) -> tuple[int, ...]:
        """This tensor's shape on tensor-parallel `rank`: ranks below the remainder hold one more row."""
        if self.split == "replicated" or tensor_parallel == 1:
            return self.shape
        size = self.shape[self.split_dim]
        shape = list(self.shape)
        shape[self.split_dim] = size // tensor_parallel + (1 if rank < size % tensor_parallel else 0)
        return tuple(shape)

    def rank_shapes(self, tensor_parallel: int) -> tuple[tuple[tuple[int, ...], int], ...]:
        """(shape, number of ranks holding it) over all `tensor_parallel` ranks: t copies of a replicated
        tensor; for a split one, the ranks below the remainder with one more row, then the rest."""
        if self.split == "replicated" or tensor_parallel == 1:
            return ((self.shape, tensor_parallel),)
        remainder = self.shape[self.split_dim] % tensor_parallel
        classes = ((self.shape_on_rank(tensor_parallel, 0), remainder),
                   (self.shape_on_rank(tensor_parallel, tensor_parallel - 1), tensor_parallel - remainder))
        return tuple((shape, count) for shape, count in classes if count)
