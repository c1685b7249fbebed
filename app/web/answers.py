"""Answers instead of trial and error: the most this GPU can run, and the single changes that make a setup fit.

The core's solver answers three questions about the job as given (the largest micro-batch, the
longest sequence, the fewest data-parallel GPUs for its ZeRO stage) and lists the changes that
fit, cheapest first. Here each becomes a sentence with the resulting peak and a link that applies
it (app/web/links.py): a plain href, which htmx follows in place.

The solver runs the fixes with each answer, some twenty estimates, so three answers cost three
times the fixes (about 14 ms of the page's time when the setup does not fit). What the page needs
of them is kept for the most recent jobs, keyed by the job: a frozen dataclass, equal for equal inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from app import core
from app.core.job import Job
from app.core.solver import TARGETS, Fix, fixes, solve
from app.web import links
from app.web.form import Unit
from app.web.memo import kept
from app.web.view import format_bytes

# What each cost kind is called beside a fix (app.core.solver.COST_ORDER, cheapest first).
COST_LABELS: Final[dict[str, str]] = {
    "none": "free", "throughput": "throughput", "compute": "compute", "communication": "communication",
    "host": "host memory", "hardware": "more GPUs", "numerics": "numerics",
}
# Answers are kept for this many recent jobs: the unit switch, a pin and the way back ask again for the same job.
CACHED_JOBS: Final = 64
# Fixes listed before the rest are folded away; the list is cheapest first.
FIXES_SHOWN: Final = 5
# The core writes sizes in its notes as exact byte counts ("162,204,303,360 B"); the page shows them in its unit.
EXACT_BYTES: Final = re.compile(r"\b(\d{1,3}(?:,\d{3})+|\d+) B\b")


@dataclass(frozen=True)
class Solved:
    """What the page keeps of one of the solver's answers: the value, the peak there, why there is none."""

    target: str
    value: int | None
    peak_bytes: int
    note: str | None


@dataclass(frozen=True)
class Found:
    """What the page keeps of a fix: the change, its peak and headroom, and its cost."""

    change: tuple[tuple[str, object], ...]  # API field path -> value, in the solver's order
    summary: str
    peak_bytes: int
    headroom_bytes: int
    cost_kind: str
    cost: str


@dataclass(frozen=True)
class Solutions:
    answers: tuple[Solved | str, ...]  # one per target in TARGETS order; a string says why it cannot be solved
    fixes: tuple[Found, ...]


@dataclass(frozen=True)
class Answer:
    """One question's answer: the value, the peak there, and a link to it (None when there is nothing to change)."""

    question: str
    value: str | None  # "6", "6,824 tokens", "3 GPUs"; None when there is none
    peak: str | None  # the peak at that value
    href: str | None
    action: str | None  # the link's text: "Use micro-batch 6"
    current: bool  # the form already has this value
    note: str | None  # why there is none, or what to know about the value


@dataclass(frozen=True)
class FixLink:
    summary: str
    peak: str  # the peak with the fix
    spare: str  # what is left of the capacity with it
    cost_kind: str  # the core's kind, for styling
    cost_label: str
    cost: str
    href: str


@dataclass(frozen=True)
class FitAnswers:
    gpu: str
    fits: bool
    answers: tuple[Answer, ...]
    fixes: tuple[FixLink, ...]  # the first few, cheapest first
    more_fixes: tuple[FixLink, ...]  # the rest, folded away


def solutions(job: Job) -> Solutions:
    """The solver's three answers and the fixes for `job`, kept for recent jobs (app/web/memo.py)."""
    return kept(_solutions, job)


