"""The timeline chart: live memory at each event of the training steps, as inline-SVG geometry.

Pure functions from the core's timeline to coordinates and strings; templates/partials/timeline.html
only places them. The x axis is the event's index, the y axis the bytes alive there, stacked by
category (bottom to top in the table's order); the highest point is marked and named, the GPU's
capacity is a dashed line, and a divider separates the steps. Coordinates are in the SVG's own
units (its viewBox), rounded to one decimal so the markup stays small.

Text inside an SVG scales with it. The viewBox is as wide as the narrowest place the chart is drawn (a
390 px phone gives it 332 px), so FONT units are at least 12 px there; on a wide screen the chart grows to at
most MAX_SCALE times that. Each label's box is estimated from an upper bound on its glyphs, so labels are
placed inside the chart and clear of one another (`Box`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from app import core

WIDTH: Final = 320
HEIGHT: Final = 230
MAX_SCALE: Final = 1.5  # the chart is drawn at most this many px per unit: FONT-sized text at most 18 px
FONT: Final = 12  # label size in SVG units (the template's CSS uses the same)
LINE: Final = 14  # distance between the two lines of the peak label
CHAR_WIDTH: Final = 7.8  # advance of a FONT-sized glyph (DejaVu Sans digits are 7.63): an upper estimate
LETTER_WIDTH: Final = 13.5  # a band's bold capital (DejaVu Sans Bold "W" is 13.2)
TEXT_ASCENT: Final = 11.5  # a FONT-sized line's box above its baseline (DejaVu Sans: 11.2) ...
TEXT_DESCENT: Final = 3.0  # ... and below it (2.6)
PAD: Final = 4.0
TOP: Final = 40.0  # room above the plot for the two-line peak label
BOTTOM_GAP: Final = 20.0  # room below the plot for the step names
RIGHT_GAP: Final = 8.0
TICKS_WANTED: Final = 4  # at most this many gridlines above zero
NICE_MANTISSAS: Final = (1, 2, 5)
LETTER_MIN_THICKNESS: Final = 11.0  # a band this thick (SVG units) has room for its letter
MARKER_GAP: Final = 6.0  # between the peak label's leader and the marker


@dataclass(frozen=True)
class Box:
    """Where a label's text lies, in SVG units: from (x0, y0) at the top left to (x1, y1)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


def text_box(x: float, baseline: float, width: float, anchor: str, *, lines: int = 1) -> Box:
    """The box of a label `width` wide written at (x, baseline) with `anchor` ("start", "middle" or "end")."""
    x0 = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
    return Box(x0, baseline - TEXT_ASCENT, x0 + width, baseline + (lines - 1) * LINE + TEXT_DESCENT)


@dataclass(frozen=True)
class Tick:
    y: float
    label: str
    label_y: float  # its baseline, centred on the gridline


@dataclass(frozen=True)
class Band:
    """One category's part of the stack, drawn as the area under its cumulative top (painted top first)."""

    category: str
    points: str
    letter: str
    name: str  # the category's label, for the key below the chart
    letter_x: float | None  # where its letter fits, at the band's thickest point; None when nowhere
    letter_y: float | None


@dataclass(frozen=True)
class StepMark:
    step: int
    label_x: float  # the middle of the step's events
    divider_x: float | None  # the line before the step's first event; None for the first step


@dataclass(frozen=True)
class PeakMark:
    index: int
    x: float
    y: float
    label_x: float  # where the label's lines start (text-anchor start)
    label_y: float  # the first line's baseline; the second is LINE below
    leader_top: float  # a line from under the label down to the marker
    leader_bottom: float
    lines: tuple[str, str]
    text: str  # the label as one line: "peak: 151.06 GiB at optimizer.step, step 1"

    @property
    def box(self) -> Box:
        return text_box(self.label_x, self.label_y, max(text_width(line) for line in self.lines), "start", lines=2)


@dataclass(frozen=True)
class CapacityMark:
    y: float
    label: str
    label_x: float
    label_y: float
    anchor: str  # "start" or "end"
    over: bool  # the peak is above it

    @property
    def box(self) -> Box:
        return text_box(self.label_x, self.label_y, text_width(self.label), self.anchor)


