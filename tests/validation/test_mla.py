"""DeepSeek-V3 measured on CPU (validation/mla.py): counts and saved tensors exact, the peak of two steps within 2%."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import mla  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", mla.CASES, ids=lambda case: case.label)
def test_counts_and_saved_tensors_match_transformers(case):
    assert mla.measure(case) == mla.predict(case)


@pytest.mark.parametrize("case", mla.peak_cases(), ids=lambda case: case.label)
def test_peak_of_two_steps_within_two_percent(case):
    from validation import peak

    row = peak.run(case)
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT
    assert (row.predicted_event, row.predicted_step) == (row.measured_event, row.measured_step)
