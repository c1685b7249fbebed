"""gpt-oss measured on CPU (validation/gpt_oss.py): counts and saved tensors exact, gpt-oss-20b's and gpt-oss-120b's
counts as GptOssForCausalLM has them, the peak of two steps within 2%, and a layer's backward events as measured."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import gpt_oss  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", gpt_oss.CASES, ids=lambda case: case.label)
def test_counts_and_saved_tensors_match_transformers(case):
    assert gpt_oss.measure(case) == gpt_oss.predict(case)


def test_published_models_counted_as_transformers_counts_them():
    counts = gpt_oss.published_counts()
    assert counts == {"gpt-oss-20b": (20_914_757_184, 20_914_757_184),
                      "gpt-oss-120b": (116_829_156_672, 116_829_156_672)}


@pytest.mark.parametrize("case", gpt_oss.peak_cases(), ids=lambda case: case.label)
def test_peak_of_two_steps_within_two_percent(case):
    from validation import peak

    row = peak.run(case)
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT
    assert (row.predicted_event, row.predicted_step) == (row.measured_event, row.measured_step)


@pytest.mark.parametrize("case", gpt_oss.backward_cases(), ids=lambda case: case.label)
def test_layer_backward_events_as_measured(case):
    (_, events), = gpt_oss.backward_rows((case,))
    assert events, "no layer backward event listed"
    for event, predicted, measured, error in events:
        assert abs(error) <= gpt_oss.BACKWARD_TARGET_PCT, (event, predicted, measured)
