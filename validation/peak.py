"""The peak through two training steps: trainmem's timeline against the measured one.

For each `TimelineCase` the prediction is ``estimate(..., device="cpu")`` with the case's training
setup and ``framework_overhead_bytes=0`` (a CPU run has no CUDA context), for the very config the
model was built from. Compared, per case: the peak's bytes (target: within 2%), its event and its
step; and per event, the predicted bytes against the measured ones.

Per event, the measurement has two numbers: the memory alive when the event ended, and the most
alive within its interval (which starts where the previous event ended, so it also holds what the
previous event left to be freed: the autocast cache at the end of forward, the gradients before
``zero_grad``). trainmem's point for an event counts the buffers it says are alive there, transients
at their event included. A prediction between the two measured numbers agrees with the event; one
outside is off by its distance to the nearer of the two.

Measured categories map onto trainmem's: the token ids are activations (trainmem counts them with
the embedding); the model's outputs (logits and loss), autocast's weight copies and the temporaries
of backward and of the optimizer step are temporary; module buffers (the rotary inverse
frequencies) and the optimizers' 0-d step counters, which trainmem leaves out, are "uncounted".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.core import Estimate, Training, architecture_from_hf_config, estimate, precision_preset
from app.core.finetuning import Finetuning
from validation import timeline as tl

PEAK_TARGET_PCT = 2.0

CORE_CATEGORY = {
    tl.WEIGHTS: "weights",
    tl.GRADIENTS: "gradients",
    tl.OPTIMIZER_STATES: "optimizer_states",
    tl.INPUTS: "activations",
    "activations": "activations",
    tl.MODEL_OUTPUTS: "temporary",
    tl.AUTOCAST_WEIGHT_COPIES: "temporary",
    "backward_temporaries": "temporary",
    "optimizer_temporaries": "temporary",
    tl.BUFFERS: "uncounted",
    tl.STEP_COUNTERS: "uncounted",
    "other": "uncounted",
}
LIVE_EVENTS = ("step start", "zero_grad")


def training(case: tl.TimelineCase) -> Training:
    return Training(
        micro_batch_size=case.batch, seq_len=case.seq, precision=precision_preset(case.precision),
        optimizer=case.optimizer, optimizer_implementation=case.implementation,
        activation_checkpointing=case.checkpointing, recompute_every=case.recompute_every,
        recompute_first_layers=case.recompute_first_layers, use_reentrant=case.use_reentrant, attention=case.attention,
        implementation="transformers",
        loop=case.loop, gradient_accumulation_steps=case.accumulation, framework_overhead_bytes=0, fp8=case.fp8,
        finetuning=Finetuning(method="lora", rank=case.lora_rank, target_modules=case.lora_targets,
                              dropout=case.lora_dropout) if case.lora_rank else Finetuning(),
    )


def predict(case: tl.TimelineCase, config: dict) -> Estimate:
    return estimate(architecture=architecture_from_hf_config(config), training=training(case), device="cpu")


def core_breakdown(breakdown: dict[str, int]) -> dict[str, int]:
    """A measured breakdown in trainmem's categories (plus "uncounted")."""
    out: dict[str, int] = {}
    for category, value in breakdown.items():
        key = CORE_CATEGORY[category]
        out[key] = out.get(key, 0) + value
    return out


def compared_bytes(point: tl.Point) -> int:
    """The number a chart shows for an event: the most it held, or for ``step start`` and
    ``zero_grad`` (whose intervals hold what the previous event left) the memory alive at its end."""
    base = point.event.rsplit(": ", 1)[-1] if point.event.startswith("micro-batch") else point.event
    return point.live if base in LIVE_EVENTS else point.peak


@dataclass(frozen=True)
class EventRow:
    step: int
    event: str
    predicted: int | None  # None: trainmem does not list the event (layers between the first and the last)
    measured_live: int
    measured_peak: int
    measured: int  # the one a chart shows (see `compared_bytes`)
    predicted_breakdown: dict[str, int]
    live_breakdown: dict[str, int]  # in trainmem's categories
    peak_breakdown: dict[str, int]
    transients: tuple[dict, ...] = ()  # when off by more than the target: what the interval's peak held briefly

    @property
    def error_pct(self) -> float | None:
        """How far the prediction lies outside what the event held: 0 between the memory alive when it
        ended and the most within it, else the distance to the nearer of the two, relative to it."""
        if self.predicted is None:
            return None
        low, high = sorted((self.measured_live, self.measured_peak))
        if low <= self.predicted <= high:
            return 0.0
        nearer = low if self.predicted < low else high
        return 100.0 * (self.predicted - nearer) / nearer

    def as_dict(self) -> dict:
        """Breakdowns only for the events trainmem lists (the layers between hold the same categories)."""
        out = {"step": self.step, "event": self.event, "predicted_bytes": self.predicted,
               "measured_live_bytes": self.measured_live, "measured_peak_bytes": self.measured_peak,
               "error_pct": None if self.error_pct is None else round(self.error_pct, 4)}
        if self.predicted is not None:
            out |= {"predicted_breakdown": self.predicted_breakdown, "measured_live_breakdown": self.live_breakdown,
                    "measured_peak_breakdown": self.peak_breakdown}
        if self.transients:
            out["transients"] = list(self.transients)
        return out


