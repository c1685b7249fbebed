"""A timeline chart as a small standalone SVG: trainmem's predicted line against the measured points.

Drawn with string formatting only. The x axis is the step's events in order (both steps), the y
axis GiB. Measured: a dot per event at the most memory its interval held (the compared value), and
a faint line through the memory alive when each event ended. Predicted: a line through the events
trainmem lists (it leaves out the layers between the first and the last, where memory changes
monotonically). The peak of each is marked.
"""

from __future__ import annotations

from html import escape

from validation.peak import PeakRow

WIDTH, HEIGHT = 760, 320
LEFT, RIGHT, TOP, BOTTOM = 58, 16, 36, 58
GIB = 2**30
PREDICTED = "#d9480f"
MEASURED = "#1864ab"
LIVE = "#a5d8ff"


def _ticks(top: float) -> list[float]:
    """Round GiB steps from 0 to at least `top`."""
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 500):
        if top / step <= 8:
            return [step * k for k in range(int(top // step) + 2)]
    return [0.0, top]


def chart(row: PeakRow) -> str:
    events = row.events
    count = len(events)
    top = max(max(e.measured_peak for e in events), max(e.predicted or 0 for e in events)) / GIB
    ticks = _ticks(top)
    y_max = ticks[-1] if ticks[-1] > 0 else 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: int) -> float:
        return LEFT + plot_w * (index + 0.5) / count

    def y(value: int) -> float:
        return TOP + plot_h * (1 - value / GIB / y_max)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'font-family="sans-serif" font-size="11">',
        f"<title>{escape(row.label)}: predicted and measured memory through two training steps</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{escape(row.label)}</text>',
    ]
    for tick in ticks:
        ty = TOP + plot_h * (1 - tick / y_max)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}" stroke="#e9ecef"/>')
        out.append(f'<text x="{LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">{tick:g}</text>')
    out.append(f'<text x="14" y="{TOP + plot_h / 2:.0f}" transform="rotate(-90 14 {TOP + plot_h / 2:.0f})" '
               'text-anchor="middle">GiB</text>')
    # Steps and phases along the x axis.
    step_two = next((i for i, e in enumerate(events) if e.step == 2), count)
    boundary = LEFT + plot_w * step_two / count
    out.append(f'<line x1="{boundary:.1f}" x2="{boundary:.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#868e96" '
               'stroke-dasharray="4 3"/>')
    for step, (start, end) in {1: (0, step_two), 2: (step_two, count)}.items():
        mid = LEFT + plot_w * (start + end) / 2 / count
        out.append(f'<text x="{mid:.1f}" y="{HEIGHT - 30}" text-anchor="middle">step {step}</text>')
    for index, event in enumerate(events):
        name = event.event.rsplit(": ", 1)[-1] if event.event.startswith("micro-batch") else event.event
        if name in ("step start", "forward: loss", "optimizer.step"):
            label = {"step start": "start", "forward: loss": "loss", "optimizer.step": "opt"}[name]
            out.append(f'<line x1="{x(index):.1f}" x2="{x(index):.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}" '
                       'stroke="#495057"/>')
            out.append(f'<text x="{x(index):.1f}" y="{TOP + plot_h + 15}" text-anchor="middle" '
                       f'font-size="9">{label}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#495057"/>')
    # Measured: live line, then the compared values as dots.
    live = " ".join(f"{x(i):.1f},{y(e.measured_live):.1f}" for i, e in enumerate(events))
    out.append(f'<polyline points="{live}" fill="none" stroke="{LIVE}" stroke-width="1"/>')
    for index, event in enumerate(events):
        out.append(f'<circle cx="{x(index):.1f}" cy="{y(event.measured):.1f}" r="2.2" fill="{MEASURED}">'
                   f"<title>step {event.step} {escape(event.event)}: measured {event.measured:,} B</title></circle>")
    # Predicted: a line through the events trainmem lists.
    listed = [(i, e) for i, e in enumerate(events) if e.predicted is not None]
    line = " ".join(f"{x(i):.1f},{y(e.predicted):.1f}" for i, e in listed)
    out.append(f'<polyline points="{line}" fill="none" stroke="{PREDICTED}" stroke-width="1.5"/>')
    # The two peaks.
    for value, event_name, step, color, dy in (
        (row.measured, row.measured_event, row.measured_step, MEASURED, -8),
        (row.predicted, row.predicted_event, row.predicted_step, PREDICTED, -20),
    ):
        index = next(i for i, e in enumerate(events) if e.event == event_name and e.step == step)
        out.append(f'<circle cx="{x(index):.1f}" cy="{y(value):.1f}" r="5" fill="none" stroke="{color}" '
                   'stroke-width="1.5"/>')
        anchor = "end" if x(index) > LEFT + plot_w * 0.6 else "start"
        shift = -8 if anchor == "end" else 8
        out.append(f'<text x="{x(index) + shift:.1f}" y="{y(value) + dy:.1f}" text-anchor="{anchor}" fill="{color}">'
                   f"{value / GIB:,.2f} GiB</text>")
    # Legend.
    legend_y = HEIGHT - 12
    out += [
        f'<line x1="{LEFT}" x2="{LEFT + 22}" y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{PREDICTED}" '
        'stroke-width="1.5"/>',
        f'<text x="{LEFT + 28}" y="{legend_y}">trainmem (predicted)</text>',
        f'<circle cx="{LEFT + 170}" cy="{legend_y - 4}" r="2.2" fill="{MEASURED}"/>',
        f'<text x="{LEFT + 178}" y="{legend_y}">measured, most in the event</text>',
        f'<line x1="{LEFT + 350}" x2="{LEFT + 372}" y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{LIVE}"/>',
        f'<text x="{LEFT + 378}" y="{legend_y}">measured, alive when it ends</text>',
        f'<text x="{WIDTH - RIGHT}" y="{legend_y}" text-anchor="end">peak error {row.error_pct:+.4f}%</text>',
        "</svg>",
    ]
    return "\n".join(out) + "\n"
