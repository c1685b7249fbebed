"""Charts of memory against a swept field, as inline-SVG geometry: a stack by category (the peak against
the sequence length) or one line per series (the peak against the data-parallel GPUs, per ZeRO stage).

The swept values are geometric, so x is on a log2 scale with gridlines at powers of two; y is linear
in bytes from zero (app/web/chart.py's axis), up to the larger of the data and the GPU's capacity,
or to `clip_at` when the data climb far above it (the stack is then clipped at the top of the plot).
The capacity is a dashed line and the form's current value is marked; lines that coincide are said so in
words. Labels keep clear of one another as app/web/chart.py's do (its `Box`). Pure functions from numbers to
coordinates and strings; templates/partials/sweeps.html only places them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from app import core
from app.web.chart import (
    FONT,
    PAD,
    TEXT_ASCENT,
    TEXT_DESCENT,
    Band,
    Box,
    CapacityMark,
    Drawing,
    Tick,
    letter_spot,
    num,
    points_attr,
    rounded,
    text_box,
    text_width,
    value_axis,
)
from app.web.chart import WIDTH as WIDTH

HEIGHT: Final = 220
TOP: Final = 24.0  # room above the plot for the current value's label
NOW_LABEL_Y: Final = TOP - 8.0  # the baseline of the current value's label
BOTTOM_GAP: Final = 20.0  # room below the plot for the x labels
RIGHT_GAP: Final = 10.0
LINE_LABEL_SPACING: Final = TEXT_ASCENT + TEXT_DESCENT + 1  # between the baselines of two line labels
BOLD_CAPITALS: Final = 1.1  # line labels are bold and mostly capitals: wider than chart.CHAR_WIDTH (8.3 for "ZeRO-1")


@dataclass(frozen=True)
class XTick:
    x: float
    label: str
    anchor: str  # "middle", or "start"/"end" at an end of the axis so the label stays over the plot

    @property
    def box(self) -> Box:
        return text_box(self.x, 0.0, text_width(self.label), self.anchor)


@dataclass(frozen=True)
class Now:
    """The form's current value: a line across the plot, its label above, and its point on the curve."""

    x: float
    label: str
    label_x: float
    anchor: str
    point_y: float | None  # None when the point is above the top of the plot


@dataclass(frozen=True)
class Line:
    key: str  # for the stylesheet: "zero-0"
    label: str  # written at the right end: "ZeRO-0"
    points: str
    label_y: float  # the label's baseline, moved apart from its neighbours'


@dataclass(frozen=True)
class TableRow:
    cells: tuple[str, ...]
    current: bool


@dataclass(frozen=True)
class SweepChart(Drawing):
    id: str
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    tick_label_x: float
    x_label_y: float
    line_label_x: float
    now_label_y: float
    ticks: tuple[Tick, ...]
    x_ticks: tuple[XTick, ...]
    bands: tuple[Band, ...]  # painting order, the top category first; empty for a chart of lines
    total: str | None  # the top of the stack as polyline points
    lines: tuple[Line, ...]
    capacity: CapacityMark | None
    now: Now | None
    shade_x: float | None  # values from here on are shaded (beyond the model's positions)
    clipped: bool  # some of the data are above the top of the plot
    title: str
    desc: str
    head: tuple[str, ...]
    rows: tuple[TableRow, ...]
    notes: tuple[str, ...] = ()  # what the drawing cannot show, in words: "ZeRO-1 and ZeRO-2 coincide: ..."

    @property
    def clip_id(self) -> str:
        return f"{self.id}-clip"

    @property
    def plot_width(self) -> float:
        return rounded(self.right - self.left)

    @property
    def plot_height(self) -> float:
        return rounded(self.bottom - self.top)

    @property
    def shade_width(self) -> float:
        return rounded(self.right - self.shade_x) if self.shade_x is not None else 0.0