@dataclass(frozen=True)
class Row:
    """One timeline point as the text alternative lists it."""

    event: str
    step: int
    size: str
    exact: str
    peak: bool
    reserved: str | None = None  # the allocator's reserve there, where worked out


class Drawing:
    """What the timeline chart and the sweep charts draw alike: a view box, a widest size, and a key of bands."""

    width: int
    height: int
    bands: tuple[Band, ...]  # in painting order: the top category first

    @property
    def view_box(self) -> str:
        return f"0 0 {self.width} {self.height}"

    @property
    def max_width(self) -> float:
        """The widest it is drawn, in px."""
        return self.width * MAX_SCALE

    @property
    def key(self) -> tuple[Band, ...]:
        """The bands in the table's order (bottom to top), for the key below the chart."""
        return tuple(reversed(self.bands))


@dataclass(frozen=True)
class Chart(Drawing):
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    tick_label_x: float  # the right end of the tick labels
    step_label_y: float  # the baseline of the step names
    divider_bottom: float  # step dividers run from the plot's top to here
    line_gap: int  # between the peak label's lines
    xs: tuple[float, ...]  # one per timeline point, in order
    ys: tuple[float, ...]  # the total alive at each point
    line: str  # the total as polyline points
    reserved_line: str  # the allocator's reserve at each point as polyline points ("" when not worked out)
    bands: tuple[Band, ...]  # in painting order: the top category first
    ticks: tuple[Tick, ...]  # from zero up
    steps: tuple[StepMark, ...]
    peak: PeakMark
    capacity: CapacityMark | None
    title: str
    desc: str
    rows: tuple[Row, ...]


def nice_step(value: float, *, ticks: int = TICKS_WANTED) -> float:
    """The smallest 1, 2 or 5 × 10^k that covers `value` in at most `ticks` steps (value > 0)."""
    rough = value / ticks
    exponent = math.floor(math.log10(rough))
    for power in (exponent, exponent + 1):
        for mantissa in NICE_MANTISSAS:
            step = mantissa * 10.0**power
            if step * ticks >= value * (1 - 1e-12):
                return step
    raise AssertionError("unreachable: 10^(k+1) always covers")


def decimals_for(step: float) -> int:
    return max(0, -math.floor(math.log10(step) + 1e-9))


def rounded(value: float) -> float:
    return round(value, 1)


def num(value: float) -> str:
    """A coordinate as the markup writes it: one decimal at most, no trailing ``.0``."""
    return f"{rounded(value):g}"


def points_attr(xs: Sequence[float], ys: Sequence[float]) -> str:
    return " ".join(f"{num(x)},{num(y)}" for x, y in zip(xs, ys, strict=True))


def text_width(text: str) -> float:
    return len(text) * CHAR_WIDTH


@dataclass(frozen=True)
class ValueAxis:
    """A bytes axis from zero in 1, 2 or 5 × 10^k steps of the unit, up to the first gridline at or above the top."""

    step_bytes: float
    labels: tuple[str, ...]  # from zero up
    scale_bytes: float  # the value of the top gridline
    left: float  # where the plot starts: room for the widest label and a pad either side

    def ticks(self, y_of: Callable[[int], float]) -> tuple[Tick, ...]:
        return tuple(Tick(y, label, rounded(y + FONT / 3))
                     for y, label in ((y_of(round(k * self.step_bytes)), label) for k, label in enumerate(self.labels)))


def value_axis(highest: int, *, unit: str, unit_bytes: int, ticks: int = TICKS_WANTED) -> ValueAxis:
    """The axis for values up to `highest` bytes, labelled in `unit` (`unit_bytes` each)."""
    step = nice_step(highest / unit_bytes, ticks=ticks) if highest else 1.0
    count = max(1, math.ceil(highest / unit_bytes / step - 1e-9)) if highest else 1
    decimals = decimals_for(step)
    labels = tuple(f"{k * step:,.{decimals}f} {unit}" for k in range(count + 1))
    left = rounded(max(text_width(label) for label in labels) + 2 * PAD)
    return ValueAxis(step * unit_bytes, labels, count * step * unit_bytes, left)


