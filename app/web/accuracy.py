"""The published validation summary (docs/validation.json), shown next to the breakdown."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

DOCS_DIR: Final = Path(__file__).resolve().parent.parent.parent / "docs"
SUMMARY_FILE: Final = DOCS_DIR / "validation.json"
GPU_FILE: Final = DOCS_DIR / "gpu.json"
REPORT_FILE: Final = DOCS_DIR / "VALIDATION.md"


@dataclass(frozen=True)
class GpuCheck:
    """The real-size two-step peaks measured on a GPU (docs/gpu.json, from `python -m validation.gpu`)."""

    gpu: str
    cases: int
    same_event: int
    worst_peak_error_pct: float
    torch: str
    transformers: str


@dataclass(frozen=True)
class Accuracy:
    activation_configurations: int
    model_state_configurations: int
    worst_activation_error_pct: float
    activation_target_pct: float
    model_states_max_error_bytes: int
    families: tuple[str, ...]
    torch: str
    transformers: str
    gpu: GpuCheck | None = None


@cache
def accuracy() -> Accuracy | None:
    """The sweep's summary, or None when the report is missing or unreadable (the page then says nothing)."""
    try:
        summary = json.loads(SUMMARY_FILE.read_text(encoding="utf-8"))["summary"]
        return Accuracy(
            activation_configurations=int(summary["activation_configurations"]),
            model_state_configurations=int(summary["model_state_configurations"]),
            worst_activation_error_pct=float(summary["worst_activation_error_pct"]),
            activation_target_pct=float(summary["activation_target_pct"]),
            model_states_max_error_bytes=int(summary["model_states_max_error_bytes"]),
            families=tuple(sorted({family.split("-")[0] for family in summary["families"]})),
            torch=str(summary["torch"]),
            transformers=str(summary["transformers"]),
            gpu=gpu_check(),
        )
    except (OSError, KeyError, TypeError, ValueError):
        return None


def gpu_check() -> GpuCheck | None:
    """The GPU measurement's summary, or None when there is none (the page then leaves it out)."""
    try:
        summary = json.loads(GPU_FILE.read_text(encoding="utf-8"))["summary"]
        return GpuCheck(gpu=str(summary["gpu"]), cases=int(summary["cases"]), same_event=int(summary["same_event"]),
                        worst_peak_error_pct=float(summary["worst_peak_error_pct"]), torch=str(summary["torch"]),
                        transformers=str(summary["transformers"]))
    except (OSError, KeyError, TypeError, ValueError):
        return None


def report_text() -> str | None:
    try:
        return REPORT_FILE.read_text(encoding="utf-8")
    except OSError:
        return None
