"""Gemma 3 and OLMo 2 measured on CPU (validation/dense.py): counts and saved tensors exact, the peak of two steps
within 2%."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import dense  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", dense.CASES, ids=lambda case: case.label)
def test_counts_and_saved_tensors_match_transformers(case):
    assert dense.measure(case) == dense.predict(case)


@pytest.mark.parametrize("case", dense.peak_cases(), ids=lambda case: case.label)
def test_peak_of_two_steps_within_two_percent(case):
    from validation import peak

    row = peak.run(case)
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT
    assert (row.predicted_event, row.predicted_step) == (row.measured_event, row.measured_step)


@pytest.mark.parametrize("case", dense.unmodelled_cases(), ids=lambda case: case.label)
def test_a_peak_in_an_unmodelled_layer_backward_carries_the_warning(case):
    from validation import peak

    estimate = peak.predict(case, case.config().to_dict())
    assert estimate.peak.event.startswith("backward: layer")
    assert any("layer's backward" in warning for warning in estimate.warnings)