@dataclass(frozen=True)
class Text:
    """What a chart says in words: its title, its description, and the table of every value."""

    title: str
    desc: str
    head: tuple[str, ...]
    rows: tuple[TableRow, ...]


def log_scale(low: float, high: float, left: float, right: float) -> Callable[[float], float]:
    """x for a value on a log2 scale from `low` (at `left`) to `high` (at `right`)."""
    span = math.log2(high / low) if high > low else 1.0

    def x_of(value: float) -> float:
        return rounded(left + (right - left) * math.log2(value / low) / span)

    return x_of


def x_ticks(low: int, high: int, x_of: Callable[[float], float], label: Callable[[int], str]) -> tuple[XTick, ...]:
    """A label at every power of two in [low, high], or every second, third... so that none overlap.

    Labels stay over the axis, from x_of(low) to x_of(high): clear of the value labels on its left, and of
    the line labels on its right.
    """
    powers = [1 << k for k in range(math.ceil(math.log2(low)), math.floor(math.log2(high)) + 1)]
    lo, hi = x_of(low), x_of(high)
    ticks: list[XTick] = []
    for stride in range(1, len(powers) + 1):
        ticks = [XTick(x_of(power), label(power), _anchor(x_of(power), text_width(label(power)), lo, hi))
                 for power in powers[::stride]]
        if all(a.box.x1 + 2 * PAD <= b.box.x0 for a, b in zip(ticks, ticks[1:], strict=False)):
            break
    return tuple(ticks)


def _anchor(x: float, width: float, lo: float, hi: float) -> str:
    """How a label `width` wide at `x` stays within [lo, hi]: centred where it fits, else from or to `x`."""
    return "start" if x - width / 2 < lo else "end" if x + width / 2 > hi else "middle"


def _now(x: float, label: str, point_y: float | None, *, left: float) -> Now:
    """The label above the plot, clear of the value labels left of it and inside the box."""
    return Now(x, label, x, _anchor(x, text_width(label), left, WIDTH - PAD), point_y)


def _capacity(y: float, label: str, *, left: float, right: float, over: bool, on_right: bool) -> CapacityMark:
    """The label above its line where there is room, else below; at the right end or the left, away from the
    current value's marker."""
    label_y = y - PAD if y - PAD - FONT >= TOP else y + FONT + 2
    return CapacityMark(y, label, rounded(right - PAD if on_right else left + PAD), rounded(label_y),
                        "end" if on_right else "start", over)


def stacked_chart(
    *,
    chart_id: str,
    values: Sequence[int],
    breakdowns: Sequence[Mapping[str, int | None]],
    current: int,
    now_label: str,
    unit: str,
    unit_bytes: int,
    size: Callable[[int], str],
    x_label: Callable[[int], str],
    text: Text,
    capacity_bytes: int | None = None,
    clip_at: int | None = None,
    shade_from: int | None = None,
) -> SweepChart:
    """The stack of `breakdowns` (one per value, categories bottom to top in the table's order) over `values`.

    `values` are increasing and include `current`. The y axis runs to the larger of the highest total
    and the capacity, but not beyond `clip_at` (the stack is clipped there).
    """
    if len(values) < 2 or len(values) != len(breakdowns):
        raise ValueError("a sweep has at least two values and one breakdown per value")
    totals = [_total(b) for b in breakdowns]
    highest = max(totals)
    shown = min(highest, clip_at) if clip_at else highest
    axis = value_axis(max(shown, capacity_bytes or 0), unit=unit, unit_bytes=unit_bytes)
    left, right, top, bottom = axis.left, float(WIDTH - RIGHT_GAP), TOP, float(HEIGHT - BOTTOM_GAP)

    def y_of(value: int) -> float:
        return rounded(bottom - (bottom - top) * value / axis.scale_bytes)

    x_of = log_scale(values[0], values[-1], left, right)
    xs = tuple(x_of(value) for value in values)
    current_total = totals[values.index(current)]
    current_y = y_of(current_total)
    capacity = _capacity_line(capacity_bytes, y_of, size, left=left, right=right, current_bytes=current_total,
                              current_x=x_of(current))
    taken = [capacity.box] if capacity else []
    bands = _stack(breakdowns, xs, y_of, top=top, bottom=bottom, left=left, right=right, taken=taken)
    return SweepChart(
        id=chart_id, width=WIDTH, height=HEIGHT, left=left, top=top, right=right, bottom=bottom,
        tick_label_x=rounded(left - PAD), x_label_y=rounded(bottom + BOTTOM_GAP - PAD - 1), line_label_x=right,
        now_label_y=NOW_LABEL_Y,
        ticks=axis.ticks(y_of),
        x_ticks=x_ticks(values[0], values[-1], x_of, x_label),
        bands=bands,
        total=points_attr(xs, [y_of(total) for total in totals]),
        lines=(),
        capacity=capacity,
        now=_now(x_of(current), now_label, current_y if current_y >= top else None, left=left),
        shade_x=_shade_x(shade_from, values, x_of),
        clipped=highest > axis.scale_bytes,
        title=text.title, desc=text.desc, head=text.head, rows=text.rows,
    )