def timeline_chart(
    points: Sequence[core.Point],
    *,
    unit: str,
    unit_bytes: int,
    size: Callable[[int], str],
    capacity_bytes: int | None = None,
    reserved: Sequence[int] = (),
    over: bool | None = None,
) -> Chart:
    """The chart of `points` (the core's timeline, in order); `size` formats bytes for labels and rows. `reserved`
    is the allocator's reserve at each point (the estimate's `reserved_timeline`), drawn as a dashed line above
    the tensors when given; `over` is the verdict's "does not fit" (else the tensors' peak against the capacity)."""
    if not points:
        raise ValueError("a timeline has at least one point")
    totals = [point.bytes for point in points]
    top_index = max(range(len(points)), key=lambda index: (totals[index], -index))
    axis = value_axis(max(totals[top_index], max(reserved, default=0), capacity_bytes or 0), unit=unit,
                      unit_bytes=unit_bytes)
    left = axis.left
    right, top, bottom = float(WIDTH - RIGHT_GAP), TOP, float(HEIGHT - BOTTOM_GAP)

    def y_of(value: int) -> float:
        return rounded(bottom - (bottom - top) * value / axis.scale_bytes)

    xs = _spaced(len(points), left, right)
    ys = tuple(y_of(total) for total in totals)

    ticks = axis.ticks(y_of)
    steps = _steps(points, xs)
    peak = _peak(points[top_index], top_index, xs[top_index], ys[top_index], size)
    capacity = None
    if capacity_bytes:
        capacity = _capacity(y_of(capacity_bytes), f"capacity {size(capacity_bytes)}", peak_x=peak.x,
                             left=left, right=right, over=totals[top_index] > capacity_bytes if over is None else over)
    taken = [peak.box] + ([capacity.box] if capacity else [])
    bands = _bands(points, xs, y_of, bottom=bottom, left=left, right=right, avoid=top_index, taken=taken)
    rows = _rows(points, top_index, size, reserved)
    return Chart(
        width=WIDTH, height=HEIGHT, left=left, top=top, right=right, bottom=bottom, tick_label_x=rounded(left - PAD),
        step_label_y=bottom + BOTTOM_GAP - PAD - 1, divider_bottom=bottom + BOTTOM_GAP - PAD, line_gap=LINE, xs=xs, ys=ys,
        line=points_attr(xs, ys), reserved_line=points_attr(xs, tuple(y_of(value) for value in reserved)) if reserved else "",
        bands=bands, ticks=ticks, steps=steps, peak=peak, capacity=capacity,
        title=f"Memory alive per GPU through {_steps_words(points)}",
        desc=_desc(points, top_index, size, capacity_bytes),
        rows=rows,
    )


def _spaced(n: int, left: float, right: float) -> tuple[float, ...]:
    """`n` columns evenly from `left` to `right`; one alone in the middle."""
    span = right - left
    return tuple(rounded(left + span * index / (n - 1)) if n > 1 else rounded(left + span / 2) for index in range(n))


def _rows(points: Sequence[core.Point], top_index: int, size: Callable[[int], str],
          reserved: Sequence[int]) -> tuple[Row, ...]:
    """The table beside the chart: each point's bytes, the peak marked, and the allocator's reserve when given."""
    return tuple(Row(point.event, point.step, size(point.bytes), f"{point.bytes:,} bytes", index == top_index,
                     size(reserved[index]) if reserved else None)
                 for index, point in enumerate(points))


def _columns_but(n: int, avoid: int) -> list[int]:
    """The columns a letter may take: all but `avoid`, unless it is the only one."""
    return [index for index in range(n) if index != avoid] or [avoid]


