"""Pipeline stages, by kind: at most three (first, middle, last), whatever the pipeline degree.

Layers are split evenly; the embedding sits on the first stage, the final norm and output layer on
the last. Under the 1F1B schedule stage k (from 0) holds min(m, p - k) micro-batches of
activations at once, m being the micro-batches per step (Narayanan et al. 2021, arXiv:2104.04473,
section 2.2.1; Korthikanti et al. 2022, section 4.2). Stages of one kind differ only in that
count, so each kind is worked out once, for its most-loaded stage (the lowest index), and the
cluster sums use the closed form of the counts over the kind's stages.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.architecture import Architecture


@dataclass(frozen=True)
class StageKind:
    index: int  # the most-loaded stage of this kind, counted from 0
    count: int  # how many stages are of this kind
    layers: int  # decoder layers on each of them
    first: bool  # holds the embedding
    last: bool  # holds the final norm, the output layer and the loss
    in_flight: int  # micro-batches of activations the most-loaded stage holds at once
    in_flight_total: int  # the same, summed over the kind's stages

    @property
    def first_layer(self) -> int:
        """Number of this stage's first decoder layer, counted from 1 over the whole model."""
        return self.index * self.layers + 1


def _sum_min(cap: int, low: int, high: int) -> int:
    """Σ min(cap, j) for j from low to high (0 when the range is empty)."""
    if high < low:
        return 0
    total = 0
    top = min(high, cap)
    if top >= low:
        total += (low + top) * (top - low + 1) // 2
    rest = max(low, cap + 1)
    if high >= rest:
        total += cap * (high - rest + 1)
    return total


def stage_kinds(arch: Architecture, *, pipeline: int, micro_batches: int) -> tuple[StageKind, ...]:
    """The kinds of stage in a pipeline of `pipeline` stages running `micro_batches` per step."""
    layers = arch.num_hidden_layers // pipeline
    p, m = pipeline, micro_batches
    if p == 1:
        return (StageKind(0, 1, layers, True, True, 1, 1),)
    kinds = [StageKind(0, 1, layers, True, False, min(m, p), min(m, p))]
    if p > 2:
        kinds.append(StageKind(1, p - 2, layers, False, False, min(m, p - 1), _sum_min(m, 2, p - 1)))
    kinds.append(StageKind(p - 1, 1, layers, False, True, 1, 1))
    return tuple(kinds)

