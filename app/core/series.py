"""Memory as one field varies: the peak, the per-GPU sum and the fit at each value.

Each point is what `estimate` answers for the job with that value. Most are worked out exactly
without running an estimate per value: with one tensor-parallel rank, one pipeline stage, whole-byte
dtypes and no padded kernel, every buffer's bytes are polynomials in the micro-batch size (degree
1) and the sequence length (degree 2: the s × s attention tensors), and so is the live memory at
every event of the timeline. Three estimates at s = 1, 2, 3 (two at b = 1, 2) give each event's
polynomial by its forward differences,

    f(x0 + k) = f(x0) + Δf·k + Δ²f·k(k − 1)/2,

which is exact in integers. The fit is checked against a full estimate at the largest value asked
for. The allocator's reserved memory is not a polynomial (it follows which cached block each tensor
lands in): a fitted point has none, and its fit on the GPU comes from the largest value that fits,
found by bisection over the values asked for with full estimates (more memory for more tokens or
sequences: the fit changes once). Some buffers are polynomial only piecewise: a layer's backward working set is counted where it
exceeds the gradients not yet written, sdpa's math-path transients where they exceed what the layer
keeps, a sliding window's tensors once the sequence passes the window. Where the check disagrees,
the last value the fit still gives exactly is found by bisection (each step a full estimate), and a
new fit starts after it, up to `MAX_SEGMENTS` pieces; values left over get one estimate each, with the allocator's
replay while at most `MAX_REPLAYED` are left, and beyond that the `MAX_REPLAYED` nearest the largest value that fits
with it, the others without it, their fit judged as a fitted value's (a 1,000-point sweep of a sliding-window
model's sequence took 8.6 s of CPU when each was replayed, 0.6-0.8 s so). The reserve need not rise with the value
everywhere near the boundary (Gemma-3-1B's jumps 2.7 GB at every fourth length there): a point without a replay
of its own (no reserved bytes) may then be judged otherwise than its own estimate would be.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Final, NamedTuple, cast

from app.core import activations as act
from app.core.categories import CATEGORIES, Breakdown
from app.core.communicators import communicator_bytes
from app.core.errors import DomainError
from app.core.estimate import Estimate
from app.core.gpus import get_gpu
from app.core.job import Job, check_value, job_field, with_field
from app.core.precision import TENSOR_CLASSES
from app.core.setup import activation_setup
from app.core.timeline import Peak

MAX_VALUES: Final = 1000
MAX_SEGMENTS: Final = 8  # polynomial pieces a series is fitted in before the rest is estimated value by value
# A sweep over a field whose memory is not a polynomial replays the allocator for at most this many values; with
# more, each value gets its tensors' timeline, and its fit is judged by replays of the values around the boundary
# (`_judged_by_boundary`).
MAX_REPLAYED: Final = 24

# Fields whose memory is a polynomial in the value (module docstring): its degree, and the smallest
# value from which it holds. At micro-batch 1 transformers' shifted labels stay a view of s + 1
# labels rather than a copy of s (activations._hf_head), 8 bytes off the line through b = 2, 3, ...
POLYNOMIAL: Final = {
    "training.micro_batch_size": (1, 2),
    "training.seq_len": (2, 1),
    "training.framework_overhead_bytes": (1, 0),
}


class SeriesPoint(NamedTuple):
    value: object
    peak: Peak
    per_gpu: Breakdown
    fits: bool | None  # None without a GPU
    reserved_bytes: int | None = None  # the allocator's reserved peak, where a full estimate ran (not fitted)


def series(job: Job, path: str, values: Sequence[object], *, verdicts: bool = True) -> tuple[SeriesPoint, ...]:
    """The peak, the per-GPU sum and the fit for each value of the field at `path` (values in the order given).
    Without `verdicts`, the tensors only: no allocator replay, no fit (None), for charts of the peak."""
    if not verdicts:
        job = replace(job, gpu=None)
    item = job_field(path)
    if not values:
        raise DomainError("vary.values", "give at least one value")
    if len(values) > MAX_VALUES:
        raise DomainError("vary.values", f"at most {MAX_VALUES:,} values, got {len(values):,}")
    distinct: dict[tuple[type, object], int] = {}
    plain_ints = item.kind == "int" and item.high and all(type(value) is int for value in values)
    if plain_ints and item.low <= min(values) and max(values) <= item.high:  # type: ignore[type-var, operator]
        for index, value in enumerate(values):
            distinct.setdefault((int, value), index)
    else:
        for index, value in enumerate(values):
            check_value(item, value, where=f"vary.values.{index}")
            distinct.setdefault((type(value), value), index)
    if path == "gpu":
        return _over_gpus(job, values)
    pieces = Fit.pieces(job, path, [value for _, value in distinct]) if path in POLYNOMIAL else []
    if pieces and job.gpu is not None:
        largest = _largest_fitting(job, path, sorted(cast("int", value) for _, value in distinct))
        for _, _, piece in pieces:
            piece.largest_fitting = largest
    if not pieces and verdicts and job.gpu is not None and len(distinct) > MAX_REPLAYED:
        judged = _judged_by_boundary(job, path, distinct)
        return tuple(judged[(type(value), value)] for value in values)
    points: dict[tuple[type, object], SeriesPoint] = {}
    fitted = {key: next((fit for low, high, fit in pieces if low <= key[1] <= high), None)  # type: ignore[operator]
              for key in distinct}
    # Values no piece gives exactly: each replayed, unless more than MAX_REPLAYED are left, when each gets its
    # tensors' timeline and its fit from the largest value that fits, as a fitted value does.
    left = [key for key, fit in fitted.items() if fit is None]
    by_largest = bool(pieces) and job.gpu is not None and len(left) > MAX_REPLAYED
    largest = pieces[0][2].largest_fitting if by_largest else None
    # Near that value the reserve does not rise with the value everywhere (a block more or less: Gemma-3-1B's jumps
    # 2.7 GB at every fourth length there), so the values left over nearest it are replayed and keep their verdicts.
    edge = largest if largest is not None else min(cast("int", key[1]) for key in left) if left else 0
    replayed = set(sorted(left, key=lambda key: abs(cast("int", key[1]) - edge))[:MAX_REPLAYED]) if by_largest else set()
    for key, index in distinct.items():
        value, fit = key[1], fitted[key]
        if fit is not None:
            points[key] = fit.point(value)
            continue
        where = f"vary.values.{index}"
        unreplayed = by_largest and key not in replayed
        try:
            result = with_field(job, path, value, where=where).estimate(reserve=verdicts and not unreplayed)
        except DomainError as error:
            if error.field == where:
                raise
            raise DomainError(where, f"{path} = {value!r}: {error.message}") from None
        if unreplayed:
            fits = largest is not None and cast("int", value) <= largest
            points[key] = SeriesPoint(value, result.peak, result.per_gpu, fits, None)
        else:
            points[key] = _point(value, result)
    return tuple(points[(type(value), value)] for value in values)


def _varied(job: Job, path: str, value: object, index: int) -> Job:
    where = f"vary.values.{index}"
    try:
        return with_field(job, path, value, where=where)
    except DomainError as error:
        if error.field == where:
            raise
        raise DomainError(where, f"{path} = {value!r}: {error.message}") from None


def _judged_by_boundary(job: Job, path: str, distinct: dict[tuple[type, object], int]) -> dict[tuple, SeriesPoint]:
    """Many values of a field whose memory is not a polynomial: each value's tensors through the two steps (no
    replay), and its fit from where the fit changes in the order of what the values need (their tensors' peak and
    what lies outside the allocator), found by bisection with full estimates. The reserve rises with what the
    tensors need, so the fit changes once in that order; the values replayed keep their reserved peak, the others
    have none. A sweep of 1,000 values then costs some 1,000 timelines and a dozen replays, not 1,000 replays."""
    gpu = job.gpu
    assert gpu is not None  # only asked with a GPU
    tensors: dict[tuple, tuple[Job, Estimate, int]] = {}
    for key, index in distinct.items():
        varied = _varied(job, path, key[1], index)
        try:
            result = varied.estimate(reserve=False)
        except DomainError as error:
            raise DomainError(f"vary.values.{index}", f"{path} = {key[1]!r}: {error.message}") from None
        outside = gpu.context_bytes + communicator_bytes(varied.parallelism, gpu.interconnect)
        tensors[key] = (varied, result, result.peak.bytes + outside)
    order = sorted(tensors, key=lambda key: tensors[key][2])
    replayed: dict[tuple, Estimate] = {}

    def fits(position: int) -> bool:
        key = order[position]
        if tensors[key][0].surely_over():
            return False
        if key not in replayed:
            replayed[key] = tensors[key][0].estimate()
        fit = replayed[key].gpu
        return bool(fit and fit.fits)

    last = -1
    if fits(0):
        room = gpu.capacity_bytes
        below = max((i for i, key in enumerate(order) if tensors[key][2] <= room), default=0)
        last = boundary(fits, 0, len(order) - 1, below)
    # Near the boundary the reserve does not follow the tensors exactly (a segment more or less): the values whose
    # need lies closest to it are replayed too, up to MAX_REPLAYED in all, and keep their own verdicts.
    edge = tensors[order[min(last + 1, len(order) - 1)]][2] if last >= 0 else tensors[order[0]][2]
    nearest = sorted((key for key in order if key not in replayed), key=lambda key: abs(tensors[key][2] - edge))
    for key in nearest[:max(MAX_REPLAYED - len(replayed), 0)]:
        replayed[key] = tensors[key][0].estimate()
    points = {}
    for position, key in enumerate(order):
        if key in replayed:
            points[key] = _point(key[1], replayed[key])
        else:
            result = tensors[key][1]
            points[key] = SeriesPoint(key[1], result.peak, result.per_gpu, position <= last, None)
    return points


def _point(value: object, result: Estimate) -> SeriesPoint:
    return SeriesPoint(value, result.peak, result.per_gpu, result.gpu.fits if result.gpu else None,
                       result.peak.reserved_bytes)


def _largest_fitting(job: Job, path: str, values: list[int]) -> int | None:
    """The largest of the (sorted) values whose full estimate fits on the job's GPU; None if none does."""
    def fits(index: int) -> bool:
        return with_field(job, path, values[index]).fitting_estimate() is not None

    if not fits(0):
        return None
    # Where the tensors alone pass the capacity is found without a replay; the reserve only lowers it from there.
    below = boundary(lambda index: not with_field(job, path, values[index]).surely_over(), 0, len(values) - 1, None)
    return values[boundary(fits, 0, below, below)]


