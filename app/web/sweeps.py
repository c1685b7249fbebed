"""The page's two sweeps of the job as given: the peak per GPU against the sequence length, stacked by
category, and against the number of data-parallel GPUs, one line per ZeRO stage.

Each line is one call of the core's `series`. In the sequence length it is exact and quick where the
memory is a polynomial in it (app/core/series.py), and one estimate per value otherwise, so fewer
lengths are drawn then. The data-parallel sweep needs an estimate per value and stage; a pipeline
stage costs about twice as much to estimate, so with pipeline parallelism every second power of two
is drawn. Only for a model with an architecture: a bare parameter count has no activations to sweep.

A sweep does not depend on the value it sweeps, nor (but for the fit) on the GPU, so each is kept for
the most recent jobs keyed by the job with those fields set aside: typing a sequence length redraws
the sequence chart from the kept sweep and the current estimate, and changing the data-parallel
degree, the ZeRO stage or the GPU redraws the second chart without a single estimate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from app import core
from app.core.job import Job, with_field
from app.core.series import SeriesPoint, polynomial, series
from app.core.setup import MAX_DEGREE, MAX_SEQ_LEN
from app.web.memo import kept
from app.web.sweep_chart import SweepChart, TableRow, Text, lines_chart, stacked_chart

SEQ_PATH: Final = "training.seq_len"
DATA_PATH: Final = "parallelism.data"
SEQ_LOW: Final = 256  # the shortest length drawn, unless the form's is shorter
SEQ_HIGH: Final = 1 << 18  # the longest drawn by default: twice the model's positions, at most this
SEQ_OCTAVES_MIN: Final = 4  # at least 256 to 4,096
MAX_POINTS: Final = 40  # lengths drawn where the sweep is exact
MAX_ESTIMATED_POINTS: Final = 16  # where each length costs an estimate
CLIP_FACTOR: Final = 3  # the y axis stops at this many times the larger of the capacity and the current peak
DATA_HIGH: Final = 1024
ZERO_STAGES: Final = (0, 1, 2, 3)
CACHED_JOBS: Final = 64


@dataclass(frozen=True)
class Sweeps:
    sequence: SweepChart | None  # None when the setup cannot be swept (a note says why)
    sequence_note: str | None
    data: SweepChart | None
    data_note: str | None


def powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(low.bit_length() - 1, high.bit_length()) if low <= 1 << k <= high)


def sequence_values(current: int, max_positions: int, *, exact: bool) -> tuple[int, ...]:
    """Geometric lengths from 256 (or the current length's power of two below) to twice the model's positions
    (at least 16 × the start, at most 262,144, and past the current length).

    Four lengths an octave where the sweep is exact and there is room, two or one otherwise.
    """
    low = min(SEQ_LOW, 1 << (current.bit_length() - 1))
    high = max(min(2 * max_positions, SEQ_HIGH), low << SEQ_OCTAVES_MIN, 1 << (current - 1).bit_length())
    high = min(high, MAX_SEQ_LEN)
    octaves = round(math.log2(high / low))
    budget = MAX_POINTS if exact else MAX_ESTIMATED_POINTS
    per_octave = next((n for n in (4, 2) if octaves * n + 1 <= budget), 1)
    return tuple(sorted({round(low * 2 ** (k / per_octave)) for k in range(octaves * per_octave + 1)}))


def data_values(current: int, *, every: int = 1) -> tuple[int, ...]:
    """1, 2, 4, ... 1,024 GPUs (further, to cover the current degree), every `every`-th power of two."""
    high = min(max(DATA_HIGH, 1 << (current - 1).bit_length()), MAX_DEGREE)
    powers = powers_of_two(1, high)
    return powers[::every] if powers[-1] in powers[::every] else powers[::every] + (powers[-1],)


def short_tokens(value: int) -> str:
    """An axis label for a length: 4k for 4,096, 512 for 512."""
    return f"{value // 1024}k" if value >= 1024 and value % 1024 == 0 else f"{value:,}"


def sweeps(job: Job, given: core.Estimate, *, size: Callable[[int], str], unit: str, unit_bytes: int) -> Sweeps | None:
    """Both charts for `job` (whose estimate is `given`); None for a bare parameter count."""
    arch = job.architecture
    if arch is None:
        return None
    capacity = job.gpu.capacity_bytes if job.gpu else None
    sequence = data = sequence_note = data_note = None
    try:  # a length or degree the rest of the setup does not allow is a note, not an error
        sequence = _sequence_chart(job, given, size=size, unit=unit, unit_bytes=unit_bytes, capacity=capacity)
    except core.DomainError as error:
        sequence_note = f"No chart of sequence lengths for this setup: {error.message}."
    try:
        data = _data_chart(job, given, size=size, unit=unit, unit_bytes=unit_bytes, capacity=capacity)
    except core.DomainError as error:
        data_note = f"No chart of data-parallel GPUs for this setup: {error.message}."
    return Sweeps(sequence, sequence_note, data, data_note)


def _sequence_chart(job: Job, given: core.Estimate, *, size: Callable[[int], str], unit: str, unit_bytes: int,
                    capacity: int | None) -> SweepChart:
    arch, current = job.architecture, job.training.seq_len
    assert arch is not None
    grid = sequence_values(current, arch.max_position_embeddings, exact=polynomial(job, SEQ_PATH))
    swept = dict(zip(grid, kept(_sequence_points, _sequence_key(job, grid[0]), grid), strict=True))
    swept.setdefault(current, SeriesPoint(current, given.peak, given.per_gpu, None))
    values = tuple(sorted(swept))
    points = tuple(swept[value] for value in values)
    now_peak = given.peak.bytes
    return stacked_chart(
        chart_id="seq-chart",
        values=values,
        breakdowns=[point.peak.breakdown for point in points],
        current=current,
        now_label=f"now: {current:,}",
        unit=unit,
        unit_bytes=unit_bytes,
        size=size,
        x_label=short_tokens,
        text=_sequence_text(values, points, current=current, max_positions=arch.max_position_embeddings,
                            micro_batch=job.training.micro_batch_size, size=size, gpu=job.gpu),
        capacity_bytes=capacity,
        clip_at=CLIP_FACTOR * max(capacity or 0, now_peak),
        shade_from=arch.max_position_embeddings,
    )


def _sequence_key(job: Job, seq_len: int) -> Job:
    """The job its sequence sweep is kept under: any sequence length, no GPU."""
    return dataclasses.replace(job, gpu=None, training=dataclasses.replace(job.training, seq_len=seq_len))


def _data_key(job: Job) -> Job:
    """The job its data-parallel sweep is kept under: any degree and ZeRO stage, no GPU."""
    return dataclasses.replace(job, gpu=None, parallelism=dataclasses.replace(job.parallelism, data=1, zero_stage=0))


@lru_cache(maxsize=CACHED_JOBS)
def _sequence_points(job: Job, values: tuple[int, ...]) -> tuple[SeriesPoint, ...]:
    return series(job, SEQ_PATH, values)


@lru_cache(maxsize=CACHED_JOBS)
def _data_peaks(job: Job, values: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The peak per GPU at each value, one tuple per ZeRO stage."""
    return tuple(tuple(point.peak.bytes for point in series(with_field(job, "parallelism.zero_stage", stage), DATA_PATH,
                                                            values, verdicts=False))
                 for stage in ZERO_STAGES)


def _activations(point: SeriesPoint) -> int:
    return point.peak.breakdown["activations"] or 0


def _sequence_text(values: Sequence[int], points: Sequence[SeriesPoint], *, current: int, max_positions: int,
                   micro_batch: int, size: Callable[[int], str], gpu: core.Gpu | None) -> Text:
    first, last = points[0], points[-1]
    now = points[values.index(current)]
    desc = (f"The peak per GPU, stacked by category, at {len(values)} sequence lengths from {values[0]:,} to "
            f"{values[-1]:,} tokens (log scale), micro-batch {micro_batch:,} and the rest as set: "
            f"{size(first.peak.bytes)} at {values[0]:,} tokens, {size(now.peak.bytes)} at {current:,} (now) and "
            f"{size(last.peak.bytes)} at {values[-1]:,}.")
    desc += _doubling(values, points)
    if gpu is not None:
        desc += _lengths_fitting(values, points, gpu)
    if values[0] < max_positions < values[-1]:
        desc += f" Beyond {max_positions:,} tokens (shaded) is longer than the model's max_position_embeddings."
    head = ("Tokens", "Peak per GPU", "Activations at the peak") + (("Fits",) if gpu is not None else ())
    rows = tuple(
        TableRow((f"{value:,}" + (" (now)" if value == current else ""), size(point.peak.bytes),
                  size(_activations(point))) + (_fits(point, gpu) if gpu is not None else ()),
                 value == current)
        for value, point in zip(values, points, strict=True)
    )
    return Text("Peak memory per GPU against sequence length", desc, head, rows)


def _doubling(values: Sequence[int], points: Sequence[SeriesPoint]) -> str:
    """What doubling the sequence to the longest one does to the activations, when half of it is swept."""
    half = values[-1] // 2
    if half in values and _activations(points[values.index(half)]):
        ratio = _activations(points[-1]) / _activations(points[values.index(half)])
        return (f" Doubling the length from {half:,} to {values[-1]:,} tokens multiplies the activations at the "
                f"peak by {ratio:.2f}.")
    return ""


def _lengths_fitting(values: Sequence[int], points: Sequence[SeriesPoint], gpu: core.Gpu) -> str:
    fitting = [value for value, point in zip(values, points, strict=True) if point.fits]
    if not fitting:
        return f" None of these lengths fits the {gpu.name}."
    if fitting[-1] == values[-1]:
        return f" Every one of these lengths fits the {gpu.name}."
    return f" Up to {fitting[-1]:,} tokens, of these lengths, fits the {gpu.name}."


def _fits(point: SeriesPoint, gpu: core.Gpu) -> tuple[str]:
    """The point's verdict on the GPU: the allocator's reserve and the context counted, as the estimate's."""
    return ("yes" if point.fits else "no",)


def _data_chart(job: Job, given: core.Estimate, *, size: Callable[[int], str], unit: str, unit_bytes: int,
                capacity: int | None) -> SweepChart:
    p = job.parallelism
    values = data_values(p.data, every=2 if p.pipeline > 1 else 1)
    step = core.data_step(p)  # only the degrees the layout allows (expert parallelism)
    values = tuple(value for value in values if value % step == 0)
    peaks = dict(zip(ZERO_STAGES, kept(_data_peaks, _data_key(job), values), strict=True))
    return lines_chart(
        chart_id="data-chart",
        values=values,
        lines=[(f"zero-{stage}", f"ZeRO-{stage}", peaks[stage]) for stage in ZERO_STAGES],
        current=p.data,
        current_bytes=given.peak.bytes,
        now_label=f"now: {p.data:,}",
        unit=unit,
        unit_bytes=unit_bytes,
        size=size,
        x_label=lambda value: f"{value:,}",
        text=_data_text(values, peaks, job=job, now_bytes=given.peak.bytes, size=size, capacity=capacity),
        capacity_bytes=capacity,
    )


def _data_text(values: Sequence[int], peaks: dict[int, tuple[int, ...]], *, job: Job, now_bytes: int,
               size: Callable[[int], str], capacity: int | None) -> Text:
    p = job.parallelism
    most = values[-1]
    at_most = ", ".join(f"ZeRO-{stage} {size(peaks[stage][-1])}" for stage in ZERO_STAGES)
    desc = (f"The peak per GPU with 1 to {most:,} data-parallel GPUs (log scale), one line per ZeRO stage, the rest "
            f"as set. With {most:,} GPUs: {at_most}. Now ({p.data:,} GPU{'s' if p.data > 1 else ''}, ZeRO-"
            f"{p.zero_stage}): {size(now_bytes)}.")
    if capacity is not None and job.gpu is not None:
        where = [_fewest_words(stage, values, peaks[stage], capacity) for stage in ZERO_STAGES]
        desc += f" On the {job.gpu.name} ({size(capacity)}), of these counts it fits with " + "; ".join(where) + "."
    head = ("GPUs",) + tuple(f"ZeRO-{stage}" for stage in ZERO_STAGES)
    rows = tuple(TableRow((f"{value:,}",) + tuple(size(peaks[stage][index]) for stage in ZERO_STAGES), value == p.data)
                 for index, value in enumerate(values))
    return Text("Peak memory per GPU against data-parallel GPUs, per ZeRO stage", desc, head, rows)


def _fewest_words(stage: int, values: Sequence[int], peaks: Sequence[int], capacity: int) -> str:
    """``ZeRO-2 from 4 GPUs``: the fewest data-parallel GPUs at which a stage fits, or ``not at all``."""
    fewest = next((value for value, peak in zip(values, peaks, strict=True) if peak <= capacity), None)
    return f"ZeRO-{stage} " + (f"from {fewest:,} GPU{'s' if fewest > 1 else ''}" if fewest else "not at all")
