"""What recomputation costs in compute beside what it saves at the peak, for each activation-checkpointing choice.

The compute is the core's count of a step's FLOPs (app/core/flops.py, after Korthikanti et al. 2022):
each choice adds a fraction of the step without recomputation; the difference from the current
choice is what switching costs (or saves). The memory is the peak of the same job with the other
choice, an estimate each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app import core
from app.core.flops import step_flops
from app.core.job import Job, with_field
from app.core.recompute import describe, recomputed_share
from app.web.form import Unit
from app.web.view import format_bytes

PATH: Final = "training.activation_checkpointing"
MINUS: Final = "\u2212"


@dataclass(frozen=True)
class Choice:
    choice: str
    label: str
    current: bool
    compute: str  # "+31.0% compute" against the current choice; "" for the current one
    memory: str  # "−20.50 GiB at the peak", or "the same peak"
    peak: str


def signed_percent(fraction: float) -> str:
    """``+31.0%``, ``−2.4%``, ``0.0%``: one decimal, a real minus sign."""
    text = f"{abs(fraction) * 100:.1f}%"
    if text == "0.0%":
        return text
    return ("+" if fraction > 0 else MINUS) + text


def _peak_change(delta: int, unit: Unit) -> str:
    """How a choice moves the peak: ``+1.2 GiB at the peak``, or the same."""
    return "the same peak" if not delta else f"{'+' if delta > 0 else MINUS}{format_bytes(abs(delta), unit)} at the peak"


def recompute_choices(job: Job, given: core.Estimate, unit: Unit) -> tuple[Choice, ...] | None:
    """Each checkpointing choice beside the current one; None without an architecture (no activations)."""
    arch = job.architecture
    if arch is None:
        return None
    training = job.training
    flops = step_flops(arch, micro_batch_size=training.micro_batch_size, seq_len=training.seq_len)
    partial = training.recompute_every != 1 or training.recompute_first_layers is not None
    now_fraction = flops.recompute_fraction(training.activation_checkpointing, recomputed_share(
        training.activation_checkpointing, arch.num_hidden_layers, every=training.recompute_every,
        first_layers=training.recompute_first_layers, stages=job.parallelism.pipeline))
    # Each choice applies to every layer: the layers chosen now are set back to all of them
    every_layer = (with_field(with_field(job, "training.recompute_every", 1), "training.recompute_first_layers", None)
                   if partial else job)
    out = []
    for choice, info in core.CHECKPOINTING_CHOICES.items():
        current = choice == training.activation_checkpointing and not partial
        try:
            peak = given.peak.bytes if current else \
                with_field(every_layer, PATH, choice).estimate(reserve=False).peak.bytes
        except core.DomainError:  # a choice this setup does not allow
            continue
        compute = "" if current else f"{signed_percent(flops.recompute_fraction(choice) - now_fraction)} compute"
        out.append(Choice(choice, info.label, current, compute, _peak_change(peak - given.peak.bytes, unit),
                          format_bytes(peak, unit)))
    if partial:  # the policy chosen, some layers recomputed: first, as chosen
        label = f"Full, {describe(training.recompute_every, training.recompute_first_layers)}"
        out.insert(0, Choice("partial", label, True, "", "the same peak", format_bytes(given.peak.bytes, unit)))
    return tuple(out)
