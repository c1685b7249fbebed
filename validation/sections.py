"""One section of docs/VALIDATION.md, written by the module that measures it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPORT = Path(__file__).resolve().parent.parent / "docs" / "VALIDATION.md"


def write_section(lines: list[str], path: Path = REPORT) -> None:
    """Replace the section whose heading is ``lines[0]`` (up to the next ``## `` heading), or append it."""
    heading = lines[0]
    text = path.read_text(encoding="utf-8").splitlines()
    if heading in text:
        start = text.index(heading)
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text[start:end] = lines
    else:
        text += ["", *lines]
    path.write_text("\n".join(text).rstrip() + "\n", encoding="utf-8")


def peak_table(rows: Iterable[Any]) -> list[str]:
    """Two-step peaks (validation.peak's rows) as a table: predicted against measured, the error and each one's
    event."""
    return ["| case | predicted peak B | measured peak B | error | event (predicted / measured) |",
            "| --- | ---: | ---: | ---: | --- |",
            *(f"| {row.label} | {row.predicted:,} | {row.measured:,} | {row.error_pct:+.4f}% | {row.predicted_event}, "
              f"step {row.predicted_step} / {row.measured_event}, step {row.measured_step} |" for row in rows)]


def compared(cases: Iterable[Any], measure: Callable[[Any], Any], predict: Callable[[Any], Any]) -> list[tuple]:
    """(case, measured, predicted) for each case, a line printed for each."""
    rows = [(case, measure(case), predict(case)) for case in cases]
    for case, measured, predicted in rows:
        print(f"{'ok  ' if measured == predicted else 'DIFF'} {case.label}: {measured} / {predicted}")
    return rows


def run_peaks(cases: Iterable[Any]) -> list[Any]:
    """The timeline harness's two-step peak of each case (validation.peak.run), a line printed for each."""
    from validation import peak

    rows = [peak.run(case) for case in cases]
    for row in rows:
        print(f"peak {row.label}: predicted {row.predicted:,} measured {row.measured:,} ({row.error_pct:+.4f}%)")
    return rows


def run_module(argv: list[str] | None, cases: Iterable[Any], measure: Callable[[Any], Any],
               predict: Callable[[Any], Any], write: Callable[[list[tuple], dict], list[str]],
               counts: Callable[[], dict[str, tuple[int, int]]] | None = None) -> int:
    """A family module's command line: compare its cases (and its published parameter counts, if any), print a
    line for each, and with ``--write`` publish its section (`write(rows, counts)`, which may run the peaks).
    Returns 0 when every case and count agree."""
    import sys
    import warnings

    argv = sys.argv[1:] if argv is None else argv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = compared(cases, measure, predict)
        published = counts() if counts is not None else {}
        for name, (measured, predicted) in published.items():
            print(f"{'ok  ' if measured == predicted else 'DIFF'} {name}: transformers {measured:,} "
                  f"trainmem {predicted:,}")
        if "--write" in argv:
            write_section(write(rows, published))
    exact = all(measured == predicted for _, measured, predicted in rows)
    return 0 if exact and all(measured == predicted for measured, predicted in published.values()) else 1
