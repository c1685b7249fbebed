"""The timeline chart's geometry, checked against coordinates worked out by hand for a small timeline."""

from __future__ import annotations

import re

import pytest

from app import core
from app.web import chart
from app.web.chart import nice_step, timeline_chart

GIB = 1 << 30


def _size(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def _point(event: str, step: int, **gib: int) -> core.Point:
    breakdown = core.Breakdown({category: amount * GIB for category, amount in gib.items()})
    return core.Point(event, step, breakdown.total_bytes, breakdown)


# Six events of two steps, in GiB: 10, 30, 40 | 35, 60, 60. The first 60 is the peak (the core's rule:
# the first of equal maxima). No gradients and no master weights, so those two bands are left out.
POINTS = (
    _point("step start", 1, weights=10),
    _point("forward: layer 1", 1, weights=10, activations=20),
    _point("optimizer.step", 1, weights=10, optimizer_states=25, temporary=5),
    _point("step start", 2, weights=10, optimizer_states=25),
    _point("backward: loss gradients", 2, weights=10, optimizer_states=25, activations=20, temporary=5),
    _point("optimizer.step", 2, weights=10, optimizer_states=25, temporary=25),
)
CAPACITY = 80 * GIB


@pytest.fixture(scope="module")
def drawn() -> chart.Chart:
    return timeline_chart(POINTS, unit="GiB", unit_bytes=GIB, size=_size, capacity_bytes=CAPACITY)


def test_nice_steps_are_1_2_5_times_a_power_of_ten():
    assert nice_step(80) == 20  # 10 × 4 = 40 falls short of 80; 20 × 4 covers it
    assert nice_step(151.06) == 50  # 20 × 4 = 80 < 151.06 <= 50 × 4
    assert nice_step(2.4) == 1
    assert nice_step(0.9) == 0.5


def test_axis_runs_to_the_capacity_in_steps_of_20_gib(drawn):
    # max(peak 60, capacity 80) = 80 GiB → step 20 → five gridlines, 0 to 80 GiB.
    assert [tick.label for tick in drawn.ticks] == ["0 GiB", "20 GiB", "40 GiB", "60 GiB", "80 GiB"]
    bottom, top = chart.HEIGHT - chart.BOTTOM_GAP, chart.TOP
    assert (drawn.bottom, drawn.top) == (bottom, top) == (210, 40)
    # Gridlines every 170 / 4 = 42.5 units from the bottom.
    assert [tick.y for tick in drawn.ticks] == [210.0, 167.5, 125.0, 82.5, 40.0]
    # The widest tick label, "80 GiB", sets the left margin: 6 characters and a pad either side.
    assert drawn.left == pytest.approx(6 * chart.CHAR_WIDTH + 2 * chart.PAD, abs=0.05)


def test_one_x_per_event_evenly_spaced(drawn):
    assert len(drawn.xs) == len(drawn.ys) == len(POINTS) == 6
    assert len(drawn.line.split()) == 6
    assert drawn.xs[0] == drawn.left and drawn.xs[-1] == drawn.right == 312
    spacing = (drawn.right - drawn.left) / 5
    for index, x in enumerate(drawn.xs):
        assert x == pytest.approx(drawn.left + index * spacing, abs=0.05)


def test_totals_and_the_peak_marker(drawn):
    # y = 210 - 170 × GiB / 80: 10 → 188.75, 30 → 146.25, 40 → 125, 35 → 135.625, 60 → 82.5.
    assert drawn.ys == pytest.approx((188.8, 146.2, 125.0, 135.6, 82.5, 82.5), abs=0.051)
    peak = drawn.peak
    assert peak.index == 4  # the first of the two 60 GiB points
    assert (peak.x, peak.y) == (drawn.xs[4], 82.5)
    assert peak.y == min(drawn.ys)  # nothing is drawn above it
    assert peak.text == "peak: 60.00 GiB at backward: loss gradients, step 2"
    assert peak.lines == ("peak: 60.00 GiB", "at backward: loss gradients, step 2")
    # The longer line is 35 characters: the label is centred on the marker unless that would leave the box.
    width = 35 * chart.CHAR_WIDTH
    assert peak.label_x == pytest.approx(min(peak.x - width / 2, chart.WIDTH - chart.PAD - width), abs=0.05)
    assert 0 <= peak.label_x and peak.label_x + width <= chart.WIDTH
    assert peak.leader_top < peak.leader_bottom < peak.y


def test_capacity_line_and_its_label(drawn):
    capacity = drawn.capacity
    assert capacity is not None and not capacity.over
    assert capacity.y == 40.0  # 80 GiB is the top of the axis
    assert capacity.label == "capacity 80.00 GiB"
    # The peak is in the right half, so the label starts at the left; no room above the line, so below it.
    assert (capacity.anchor, capacity.label_x) == ("start", pytest.approx(drawn.left + chart.PAD, abs=0.05))
    assert capacity.label_y == 40 + chart.FONT + 2


def test_capacity_below_the_peak_is_marked_over():
    drawn = timeline_chart(POINTS, unit="GiB", unit_bytes=GIB, size=_size, capacity_bytes=50 * GIB)
    assert drawn.capacity is not None and drawn.capacity.over
    # Axis to 60 GiB in steps of 20: y = 210 - 170 × 50 / 60 = 68.33.
    assert drawn.capacity.y == 68.3


def test_no_gpu_no_capacity_line():
    drawn = timeline_chart(POINTS, unit="GiB", unit_bytes=GIB, size=_size)
    assert drawn.capacity is None
    assert drawn.ticks[-1].label == "60 GiB" and drawn.ticks[-1].y == drawn.peak.y == 40.0


def test_bands_stack_in_table_order_and_are_painted_from_the_top(drawn):
    assert [band.category for band in drawn.bands] == ["temporary", "activations", "optimizer_states", "weights"]
    for band in drawn.bands:
        assert len(band.points.split()) == len(POINTS) + 2  # the top edge, then back along the baseline
    # The top band's edge is the total; the weights band's edge is 10 GiB throughout (y 188.75).
    temporary_edge = [float(pair.split(",")[1]) for pair in drawn.bands[0].points.split()[:6]]
    assert temporary_edge == list(drawn.ys)
    weights_edge = {pair.split(",")[1] for pair in drawn.bands[-1].points.split()[:6]}
    assert weights_edge == {"188.8"}


def test_band_letters_avoid_the_peak_column(drawn):
    letters = {band.category: band for band in drawn.bands}
    # Temporary is thickest (25 GiB) in the last column; optimizer state is 25 GiB from index 2 on.
    assert letters["temporary"].letter == "T" and letters["temporary"].letter_x == pytest.approx(
        drawn.right - chart.LETTER_WIDTH / 2, abs=0.1)
    assert letters["activations"].letter_x == drawn.xs[1]  # index 4 is the peak's column
    for band in drawn.bands:
        assert band.letter_x != drawn.peak.x


def test_steps_have_a_divider_between_them(drawn):
    first, second = drawn.steps
    assert (first.step, second.step) == (1, 2)
    assert first.divider_x is None
    assert second.divider_x == pytest.approx((drawn.xs[2] + drawn.xs[3]) / 2, abs=0.05)
    assert first.label_x == pytest.approx((drawn.xs[0] + drawn.xs[2]) / 2, abs=0.05)


def test_rows_are_the_text_alternative(drawn):
    assert [(row.event, row.step) for row in drawn.rows] == [(point.event, point.step) for point in POINTS]
    assert [row.peak for row in drawn.rows] == [False, False, False, False, True, False]
    assert drawn.rows[4].size == "60.00 GiB" and drawn.rows[4].exact == f"{60 * GIB:,} bytes"
    assert "a peak of 60.00 GiB at backward: loss gradients in step 2" in drawn.desc
    assert drawn.title == "Memory alive per GPU through two training steps"


def test_coordinates_have_at_most_one_decimal(drawn):
    text = " ".join([drawn.line, *(band.points for band in drawn.bands)])
    assert not re.search(r"\.\d\d", text)


def test_every_coordinate_stays_inside_the_box():
    # A real timeline: Llama-3-8B on one H100 with eager attention at a long sequence (a high peak).
    training = core.Training(seq_len=8192, attention="eager")
    result = core.estimate(architecture=core.get_preset("llama-3-8b").architecture, training=training)
    drawn = timeline_chart(result.timeline, unit="GB", unit_bytes=10**9, size=_size, capacity_bytes=85 * 10**9)
    assert len(drawn.xs) == len(result.timeline)
    assert drawn.rows[drawn.peak.index].event == result.peak.event
    assert result.timeline[drawn.peak.index].step == result.peak.step
    for x, y in zip(drawn.xs, drawn.ys, strict=True):
        assert 0 <= x <= chart.WIDTH and drawn.top <= y <= drawn.bottom


def test_empty_timeline_is_refused():
    with pytest.raises(ValueError):
        timeline_chart((), unit="GiB", unit_bytes=GIB, size=_size)


def test_the_allocators_reserve_is_a_line_above_the_tensors():
    # Reserved 12, 40, 45, 45, 90, 90 GiB: the axis grows to the reserve's 90 (four ticks of 25 cover it), and each
    # point of the dashed line sits at its own height on that axis.
    reserved = [gib * GIB for gib in (12, 40, 45, 45, 90, 90)]
    drawn = timeline_chart(POINTS, unit="GiB", unit_bytes=GIB, size=_size, capacity_bytes=CAPACITY, reserved=reserved)
    plain = timeline_chart(POINTS, unit="GiB", unit_bytes=GIB, size=_size, capacity_bytes=CAPACITY)
    assert plain.reserved_line == "" and all(row.reserved is None for row in plain.rows)
    pairs = [tuple(map(float, pair.split(","))) for pair in drawn.reserved_line.split()]
    assert [x for x, _ in pairs] == list(drawn.xs)
    height = drawn.bottom - drawn.top
    top_of_axis = max(float(t.label.split()[0]) for t in drawn.ticks) * GIB
    assert top_of_axis >= 90 * GIB
    for (_, y), value in zip(pairs, reserved, strict=True):
        assert y == pytest.approx(drawn.bottom - height * value / top_of_axis, abs=0.01)
    assert all(y_reserved <= y_total for (_, y_reserved), y_total in zip(pairs, drawn.ys, strict=True))
    assert [row.reserved for row in drawn.rows] == [_size(value) for value in reserved]
