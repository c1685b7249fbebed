"""Pipeline stages, by kind: at most three (first, middle, last), whatever the pipeline degree.

Layers are split evenly; the embedding sits on the first stage, the final norm and output layer on
the last. Under the 1F1B schedule stage k (from 0) holds min(m, p - k) micro-batches of
activations at once, m being the micro-batches per step (Narayanan et al. 2021, arXiv:2104.04473,
section 2.2.1; Korthikanti et al. 2022, section 4.2). Stages of one kind differ only in that
count, so each kind is worked out once, for its most-loaded stage (the lowest index), and the
cluster sums use the closed form of the counts over the kind's stages.

With the interleaved schedule (v virtual stages per device, each a chunk of c = L/(p·v) layers;
Narayanan et al. 2021, section 2.2) the first device holds activations of L·(1 + (p−1)/(p·v)) layers
where plain 1F1B holds L: (p − 1) chunks more (Korthikanti et al. 2022, section 4.2.3; for GPT-3 175B's
published layout, p = 8 and v = 4, +21.9%). Device k is counted with (p − 1 − k) extra chunks, an
interpolation used only in the cluster sums (the first device is the most loaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

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
    extra_chunks: int = 0  # interleaved schedule: chunks of layers held beyond in_flight micro-batches
    extra_chunks_total: int = 0  # the same, summed over the kind's stages
    chunk_layers: int = 0  # layers in one chunk (a virtual stage)
    start: int | None = None  # decoder layers before this stage, where stages are uneven (else index × layers)

    @property
    def first_layer(self) -> int:
        """Number of this stage's first decoder layer, counted from 1 over the whole model."""
        return (self.index * self.layers if self.start is None else self.start) + 1


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


def stage_kinds(arch: Architecture, *, pipeline: int, micro_batches: int, virtual_stages: int = 1,
                stage_layers: tuple[int, int, int] | None = None) -> tuple[StageKind, ...]:
    """The kinds of stage in a pipeline of `pipeline` stages running `micro_batches` per step. `stage_layers`
    gives the layers of the first stage, of each between and of the last where they are uneven (Megatron-LM's
    --decoder-first/last-pipeline-num-layers; setup.Parallelism.stage_layers); then the stages between may hold more
    layers than the first, and each kind is its own."""
    if stage_layers is not None and pipeline > 1:
        return _uneven_kinds(*stage_layers, pipeline, micro_batches)
    return _stage_kinds(arch.num_hidden_layers, pipeline, micro_batches, virtual_stages)


@lru_cache(maxsize=512)
def _uneven_kinds(first: int, between: int, last: int, p: int, m: int) -> tuple[StageKind, ...]:
    """`stage_kinds` for uneven stages under 1F1B: the same micro-batches in flight as even ones (stage k holds
    min(m, p − k)), over each kind's own layers."""
    kinds = [StageKind(0, 1, first, True, False, min(m, p), min(m, p), start=0)]
    if p > 2:
        kinds.append(StageKind(1, p - 2, between, False, False, min(m, p - 1), _sum_min(m, 2, p - 1), start=first))
    kinds.append(StageKind(p - 1, 1, last, False, True, 1, 1, start=first + (p - 2) * between))
    return tuple(kinds)


@lru_cache(maxsize=512)
def _stage_kinds(num_hidden_layers: int, p: int, m: int, v: int) -> tuple[StageKind, ...]:
    """`stage_kinds` from the layer count and the layout alone, worked out once for each (they are frozen)."""
    layers = num_hidden_layers // p
    if p == 1:
        return (StageKind(0, 1, layers, True, True, 1, 1),)
    chunk = layers // v if v > 1 else 0

    def extra(low: int, high: int) -> int:  # Σ (p - 1 - k) for k = low .. high
        return sum(p - 1 - k for k in range(low, high + 1)) if chunk else 0

    kinds = [StageKind(0, 1, layers, True, False, min(m, p), min(m, p), extra(0, 0), extra(0, 0), chunk)]
    if p > 2:
        kinds.append(StageKind(1, p - 2, layers, False, False, min(m, p - 1), _sum_min(m, 2, p - 1),
                               extra(1, 1), extra(1, p - 2), chunk))
    kinds.append(StageKind(p - 1, 1, layers, False, True, 1, 1, 0, 0, chunk))
    return tuple(kinds)