@dataclass(frozen=True)
class PeakRow:
    """One case: the predicted peak against the measured one, and every event."""

    label: str
    family: str
    case: dict
    predicted: int
    predicted_event: str
    predicted_step: int
    measured: int
    measured_event: str
    measured_step: int
    predicted_breakdown: dict[str, int]
    measured_breakdown: dict[str, int]
    events: tuple[EventRow, ...]
    largest_at_peak: tuple[dict, ...] = ()
    seconds: float = 0.0
    memtracker: int | None = None  # torch's MemTracker's peak of the same steps, where it was run

    @property
    def error_bytes(self) -> int:
        return self.predicted - self.measured

    @property
    def error_pct(self) -> float:
        return 100.0 * self.error_bytes / self.measured

    @property
    def same_event(self) -> bool:
        return (self.predicted_event, self.predicted_step) == (self.measured_event, self.measured_step)

    @property
    def passed(self) -> bool:
        return abs(self.error_pct) <= PEAK_TARGET_PCT

    def worst_events(self, count: int = 3) -> list[EventRow]:
        listed = [row for row in self.events if row.error_pct is not None]
        return sorted(listed, key=lambda row: -abs(row.error_pct))[:count]

    def as_dict(self, *, events: bool = True) -> dict:
        out = {
            "label": self.label, "family": self.family, "case": self.case,
            "predicted_bytes": self.predicted, "predicted_event": self.predicted_event,
            "predicted_step": self.predicted_step, "measured_bytes": self.measured,
            "measured_event": self.measured_event, "measured_step": self.measured_step,
            "error_bytes": self.error_bytes, "error_pct": round(self.error_pct, 6), "same_event": self.same_event,
            "passed": self.passed, "predicted_breakdown": self.predicted_breakdown,
            "measured_breakdown": self.measured_breakdown, "seconds": round(self.seconds, 2),
        }
        if self.memtracker is not None:
            out["memtracker_peak_bytes"] = self.memtracker
        if events:
            out["largest_storages_at_peak"] = list(self.largest_at_peak)
            out["events"] = [row.as_dict() for row in self.events]
        return out


def compare(measured: tl.Measurement, predicted: Estimate) -> PeakRow:
    case = measured.case
    by_event = {(point.step, point.event): point for point in predicted.timeline}
    rows = []
    for point in measured.points:
        forecast = by_event.get((point.step, point.event))
        rows.append(EventRow(
            step=point.step, event=point.event,
            predicted=None if forecast is None else forecast.bytes,
            measured_live=point.live, measured_peak=point.peak, measured=compared_bytes(point),
            predicted_breakdown={} if forecast is None else {k: v for k, v in forecast.breakdown.items() if v},
            live_breakdown=core_breakdown(point.live_breakdown), peak_breakdown=core_breakdown(point.peak_breakdown),
        ))
    rows = [_with_transients(row, point, measured) for row, point in zip(rows, measured.points, strict=True)]
    missing = set(by_event) - {(row.step, row.event) for row in rows}
    if missing:
        raise ValueError(f"trainmem lists events the measurement does not: {sorted(missing)[:3]}")
    peak = measured.peak()
    return PeakRow(
        label=case.label, family=case.family, case=case.as_dict(),
        predicted=predicted.peak.bytes, predicted_event=predicted.peak.event, predicted_step=predicted.peak.step,
        measured=peak.peak, measured_event=peak.event, measured_step=peak.step,
        predicted_breakdown={k: v for k, v in predicted.peak.breakdown.items() if v},
        measured_breakdown=core_breakdown(peak.peak_breakdown),
        events=tuple(rows), largest_at_peak=tuple(measured.peak_storages(peak.step, 8)), seconds=measured.seconds,
    )


def _with_transients(row: EventRow, point: tl.Point, measured: tl.Measurement) -> EventRow:
    """For an event off by more than the target: the storages (over 1 MiB) alive at its interval's
    peak but not when it ended, largest first."""
    if row.error_pct is None or abs(row.error_pct) <= PEAK_TARGET_PCT or point.peak == point.live:
        return row
    return replace(row, transients=tuple(measured.brief_storages(point)))


def run(case: tl.TimelineCase) -> PeakRow:
    measured = tl.measure(case)
    return compare(measured, predict(case, measured.config))
