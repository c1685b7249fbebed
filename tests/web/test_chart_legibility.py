"""The charts read on a phone: text at least 12 px at 390 px wide, no label over another, every band named, and
lines that coincide said in words."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from app.web import chart, sweep_chart
from app.web.sweep_chart import Text, coinciding, lines_chart

GIB = 1 << 30
TEXT = Text("title", "desc", ("GPUs", "a", "b"), ())
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1366, "height": 900}
SETUPS = [
    "/",
    "/?optimizer=sgd",  # ZeRO-1 and ZeRO-2 coincide
    "/?preset=gpt2",
    "/?seq_len=32768&attention=eager",
    "/?data=8&zero_stage=1",
    "/?gpu=",  # no capacity line
    "/?preset=mixtral-8x7b&seq_len=4096&gpu=h100-80gb",
    "/?preset=llama-3-70b&data=64&zero_stage=3&micro_batch_size=8",
    "/?finetuning=qlora&unit=GB",
]


def test_lines_equal_at_every_point_are_said_to_coincide():
    lines = [("zero-0", "ZeRO-0", [40 * GIB] * 3), ("zero-1", "ZeRO-1", [30 * GIB, 20 * GIB, 15 * GIB]),
             ("zero-2", "ZeRO-2", [30 * GIB, 20 * GIB, 15 * GIB]), ("zero-3", "ZeRO-3", [30 * GIB, 18 * GIB, 9 * GIB])]
    assert coinciding(lines) == (("ZeRO-1", "ZeRO-2"),)
    drawn = lines_chart(chart_id="d", values=(1, 2, 4), lines=lines, current=1, current_bytes=40 * GIB,
                        now_label="now: 1", unit="GiB", unit_bytes=GIB, size=str, x_label=str, text=TEXT)
    assert drawn.notes == ("ZeRO-1 and ZeRO-2 coincide: their peaks are equal at every point, so one line hides "
                           "the other.",)
    assert drawn.desc.endswith(drawn.notes[0])
    # Equal at two points of three is not coinciding.
    assert coinciding([("a", "A", [1, 2, 3]), ("b", "B", [1, 2, 4])]) == ()


def test_line_labels_are_a_text_box_apart():
    # Two labels' boxes (TEXT_ASCENT above the baseline, TEXT_DESCENT below) do not meet.
    assert sweep_chart.LINE_LABEL_SPACING > chart.TEXT_ASCENT + chart.TEXT_DESCENT


def test_the_font_is_at_least_12_px_wherever_the_chart_is_at_least_its_width():
    # The viewBox is as wide as the chart is drawn on a 390 px phone (332 px) or narrower, so a unit is >= 1 px.
    assert chart.WIDTH <= 332 and chart.FONT >= 12
    assert sweep_chart.WIDTH == chart.WIDTH


# In the browser: each chart's text, its rendered size in px, and its box on the screen.
CHARTS = """() => [...document.querySelectorAll('svg.chart')].map(svg => {
  const figure = svg.closest('figure');
  const frame = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll('text')].map(t => {
    const b = t.getBoundingClientRect();
    return {text: t.textContent, px: parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a,
            x0: b.left, y0: b.top, x1: b.right, y1: b.bottom};
  });
  return {
    id: figure.id,
    frame: {x0: frame.left, y0: frame.top, x1: frame.right, y1: frame.bottom},
    texts,
    bands: [...svg.querySelectorAll('polygon.band')].map(p => [...p.classList].find(c => c.startsWith('seg-'))),
    key: [...figure.querySelectorAll('.chart-key .swatch')].map(s => [...s.classList].find(c => c.startsWith('seg-'))),
    letters: [...svg.querySelectorAll('text.band-letter')].map(t => t.textContent),
    series: [...svg.querySelectorAll('polyline.series')].map(p => [p.getAttribute('points'),
             svg.querySelector('text.series-label.' + p.classList[1]).textContent]),
    notes: [...figure.querySelectorAll('p.note')].map(p => p.textContent),
  };
})"""


def _overlapping(texts: list[dict]) -> list[tuple[str, str]]:
    return [(a["text"], b["text"]) for i, a in enumerate(texts) for b in texts[i + 1:]
            if a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]]


@pytest.mark.browser
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_every_chart_is_legible(watched: Page, base_url: str, setup: str, viewport: dict):
    page = watched
    page.set_viewport_size(viewport)  # type: ignore[arg-type]
    page.goto(base_url + setup)
    charts = page.evaluate(CHARTS)
    assert {c["id"] for c in charts} >= {"timeline", "seq-chart", "data-chart"}
    for c in charts:
        where = f"{c['id']} at {viewport['width']} px, {setup}"
        small = [(t["text"], round(t["px"], 2)) for t in c["texts"] if t["px"] < 12]
        assert not small, f"text under 12 px in {where}: {small}"
        assert _overlapping(c["texts"]) == [], f"labels over one another in {where}"
        frame = c["frame"]
        outside = [t["text"] for t in c["texts"] if t["x0"] < frame["x0"] - 0.5 or t["x1"] > frame["x1"] + 0.5
                   or t["y0"] < frame["y0"] - 0.5 or t["y1"] > frame["y1"] + 0.5]
        assert not outside, f"labels outside the chart in {where}"
        assert sorted(set(c["bands"])) == sorted(c["key"]), f"a band missing from the key in {where}"
        shown: dict[str, list[str]] = {}
        for points, label in c["series"]:
            shown.setdefault(points, []).append(label)
        for labels in (labels for labels in shown.values() if len(labels) > 1):
            said = f"{', '.join(labels[:-1])} and {labels[-1]} coincide"
            assert any(note.startswith(said) for note in c["notes"]), f"{said} unsaid in {where}"