def _total(breakdown: Mapping[str, int | None]) -> int:
    return sum(breakdown[c] or 0 for c in core.CATEGORIES)


def _shade_x(shade_from: int | None, values: Sequence[int], x_of: Callable[[int], float]) -> float | None:
    """Where the shading starts, when it starts inside the swept range."""
    return x_of(shade_from) if shade_from is not None and values[0] < shade_from < values[-1] else None


def _capacity_line(capacity_bytes: int | None, y_of: Callable[[int], float], size: Callable[[int], str], *,
                   left: float, right: float, current_bytes: int, current_x: float) -> CapacityMark | None:
    """The capacity's line, red when the current setup passes it, its label away from the current value; None
    without a capacity."""
    if not capacity_bytes:
        return None
    return _capacity(y_of(capacity_bytes), f"capacity {size(capacity_bytes)}", left=left, right=right,
                     over=current_bytes > capacity_bytes, on_right=current_x < (left + right) / 2)


def _stack(breakdowns: Sequence[Mapping[str, int | None]], xs: tuple[float, ...], y_of: Callable[[int], float], *,
           top: float, bottom: float, left: float, right: float, taken: list[Box]) -> tuple[Band, ...]:
    """Each category as the area under its cumulative top, painted from the top down; its letter where it is
    thickest inside the plot, clear of the labels in `taken` (which each letter joins)."""
    below = [0] * len(breakdowns)
    bands = []
    for category in core.CATEGORIES:
        amounts = [b[category] or 0 for b in breakdowns]
        if not any(amounts):
            continue
        above = [low + amount for low, amount in zip(below, amounts, strict=True)]
        tops = [y_of(value) for value in above]
        outline = points_attr(xs, tops) + f" {num(xs[-1])},{num(bottom)} {num(xs[0])},{num(bottom)}"
        lows = [min(y_of(low), bottom) for low in below]
        highs = [max(high, top) for high in tops]
        spot = letter_spot(range(len(xs)), xs, lows, highs, left=left, right=right, taken=taken)
        entry = core.CATEGORY_TABLE[category]
        bands.append(Band(category, outline, entry.short, entry.label, *spot))
        below = above
    return tuple(reversed(bands))