def boundary(fits: Callable[[int], bool], low: int, high: int, guess: int | None) -> int:
    """The largest value in [low, high] that fits, given that `low` fits and fitting is monotone.

    Starts from `guess` and gallops outward until the boundary is bracketed, then bisects; a
    right guess costs two checks.
    """
    good, bad = low, high + 1
    start = low if guess is None else min(max(guess, low), high)
    if fits(start):
        good, step = start, 1
        while good + step <= high and fits(good + step):
            good, step = good + step, step * 2
        bad = min(good + step, high + 1)
    else:
        bad, step = start, 1
        while bad - step > low and not fits(bad - step):
            bad, step = bad - step, step * 2
        good = max(bad - step, low)
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def _over_gpus(job: Job, values: Sequence[object]) -> tuple[SeriesPoint, ...]:
    """An estimate per GPU: each brings its own capacity, context and workspaces, which the replay is judged by."""
    points = []
    for value in values:
        result = replace(job, gpu=get_gpu(value)).estimate()  # type: ignore[arg-type]
        points.append(_point(value, result))
    return tuple(points)


def polynomial(job: Job, path: str) -> bool:
    """Whether every buffer's bytes are polynomial in the field for this job (module docstring)."""
    if path not in POLYNOMIAL or job.architecture is None:
        return False
    p, precision = job.parallelism, job.training.precision
    if p.tensor != 1 or p.pipeline != 1 or p.context != 1:
        return False  # ceiling divisions over ranks; the most-loaded stage may change with the value
    if act.attention_kernel(job.architecture, activation_setup(job.training, p)) == "memory-efficient":
        return False  # its log-sum-exp is padded to a multiple of 32 queries
    return all(precision.bits(name) % 8 == 0 for name in TENSOR_CLASSES)


