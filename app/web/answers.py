"""Answers instead of trial and error: the most this GPU can run, and the single changes that make a setup fit.

The core's solver answers three questions about the job as given (the largest micro-batch, the
longest sequence, the fewest data-parallel GPUs for its ZeRO stage) and lists the changes that
fit, cheapest first. Here each becomes a sentence with the resulting peak and a link that applies
it (app/web/links.py): a plain href, which htmx follows in place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from app import core
from app.core.job import Job
from app.core.solver import TARGETS, Fix, Solution, fixes, solve
from app.web import links
from app.web.form import Unit
from app.web.view import format_bytes

# What each cost kind is called beside a fix (app.core.solver.COST_ORDER, cheapest first).
COST_LABELS: Final[dict[str, str]] = {
    "none": "free", "throughput": "throughput", "compute": "compute", "communication": "communication",
    "hardware": "more GPUs", "numerics": "numerics",
}
# Fixes listed before the rest are folded away; the list is cheapest first.
FIXES_SHOWN: Final = 5
# The core writes sizes in its notes as exact byte counts ("162,204,303,360 B"); the page shows them in its unit.
EXACT_BYTES: Final = re.compile(r"\b(\d{1,3}(?:,\d{3})+|\d+) B\b")


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


def fit_answers(job: Job, given: core.Estimate, state: Mapping[str, str], unit: Unit) -> FitAnswers | None:
    """The panel's content for `job` (whose estimate is `given`), links built on `state`; None without a GPU."""
    if job.gpu is None:
        return None
    solutions: dict[str, Solution | core.DomainError] = {}
    for target in ("micro_batch_size", "seq_len", "data"):
        try:
            solutions[target] = solve(job, target)
        except core.DomainError as error:  # a bare parameter count has no batch or sequence to solve for
            solutions[target] = error
    solved = [item for item in solutions.values() if isinstance(item, Solution)]
    found = solved[0].fixes if solved else fixes(job, given)  # the same for every target
    answers = (
        _answer(solutions["micro_batch_size"], "Largest micro-batch that fits", job.training.micro_batch_size,
                state, unit, value_text=lambda v: f"{v:,}", action=lambda v: f"Use micro-batch {v:,}"),
        _answer(solutions["seq_len"], "Longest sequence that fits", job.training.seq_len, state, unit,
                value_text=lambda v: f"{v:,} tokens", action=lambda v: f"Use {v:,} tokens"),
        _answer(solutions["data"], f"Fewest data-parallel GPUs with ZeRO stage {job.parallelism.zero_stage}",
                job.parallelism.data, state, unit, value_text=_gpus,
                action=lambda v: f"Use {_gpus(v)}", also={"parallelism.zero_stage": job.parallelism.zero_stage}),
    )
    links_to_fixes = tuple(link for link in (_fix_link(fix, state, unit) for fix in found) if link is not None)
    return FitAnswers(
        gpu=job.gpu.name,
        fits=given.peak.bytes <= job.gpu.capacity_bytes,
        answers=answers,
        fixes=links_to_fixes[:FIXES_SHOWN],
        more_fixes=links_to_fixes[FIXES_SHOWN:],
    )


def _gpus(value: int) -> str:
    return f"{value:,} GPU" + ("" if value == 1 else "s")


def _answer(solution: Solution | core.DomainError, question: str, current: int, state: Mapping[str, str], unit: Unit,
            *, value_text, action, also: Mapping[str, object] | None = None) -> Answer:
    if isinstance(solution, core.DomainError):
        return Answer(question, None, None, None, None, False, _sentence(solution.message))
    note = in_unit(_sentence(solution.note), unit) if solution.note else None
    if solution.value is None:
        return Answer(question, None, None, None, None, False, note)
    value = solution.value
    peak = format_bytes(solution.estimate.peak.bytes, unit)
    if value == current:
        return Answer(question, value_text(value), peak, None, None, True, note)
    target = links.href(links.changed(state, {TARGETS[solution.target]: value, **(also or {})}))
    return Answer(question, value_text(value), peak, target, action(value), False, note)


def _fix_link(fix: Fix, state: Mapping[str, str], unit: Unit) -> FixLink | None:
    try:
        target = links.href(links.changed(state, fix.change))
    except ValueError:  # a change the page has no control for
        return None
    result = fix.estimate
    spare = result.gpu.headroom_bytes if result.gpu else 0
    return FixLink(
        summary=fix.summary,
        peak=format_bytes(result.peak.bytes, unit),
        spare=format_bytes(spare, unit),
        cost_kind=fix.cost.kind,
        cost_label=COST_LABELS.get(fix.cost.kind, fix.cost.kind),
        cost=_sentence(fix.cost.text),
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
