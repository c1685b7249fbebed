"""One training step as a sequence of events, and the memory live at each: the timeline and its peak.

A step on one GPU runs: ``step start``; for each micro-batch a forward (embedding, the layers,
the loss) and a backward (the loss's gradients, the output layer, the layers in reverse, the
embedding); then ``optimizer.step`` and ``zero_grad``. Two steps are modelled: step 1, in which the
optimizer creates its state, and step 2, which stands for every later step. With gradient
accumulation the first micro-batch runs without gradients and the second stands for every later
one, with all gradients alive.

Each buffer of the ledger says when it is alive (`Life`); the live bytes at an event are the sum of
the buffers alive there. A buffer that a stack of layers builds one layer at a time (activations,
gradients) is a *ramp*: alive in proportion to a per-event count of layers. Between two events
live memory changes monotonically (each layer adds or frees the same bytes), so the maximum over
the events is the peak of the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final, Literal, NamedTuple

from app.core.categories import CATEGORIES, Breakdown

STEPS: Final = 2
START: Final = "start"
OPTIMIZER_STEP: Final = "optimizer"
ZERO_GRAD: Final = "zero_grad"
STEP_PHASE_NAMES: Final = {START: "step start", OPTIMIZER_STEP: "optimizer.step", ZERO_GRAD: "zero_grad"}

Scope = Literal["run", "step", "micro-batch"]


@dataclass(frozen=True)
class Phase:
    """One event of a micro-batch: its id, its name on the timeline, and the layer counts there."""

    id: str
    name: str
    counts: dict[str, int] = field(default_factory=dict)


class Life(NamedTuple):
    """When a buffer is alive.

    * ``run``: from the first time `first` happens to the end (weights, optimizer state).
    * ``step``: in every step, from `first` (a step-level phase or one of the first micro-batch's)
      to `last` (a step-level phase), both included (gradients: first backward to optimizer.step).
    * ``micro-batch``: in every micro-batch, at the phases from `first` to `last` in order, or at
      `only` (e.g. the loss's forward alone); `later` leaves out the run's very first micro-batch;
      `accumulating` keeps only the micro-batches after each step's first (gradients accumulate into them).
    ``ramp`` names a layer count: the buffer's bytes are for the full count, and at an event it
    holds that share of them.
    """

    scope: Scope
    first: str
    last: str = ""
    only: tuple[str, ...] = ()
    ramp: str | None = None
    later: bool = False
    accumulating: bool = False


def describe(life: Life, names: dict[str, str]) -> tuple[str, str]:
    """When a buffer is allocated and after which event it is freed, in words (`names`: phase id -> name)."""
    if life.scope == "run":
        start = "before step 1" if life.first == START else f"{names[life.first]}, step 1"
        return start, "never (kept across steps)"
    if life.scope == "step":
        return f"{names[life.first]}, each step", f"after {names[life.last]}"
    first = life.only[0] if life.only else life.first
    last = life.only[-1] if life.only else life.last
    when = ("each micro-batch after a step's first" if life.accumulating else
            "each later micro-batch" if life.later else "each micro-batch")
    return f"{names[first]}, {when}", f"after {names[last]}"


@dataclass(frozen=True)
class Event:
    name: str
    step: int
    micro_batch: int  # 0 for step-level events
    phase: str
    counts: dict[str, int]


class Point(NamedTuple):
    event: str
    step: int
    bytes: int
    breakdown: Breakdown


class Peak(NamedTuple):
    bytes: int
    event: str
    step: int
    breakdown: Breakdown
    reserved_bytes: int = 0  # the caching allocator's reserved memory at its worst moment of the two steps


def events(phases: Sequence[Phase], *, micro_batches: int, carried: dict[str, int]) -> tuple[Event, ...]:
    """Both steps' events. Micro-batches beyond the second behave as the second, so at most two are listed.

    From the second micro-batch on, and at the step-level events after them, every ramp that
    persists across micro-batches (gradients) is full: `carried` gives those counts.
    """
    cycles = min(micro_batches, 2)
    out: list[Event] = []
    for step in range(1, STEPS + 1):
        out.append(Event(STEP_PHASE_NAMES[START], step, 0, START, {}))
        for cycle in range(1, cycles + 1):
            prefix = f"micro-batch {cycle}: " if cycles > 1 else ""
            for phase in phases:
                counts = phase.counts if cycle == 1 else phase.counts | carried
                out.append(Event(prefix + phase.name, step, cycle, phase.id, counts))
        for phase_id in (OPTIMIZER_STEP, ZERO_GRAD):
            out.append(Event(STEP_PHASE_NAMES[phase_id], step, 0, phase_id, dict(carried)))
    return tuple(out)


@dataclass
class Plan:
    """The events of a stage's two steps, and where each kind of lifetime is alive in them (worked out once)."""

    timeline: tuple[Event, ...]
    phase_order: dict[str, int]
    alive: dict[Life, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    spans: dict[Life, tuple[tuple[int, int, int], ...]] = field(default_factory=dict)

    def alive_at(self, life: Life) -> tuple[tuple[int, int], ...]:
        """(event index, ramp count) where `life` is alive; the count is 1 for a buffer that is not a ramp."""
        found = self.alive.get(life)
        if found is None:
            indices = _alive_indices(life, self.timeline, self.phase_order)
            found = tuple((index, self.timeline[index].counts.get(life.ramp, 0) if life.ramp else 1) for index in indices)
            self.alive[life] = found
        return found

    def runs(self, life: Life) -> tuple[tuple[int, int, int], ...]:
        """`alive_at` as unbroken runs of events with the same ramp count: (first event index, index after the
        last, count)."""
        found = self.spans.get(life)
        if found is None:
            spans: list[list[int]] = []
            for index, count in self.alive_at(life):
                if spans and spans[-1][1] == index and spans[-1][2] == count:
                    spans[-1][1] = index + 1
                else:
                    spans.append([index, index + 1, count])
            found = self.spans[life] = tuple((start, stop, count) for start, stop, count in spans)
        return found


_PLANS: dict[tuple, Plan] = {}
_MAX_PLANS: Final = 512


def plan(phases: Sequence[Phase], *, micro_batches: int, carried: dict[str, int]) -> Plan:
    """The events for these phases, shared by every estimate whose stage has the same phases."""
    key = (tuple((phase.id, phase.name, tuple(phase.counts.items())) for phase in phases), min(micro_batches, 2),
           tuple(carried.items()))
    found = _PLANS.get(key)
    if found is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        timeline = events(phases, micro_batches=micro_batches, carried=carried)
        found = _PLANS[key] = Plan(timeline, {phase.id: order for order, phase in enumerate(phases)})
    return found


def _alive_indices(life: Life, timeline: Sequence[Event], phase_order: dict[str, int]) -> list[int]:
    if life.scope == "run":
        for index, event in enumerate(timeline):
            if event.phase == life.first and event.micro_batch <= 1:
                return list(range(index, len(timeline)))
        return []
    if life.scope == "step":
        alive, on = [], False
        for index, event in enumerate(timeline):
            if event.phase == START:
                on = False
            if event.phase == life.first and event.micro_batch <= 1:
                on = True
            if on:
                alive.append(index)
            if event.micro_batch == 0 and event.phase == life.last:
                on = False
        return alive
    if life.only:
        wanted = set(life.only)
    else:
        low, high = phase_order[life.first], phase_order[life.last]
        wanted = {phase for phase, order in phase_order.items() if low <= order <= high}
    return [
        index for index, event in enumerate(timeline)
        if event.micro_batch and event.phase in wanted and not (life.later and event.step == 1 and event.micro_batch == 1)
        and not (life.accumulating and event.micro_batch == 1)
    ]


_COLUMN: Final = {category: index for index, category in enumerate(CATEGORIES)}


def sweep(
    buffers: Sequence[tuple[str, int, Life]],
    timeline_plan: Plan,
    ramp_totals: dict[str, int],
) -> tuple[tuple[Point, ...], Peak]:
    """Live bytes by category at every event, and the first event where the total is highest.

    `buffers` are (category, bytes, life). A ramp's share at an event is bytes × count ÷ total,
    rounded down.
    """
    return timeline_points(timeline_plan, *live_bytes(buffers, timeline_plan, ramp_totals))


def live_bytes(
    buffers: Sequence[tuple[str, int, Life]],
    timeline_plan: Plan,
    ramp_totals: dict[str, int],
) -> tuple[list[tuple[int, ...]], list[int]]:
    """`sweep`'s live bytes at every event, one value per category, and their totals (without the points)."""
    timeline = timeline_plan.timeline
    # Per category, the change of live bytes at each event (one more entry for the end): a buffer adds its bytes
    # (a ramp its share) where each unbroken run of its events starts and takes them away where it ends; the
    # running sums are the live bytes.
    changes = [[0] * (len(timeline) + 1) for _ in CATEGORIES]
    runs = timeline_plan.runs
    for category, size, life in buffers:
        if not size:
            continue
        column = changes[_COLUMN[category]]
        total = None if life.ramp is None else ramp_totals[life.ramp]
        for start, stop, count in runs(life):
            share = size if total is None else size * count // total
            column[start] += share
            column[stop] -= share
    live = list(zip(*[accumulate(column) for column in changes], strict=True))  # per event, one per category
    live.pop()  # the end, where nothing is alive
    return live, list(map(sum, live))


def timeline_points(timeline_plan: Plan, live: list[tuple[int, ...]], totals: list[int]) -> tuple[tuple[Point, ...], Peak]:
    """The points of `live_bytes`' answer, and the first event where the total is highest."""
    # Built as plain tuples of the NamedTuple's class: the same objects without a Python-level __new__ per event.
    make, point, of = tuple.__new__, Point, Breakdown.of_trusted
    points = tuple([make(point, (event.name, event.step, total, of(values)))
                    for event, total, values in zip(timeline_plan.timeline, totals, live, strict=True)])
    top = totals.index(max(totals))  # the first event where the total is highest
    peak = Peak(points[top].bytes, points[top].event, points[top].step, points[top].breakdown)
    return points, peak