Coefficients = tuple[int, ...]  # f(x0), Δf, Δ²f: f(x0 + k) = Σ coefficient × binomial(k, i)


def _differences(samples: Sequence[int]) -> Coefficients:
    """f(x0), Δf, Δ²f from f at x0, x0 + 1, ... (zeros beyond the samples' degree)."""
    out, row = [], list(samples)
    while row:
        out.append(row[0])
        row = [b - a for a, b in pairwise(row)]
    return (*out, 0, 0)[:3]


def _never_below(f: Coefficients, g: Coefficients, low: int, high: int, *, strictly: bool) -> bool:
    """Whether f(k) ≥ g(k) (f(k) > g(k) if `strictly`) for every integer k in [low, high].

    The difference a + b·k + c·k(k − 1)/2 is a parabola: its least value on the integers of the
    interval is at an end or next to its vertex k = 1/2 − b/c (for c > 0).
    """
    a, b, c = (x - y for x, y in zip(f, g, strict=True))
    points = {low, high}
    if c > 0:
        vertex = (c - 2 * b) // (2 * c)  # floor(1/2 - b/c)
        points.update(k for k in (vertex, vertex + 1) if low <= k <= high)
    least = min(a + b * k + c * (k * (k - 1) // 2) for k in points)
    return least > 0 if strictly else least >= 0


class Fit:
    """Each event's live bytes by category, and the per-GPU sum, as polynomials in the field."""

    def __init__(self, job: Job, path: str, x0: int, samples: list[Estimate]) -> None:
        self.job, self.path, self.x0 = job, path, x0
        first = samples[0]
        self.events = [(point.event, point.step) for point in first.timeline]
        columns = range(len(CATEGORIES))
        self.breakdowns: list[tuple[Coefficients, ...]] = []
        totals = []
        for index in range(len(self.events)):
            per_category = tuple(_differences([sample.timeline[index].breakdown[c] or 0 for sample in samples])
                                 for c in CATEGORIES)
            self.breakdowns.append(per_category)
            totals.append(tuple(sum(per_category[c][i] for c in columns) for i in range(3)))
        self.per_gpu = tuple(_differences([sample.per_gpu[c] or 0 for sample in samples]) for c in CATEGORIES)
        self.totals = totals
        self.candidates = list(enumerate(totals))
        self.largest_fitting: int | None = None  # the largest value asked for that fits on the job's GPU

    def keep_candidates(self, low: int, high: int) -> None:
        """Keep the events that can be the peak somewhere in x0 + [low, high].

        An event is dropped when one of the events that peak at the ends or the middle of the range is
        at least as large everywhere there (if it comes earlier, it wins a tie) or larger (if later).
        """
        totals = self.totals
        champions = {self._top(k) for k in (low, (low + high) // 2, high)}
        kept = []
        for index, total in enumerate(totals):
            beaten = any(index != other and _never_below(totals[other], total, low, high, strictly=other > index)
                         for other in champions)
            if not beaten:
                kept.append((index, total))
        self.candidates = kept

    def _top(self, k: int) -> int:
        pair = k * (k - 1) // 2
        sizes = [a + b * k + c * pair for a, b, c in self.totals]
        return sizes.index(max(sizes))

    @classmethod
    def pieces(cls, job: Job, path: str, values: list[object]) -> list[tuple[int, int, Fit]]:
        """(low, high, fit): fits exact for every value asked for from low to high (module docstring)."""
        if not polynomial(job, path):
            return []
        degree, x0 = POLYNOMIAL[path]
        ints = sorted(value for value in cast("list[int]", values) if value >= x0)  # integers, by check_value
        out: list[tuple[int, int, Fit]] = []
        while ints and len(out) < MAX_SEGMENTS:
            start = ints[0]
            fitted = cls.of(job, path, start, degree)
            if fitted is None:
                break
            high = ints[-1]
            if high > start + degree and not fitted.agrees(high, with_field(job, path, high).estimate(reserve=False)):
                good, bad = start + degree, high  # the fit holds at `good` (a sample), not at `bad`
                while bad - good > 1:
                    middle = (good + bad) // 2
                    if fitted.agrees(middle, with_field(job, path, middle).estimate(reserve=False)):
                        good = middle
                    else:
                        bad = middle
                high = good
                if high == start + degree:
                    break  # not even one value past its samples: not polynomial here, so one estimate a value
            fitted.keep_candidates(0, high - start)
            out.append((start, high, fitted))
            ints = [value for value in ints if value > high]
        return out

    @classmethod
    def of(cls, job: Job, path: str, x0: int, degree: int) -> Fit | None:
        """The fit from full estimates at x0, x0 + 1, ..., x0 + degree; None where their events differ."""
        samples = [with_field(job, path, x0 + k).estimate(reserve=False) for k in range(degree + 1)]
        if len({tuple((p.event, p.step) for p in sample.timeline) for sample in samples}) != 1:
            return None
        return cls(job, path, x0, samples)

    def agrees(self, x: int, result: Estimate) -> bool:
        """Whether the fit gives this full estimate's timeline and per-GPU sum exactly."""
        k = x - self.x0
        pair = k * (k - 1) // 2
        if [(p.event, p.step) for p in result.timeline] != self.events:
            return False
        for point, per_category in zip(result.timeline, self.breakdowns, strict=True):
            if [a + b * k + c * pair for a, b, c in per_category] != [point.breakdown[c] or 0 for c in CATEGORIES]:
                return False
        return [a + b * k + c * pair for a, b, c in self.per_gpu] == [result.per_gpu[c] or 0 for c in CATEGORIES]

    def point(self, value: object) -> SeriesPoint:
        k = value - self.x0  # type: ignore[operator]
        pair = k * (k - 1) // 2
        top, top_bytes = -1, -1
        for index, (a, b, c) in self.candidates:
            size = a + b * k + c * pair
            if size > top_bytes:
                top, top_bytes = index, size
        event, step = self.events[top]
        peak = Peak(top_bytes, event, step, Breakdown.of([a + b * k + c * pair for a, b, c in self.breakdowns[top]]))
        per_gpu = Breakdown.of([a + b * k + c * pair for a, b, c in self.per_gpu])
        fits = None if self.job.gpu is None else self.largest_fitting is not None and k + self.x0 <= self.largest_fitting
        return SeriesPoint(value, peak, per_gpu, fits)