def _bands(points: Sequence[core.Point], xs: tuple[float, ...], y_of: Callable[[int], float], *,
           bottom: float, left: float, right: float, avoid: int, taken: list[Box]) -> tuple[Band, ...]:
    """The stack by category: each band is the area under its cumulative top, painted from the top down.

    A band's letter goes where it is thickest, but not in the column `avoid` (the peak's marker) nor over a
    label already placed (`taken`, which each letter joins).
    """
    below = [0] * len(points)
    bands = []
    columns = _columns_but(len(points), avoid)
    for category in core.CATEGORIES:
        values = [point.breakdown[category] or 0 for point in points]
        if not any(values):
            continue
        above = [low + value for low, value in zip(below, values, strict=True)]
        tops = [y_of(value) for value in above]
        outline = points_attr(xs, tops) + f" {num(xs[-1])},{num(bottom)} {num(xs[0])},{num(bottom)}"
        spot = letter_spot(columns, xs, [y_of(low) for low in below], tops, left=left, right=right, taken=taken)
        entry = core.CATEGORY_TABLE[category]
        bands.append(Band(category, outline, entry.short, entry.label, *spot))
        below = above
    return tuple(reversed(bands))


def letter_spot(columns: Sequence[int], xs: Sequence[float], lows: Sequence[float], highs: Sequence[float], *,
                left: float, right: float, taken: list[Box]) -> tuple[float, float] | tuple[None, None]:
    """Where a band's letter goes: the thickest of `columns` (a band runs from `highs` down to `lows` there) at
    least LETTER_MIN_THICKNESS thick whose letter is clear of every box in `taken`; the letter's box joins them.
    (None, None) when there is no such place: the key below the chart names the band."""
    for index in sorted(columns, key=lambda index: (highs[index] - lows[index], index)):
        if lows[index] - highs[index] < LETTER_MIN_THICKNESS:
            break
        x = rounded(min(max(xs[index], left + LETTER_WIDTH / 2), right - LETTER_WIDTH / 2))
        y = rounded((lows[index] + highs[index]) / 2 + FONT / 3)
        box = text_box(x, y, LETTER_WIDTH, "middle")
        if not any(box.overlaps(other) for other in taken):
            taken.append(box)
            return x, y
    return None, None


def _steps(points: Sequence[core.Point], xs: tuple[float, ...]) -> tuple[StepMark, ...]:
    marks = []
    start = 0
    for index in range(1, len(points) + 1):
        if index == len(points) or points[index].step != points[start].step:
            divider = rounded((xs[start - 1] + xs[start]) / 2) if start else None
            marks.append(StepMark(points[start].step, rounded((xs[start] + xs[index - 1]) / 2), divider))
            start = index
    return tuple(marks)


def _peak(point: core.Point, index: int, x: float, y: float, size: Callable[[int], str]) -> PeakMark:
    lines = (f"peak: {size(point.bytes)}", f"at {point.event}, step {point.step}")
    width = max(text_width(line) for line in lines)
    label_x = min(max(x - width / 2, PAD), WIDTH - PAD - width)
    label_y = FONT + PAD - 2
    leader_top = label_y + LINE + PAD
    return PeakMark(index, x, y, rounded(max(label_x, PAD)), label_y, leader_top, rounded(max(y - MARKER_GAP, leader_top)),
                    lines, " ".join(lines))


def _capacity(y: float, label: str, *, peak_x: float, left: float, right: float, over: bool) -> CapacityMark:
    """The label sits on the side away from the peak, above its line where there is room, else below."""
    on_right = peak_x < (left + right) / 2
    label_y = y - PAD if y - PAD - FONT >= TOP else y + FONT + 2
    return CapacityMark(y, label, rounded(right - PAD if on_right else left + PAD), rounded(label_y),
                        "end" if on_right else "start", over)


def _steps_words(points: Sequence[core.Point]) -> str:
    count = len({point.step for point in points})
    return {1: "one training step", 2: "two training steps"}.get(count, f"{count} training steps")


def _desc(points: Sequence[core.Point], top: int, size: Callable[[int], str], capacity_bytes: int | None) -> str:
    first, peak, last = points[0], points[top], points[-1]
    text = (f"Live memory at each of {len(points)} events: {size(first.bytes)} at {first.event} in step {first.step}, "
            f"a peak of {size(peak.bytes)} at {peak.event} in step {peak.step}, and {size(last.bytes)} at "
            f"{last.event} in step {last.step}.")
    if capacity_bytes:
        relation = "below" if peak.bytes > capacity_bytes else "above"
        text += f" The GPU's capacity, {size(capacity_bytes)}, is {relation} the peak."
    return text
