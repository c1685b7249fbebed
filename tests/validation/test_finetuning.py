"""LoRA measured with peft on small real models (validation/finetuning.py): every case exact to the byte."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import peft  # noqa: F401  (CI installs the validate extra: a missing peft is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("peft")

from validation import finetuning  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", finetuning.CASES, ids=lambda case: case.label)
def test_counts_weights_and_saved_tensors_match_peft(case):
    measured, predicted = finetuning.measure(case), finetuning.predict(case)
    assert measured == predicted


@pytest.mark.parametrize("case", finetuning.peak_cases(), ids=lambda case: case.label)
def test_lora_peak_of_two_steps_within_two_percent(case):
    from validation import peak

    row = peak.run(case)
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT
    assert (row.predicted_event, row.predicted_step) == (row.measured_event, row.measured_step)
