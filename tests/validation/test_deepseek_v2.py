"""DeepSeek-V2 measured on CPU (validation/deepseek_v2.py): counts and saved tensors exact, DeepSeek-V2's and
DeepSeek-V2-Lite's counts as DeepseekV2ForCausalLM has them, the peak of two steps within 2%."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import deepseek_v2  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", deepseek_v2.CASES, ids=lambda case: case.label)
def test_counts_and_saved_tensors_match_transformers(case):
    assert deepseek_v2.measure(case) == deepseek_v2.predict(case)


def test_published_models_counted_as_transformers_counts_them():
    # sum(p.numel()) of DeepseekV2ForCausalLM on the meta device (transformers 5.24), beside trainmem's count.
    assert deepseek_v2.published_counts() == {"DeepSeek-V2-Lite": (15_706_484_224, 15_706_484_224),
                                              "DeepSeek-V2": (235_741_434_880, 235_741_434_880)}


@pytest.mark.parametrize("case", deepseek_v2.peak_cases(), ids=lambda case: case.label)
def test_peak_of_two_steps_within_two_percent(case):
    from validation import peak

    row = peak.run(case)
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT
    assert (row.predicted_event, row.predicted_step) == (row.measured_event, row.measured_step)