@lru_cache(maxsize=CACHED_JOBS)
def _solutions(job: Job) -> Solutions:
    """The solver's three answers and the fixes for `job` (which has a GPU), kept small for the cache.

    Every fix list is the same whichever target was solved, so the first solution's is taken.
    """
    answers: list[Solved | str] = []
    found: tuple[Fix, ...] | None = None
    given = job.estimate()
    for target in TARGETS:
        try:
            solution = solve(job, target, with_fixes=found is None, given=given)
        except core.DomainError as error:  # a bare parameter count has no batch or sequence to solve for
            answers.append(_sentence(error.message))
            continue
        answers.append(Solved(target, solution.value, solution.estimate.peak.bytes, solution.note))
        if found is None:
            found = solution.fixes
    if found is None:
        found = fixes(job, given)
    kept = tuple(Found(tuple(fix.change.items()), fix.summary, fix.estimate.peak.bytes,
                       fix.estimate.gpu.headroom_bytes if fix.estimate.gpu else 0, fix.cost.kind, fix.cost.text)
                 for fix in found)
    return Solutions(tuple(answers), kept)


def fit_answers(job: Job, given: core.Estimate, state: Mapping[str, str], unit: Unit) -> FitAnswers | None:
    """The panel's content for `job` (whose estimate is `given`), links built on `state`; None without a GPU."""
    if job.gpu is None:
        return None
    solved_job = solutions(job)
    solved = dict(zip(TARGETS, solved_job.answers, strict=True))
    found = solved_job.fixes
    stage = job.parallelism.zero_stage
    answers = (
        _answer(solved["micro_batch_size"], "Largest micro-batch that fits", job.training.micro_batch_size,
                state, unit, value_text=lambda v: f"{v:,}", action=lambda v: f"Use micro-batch {v:,}"),
        _answer(solved["seq_len"], "Longest sequence that fits", job.training.seq_len, state, unit,
                value_text=lambda v: f"{v:,} tokens", action=lambda v: f"Use {v:,} tokens"),
        _answer(solved["data"], f"Fewest data-parallel GPUs with ZeRO stage {stage}", job.parallelism.data, state, unit,
                value_text=_gpus, action=lambda v: f"Use {_gpus(v)}", also={"parallelism.zero_stage": stage}),
    )
    links_to_fixes = tuple(link for link in (_fix_link(fix, state, unit) for fix in found) if link is not None)
    return FitAnswers(
        gpu=job.gpu.name,
        fits=given.gpu is not None and given.gpu.fits,  # the verdict: the allocator's reserve and the context
        answers=answers,
        fixes=links_to_fixes[:FIXES_SHOWN],
        more_fixes=links_to_fixes[FIXES_SHOWN:],
    )


def _gpus(value: int) -> str:
    return f"{value:,} GPU" + ("" if value == 1 else "s")


def _answer(solved: Solved | str, question: str, current: int, state: Mapping[str, str], unit: Unit,
            *, value_text: Callable[[int], str], action: Callable[[int], str],
            also: Mapping[str, object] | None = None) -> Answer:
    if isinstance(solved, str):
        return Answer(question, None, None, None, None, False, solved)
    note = in_unit(_sentence(solved.note), unit) if solved.note else None
    if solved.value is None:
        return Answer(question, None, None, None, None, False, note)
    value = solved.value
    peak = format_bytes(solved.peak_bytes, unit)
    if value == current:
        return Answer(question, value_text(value), peak, None, None, True, note)
    target = links.href(links.changed(state, {TARGETS[solved.target]: value, **(also or {})}))
    return Answer(question, value_text(value), peak, target, action(value), False, note)


def _fix_link(fix: Found, state: Mapping[str, str], unit: Unit) -> FixLink | None:
    try:
        target = links.href(links.changed(state, dict(fix.change)))
    except ValueError:  # a change the page has no control for
        return None
    return FixLink(
        summary=fix.summary,
        peak=format_bytes(fix.peak_bytes, unit),
        spare=format_bytes(fix.headroom_bytes, unit),
        cost_kind=fix.cost_kind,
        cost_label=COST_LABELS.get(fix.cost_kind, fix.cost_kind),
        cost=_sentence(fix.cost),
        href=target,
    )


def in_unit(text: str, unit: Unit) -> str:
    """`text` with each exact byte count (``85,520,809,984 B``) written in the page's unit."""
    return EXACT_BYTES.sub(lambda match: format_bytes(int(match.group(1).replace(",", "")), unit), text)


def _sentence(text: str) -> str:
    """The core's lower-case clause as a sentence: capitalised, with a full stop."""
    text = text.strip()
    if not text:
        return text
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
