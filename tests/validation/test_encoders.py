"""BERT and RoBERTa sequence classifiers measured on CPU (validation/encoders.py): counts and saved tensors exact, the
peak of two steps within 2%, a peak in an unmodelled layer backward carrying the warning, and the published table what
the estimate says now."""

from __future__ import annotations

import os
import re

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import encoders  # noqa: E402
from validation.sections import REPORT  # noqa: E402

pytestmark = pytest.mark.validation


def _number(cell: str) -> int:
    return int(cell.replace(",", ""))


def _published() -> dict[str, dict[str, object]]:
    """The section's table: each case's label -> its measured count and bytes, and whether it was exact."""
    body = REPORT.read_text(encoding="utf-8").split(encoders.SECTION, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, dict[str, object]] = {}
    for line in body.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"[\d,]+", cells[1]):
            rows[cells[0]] = {"params": _number(cells[1]), "layer": _number(cells[2]), "embedding": _number(cells[3]),
                              "head": _number(cells[4]), "verdict": cells[5]}
    return rows


def test_the_published_table_is_what_the_estimate_says_now():
    published = _published()
    assert set(published) == {case.label for case in encoders.CASES}
    for case in encoders.CASES:
        predicted = encoders.predict(case)
        row = published[case.label]
        assert row["verdict"] == "exact"
        layers = predicted["layers"]
        assert isinstance(layers, list) and set(layers) == {row["layer"]}
        assert (row["params"], row["embedding"], row["head"]) == (predicted["params"], predicted["embedding"],
                                                                  predicted["head"])


@pytest.mark.parametrize("case", encoders.CASES, ids=lambda case: case.label)
def test_counts_and_saved_tensors_match_transformers(case):
    assert encoders.measure(case) == encoders.predict(case)


@pytest.mark.parametrize("case", encoders.peak_cases(), ids=lambda case: case.label)
def test_peak_of_two_steps_within_two_percent(case):
    from validation import peak

    row = peak.run(case)
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT
    if not case.precision.startswith("autocast"):  # under autocast the top layer's forward and backward are within 1%
        assert (row.predicted_event, row.predicted_step) == (row.measured_event, row.measured_step)


@pytest.mark.parametrize("case", encoders.unmodelled_cases(), ids=lambda case: case.label)
def test_a_peak_in_an_unmodelled_layer_backward_carries_the_warning(case):
    from validation import peak

    estimate = peak.predict(case, case.config().to_dict())
    assert estimate.peak.event.startswith("backward: layer")
    assert any("layer's backward" in warning for warning in estimate.warnings)
