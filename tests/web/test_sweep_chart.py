"""The sweep charts' geometry, checked against coordinates worked out by hand for small sweeps."""

from __future__ import annotations

from typing import Any

import pytest

from app import core
from app.web import sweep_chart
from app.web.chart import CHAR_WIDTH, PAD
from app.web.sweep_chart import Text, lines_chart, log_scale, spread, stacked_chart, x_ticks

GIB = 1 << 30
TEXT = Text("title", "desc", ("a", "b"), ())


def _size(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


def test_the_log_scale_puts_each_doubling_the_same_distance_apart():
    x_of = log_scale(256, 4096, 40, 360)  # four doublings over 320 units: 80 each
    assert [x_of(v) for v in (256, 512, 1024, 2048, 4096)] == [40, 120, 200, 280, 360]
    assert x_of(362) == pytest.approx(80, abs=0.1)  # half a doubling: 256 × √2


def test_x_labels_thin_out_until_they_do_not_overlap_and_stay_over_the_axis():
    x_of = log_scale(1, 1024, 40, 390)  # ten doublings over 350 units: 35 each
    ticks = x_ticks(1, 1024, x_of, lambda v: f"{v:,}")
    # At every power of two, "512" (3 × 7.8 wide, centred at 355: 343.3 to 366.7) would run into "1,024"
    # (5 × 7.8 = 39 wide, ending at 390: from 351): every second power of two.
    assert 3 * CHAR_WIDTH / 2 + 355 + 2 * PAD > 390 - 5 * CHAR_WIDTH
    assert [t.label for t in ticks] == ["1", "4", "16", "64", "256", "1,024"]
    assert ticks[-1].anchor == "end"  # centred at 390 it would run past the end of the axis
    assert ticks[0].anchor == "start"  # centred at 40 it would run into the value labels left of the axis
    assert ticks[1].anchor == "middle"


# Four lengths, in GiB: weights 10 throughout, activations 1, 2, 4, 8: totals 11, 12, 14, 18.
VALUES = (256, 512, 1024, 2048)
BREAKDOWNS = tuple(core.Breakdown({"weights": 10 * GIB, "activations": a * GIB}) for a in (1, 2, 4, 8))


def _stack(**kwargs: Any) -> sweep_chart.SweepChart:
    defaults: dict[str, Any] = dict(chart_id="t", values=VALUES, breakdowns=BREAKDOWNS, current=512,
                                    now_label="now: 512", unit="GiB", unit_bytes=GIB, size=_size, x_label=str,
                                    text=TEXT)
    return stacked_chart(**(defaults | kwargs))


def test_the_stack_runs_to_the_capacity_or_the_highest_total():
    drawn = _stack(capacity_bytes=16 * GIB)
    # max(18, 16) = 18 GiB: steps of 5 GiB (4 × 2 = 8 falls short), up to 20 GiB.
    assert [t.label for t in drawn.ticks] == ["0 GiB", "5 GiB", "10 GiB", "15 GiB", "20 GiB"]
    top, bottom = sweep_chart.TOP, sweep_chart.HEIGHT - sweep_chart.BOTTOM_GAP  # 24, 200
    assert (drawn.top, drawn.bottom) == (top, bottom) == (24, 200)
    # y = 200 - 176 × bytes / 20 GiB: totals 11, 12, 14, 18 → 103.2, 94.4, 76.8, 41.6; capacity 16 → 59.2.
    assert drawn.total is not None and drawn.capacity is not None
    ys = [float(point.split(",")[1]) for point in drawn.total.split()]
    assert ys == [103.2, 94.4, 76.8, 41.6]
    assert drawn.capacity.y == 59.2 and not drawn.capacity.over  # 12 GiB now, below 16
    # Painted top first: activations over weights; weights' top is y(10 GiB) = 112 all along.
    assert [band.category for band in drawn.bands] == ["activations", "weights"]
    weights = drawn.bands[1].points.split()
    assert [float(p.split(",")[1]) for p in weights[:4]] == [112, 112, 112, 112]
    assert not drawn.clipped and drawn.shade_x is None


def test_the_current_value_is_marked_on_the_curve_and_the_capacity_label_keeps_away_from_it():
    drawn = _stack(capacity_bytes=16 * GIB)
    x_of = log_scale(256, 2048, drawn.left, drawn.right)
    assert drawn.now is not None and drawn.capacity is not None
    assert drawn.now.x == x_of(512) and drawn.now.point_y == 94.4 and drawn.now.label == "now: 512"
    # The marker is left of the middle: the capacity's label goes to the right end.
    assert drawn.capacity.anchor == "end" and drawn.capacity.label_x == drawn.right - PAD
    later = _stack(current=2048, capacity_bytes=16 * GIB).capacity
    assert later is not None and later.anchor == "start"


def test_a_stack_far_above_the_capacity_is_clipped_and_the_range_beyond_the_model_shaded():
    drawn = _stack(clip_at=12 * GIB, shade_from=1024)
    # Up to 12 GiB: steps of 5 (2 × 4 = 8 < 12), so the axis ends at 15 GiB and the 18 GiB total is cut off.
    assert drawn.ticks[-1].label == "15 GiB" and drawn.clipped
    assert drawn.shade_x == log_scale(256, 2048, drawn.left, drawn.right)(1024)
    assert drawn.shade_width == round(drawn.right - drawn.shade_x, 1)
    assert _stack(shade_from=4096).shade_x is None  # beyond the sweep: nothing to shade


def test_labels_at_the_end_of_lines_move_apart_but_stay_in_the_plot():
    assert spread([50, 52, 120], low=30, high=205, gap=13) == (50, 63, 120)
    # Two at the bottom: pushed down past the limit, then back up together.
    assert spread([200, 201], low=30, high=205, gap=13) == (192, 205)
    # The order of the input is kept.
    assert spread([120, 50], low=30, high=205, gap=13) == (120, 50)


def test_a_chart_of_lines_has_room_for_their_labels_and_marks_the_current_point():
    values = (1, 2, 4, 8)
    drawn = lines_chart(chart_id="d", values=values, lines=[("zero-0", "ZeRO-0", [40 * GIB] * 4),
                                                             ("zero-3", "ZeRO-3", [40 * GIB, 25 * GIB, 18 * GIB, 14 * GIB])],
                        current=2, current_bytes=25 * GIB, now_label="now: 2", unit="GiB", unit_bytes=GIB, size=_size,
                        x_label=str, text=TEXT, capacity_bytes=30 * GIB)
    assert drawn.now is not None and drawn.capacity is not None
    room = 6 * CHAR_WIDTH * sweep_chart.BOLD_CAPITALS + 2 * PAD
    assert drawn.right == round(sweep_chart.WIDTH - room, 1) and drawn.line_label_x == round(drawn.right + PAD, 1)
    # Up to 40 GiB in steps of 10: y = 200 - 176 × bytes / 40 GiB; 25 GiB → 90.
    assert drawn.now.point_y == 90 and drawn.now.x == log_scale(1, 8, drawn.left, drawn.right)(2)
    assert [line.label for line in drawn.lines] == ["ZeRO-0", "ZeRO-3"]
    assert drawn.lines[0].points.endswith(",24")  # 40 GiB is the top gridline
    assert drawn.capacity.y == 68 and not drawn.capacity.over
    with pytest.raises(ValueError):
        lines_chart(chart_id="d", values=values, lines=[("a", "A", [1, 2])], current=1, current_bytes=1, now_label="",
                    unit="GiB", unit_bytes=GIB, size=_size, x_label=str, text=TEXT)