def lines_chart(
    *,
    chart_id: str,
    values: Sequence[int],
    lines: Sequence[tuple[str, str, Sequence[int]]],
    current: int,
    current_bytes: int,
    now_label: str,
    unit: str,
    unit_bytes: int,
    size: Callable[[int], str],
    x_label: Callable[[int], str],
    text: Text,
    capacity_bytes: int | None = None,
) -> SweepChart:
    """One polyline per (key, label, bytes per value) over `values`, labelled at the right end.

    The current setup is the point (`current`, `current_bytes`); `current` need not be one of `values`.
    """
    _check_lines(values, lines)
    highest = max(max(series) for _, _, series in lines)
    axis = value_axis(max(highest, capacity_bytes or 0), unit=unit, unit_bytes=unit_bytes)
    label_room = max(text_width(label) for _, label, _ in lines) * BOLD_CAPITALS + 2 * PAD
    left, right, top, bottom = axis.left, rounded(WIDTH - label_room), TOP, float(HEIGHT - BOTTOM_GAP)

    def y_of(value: int) -> float:
        return rounded(bottom - (bottom - top) * value / axis.scale_bytes)

    x_of = log_scale(values[0], values[-1], left, right)
    xs = tuple(x_of(value) for value in values)
    label_ys = spread([y_of(series[-1]) + FONT / 3 for _, _, series in lines], low=top + FONT, high=bottom + FONT / 3)
    drawn = tuple(Line(key, label, points_attr(xs, [y_of(v) for v in series]), y)
                  for (key, label, series), y in zip(lines, label_ys, strict=True))
    capacity = _capacity_line(capacity_bytes, y_of, size, left=left, right=right, current_bytes=current_bytes,
                              current_x=x_of(current))
    notes = tuple(_coincide(group) for group in coinciding(lines))
    return SweepChart(
        id=chart_id, width=WIDTH, height=HEIGHT, left=left, top=top, right=right, bottom=bottom,
        tick_label_x=rounded(left - PAD), x_label_y=rounded(bottom + BOTTOM_GAP - PAD - 1),
        line_label_x=rounded(right + PAD), now_label_y=NOW_LABEL_Y,
        ticks=axis.ticks(y_of),
        x_ticks=x_ticks(values[0], values[-1], x_of, x_label),
        bands=(),
        total=None,
        lines=drawn,
        capacity=capacity,
        now=_now(x_of(current), now_label, y_of(current_bytes), left=left),
        shade_x=None,
        clipped=False,
        title=text.title, desc=" ".join((text.desc, *notes)), head=text.head, rows=text.rows, notes=notes,
    )


def _check_lines(values: Sequence[int], lines: Sequence[tuple[str, str, Sequence[int]]]) -> None:
    if len(values) < 2 or not lines or any(len(series) != len(values) for _, _, series in lines):
        raise ValueError("a sweep has at least two values, and each line one number per value")


def coinciding(lines: Sequence[tuple[str, str, Sequence[int]]]) -> tuple[tuple[str, ...], ...]:
    """The labels of lines equal at every value, in groups of two or more (one drawn line hides the others)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for _, label, series in lines:
        groups.setdefault(tuple(series), []).append(label)
    return tuple(tuple(labels) for labels in groups.values() if len(labels) > 1)


def _coincide(labels: Sequence[str]) -> str:
    names = f"{', '.join(labels[:-1])} and {labels[-1]}"
    others = "the others" if len(labels) > 2 else "the other"
    return f"{names} coincide: their peaks are equal at every point, so one line hides {others}."


def spread(ys: Sequence[float], *, low: float, high: float, gap: float = LINE_LABEL_SPACING) -> tuple[float, ...]:
    """Label baselines as near `ys` as they can be, at least `gap` apart, within [low, high] where room allows.

    Sorted top to bottom, each is pushed below the one above it; if the last then runs past `high`, all
    move up together, and each is pulled above the one below it.
    """
    order = sorted(range(len(ys)), key=lambda index: ys[index])
    placed = [max(ys[index], low) for index in order]
    for k in range(1, len(placed)):
        placed[k] = max(placed[k], placed[k - 1] + gap)
    if placed and placed[-1] > high:
        placed[-1] = high
        for k in range(len(placed) - 2, -1, -1):
            placed[k] = min(placed[k], placed[k + 1] - gap)
    out = [0.0] * len(ys)
    for index, y in zip(order, placed, strict=True):
        out[index] = rounded(y)
    return tuple(out)
