"""Reentrant checkpoints (validation/reentrant.py): the published table is what trainmem says now for the measured
cases, within the peak target, and the reentrant variant's measured extra is one layer's output."""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import reentrant  # noqa: E402
from validation.sections import REPORT  # noqa: E402

pytestmark = pytest.mark.validation
PUBLISHED = json.loads(reentrant.RESULTS.read_text(encoding="utf-8"))


def test_the_published_rows_are_what_trainmem_predicts_now():
    rows = [reentrant.row(result) for result in PUBLISHED["measured"]]
    assert rows == PUBLISHED["rows"]
    assert "\n".join(reentrant.section(rows)).strip() in REPORT.read_text(encoding="utf-8")


@pytest.mark.parametrize("item", PUBLISHED["rows"], ids=lambda item: item["label"])
def test_each_peak_within_the_target(item):
    assert abs(item["error"]) <= reentrant.TOLERANCE
    assert item["measured_event"] == item["predicted_event"]


def test_the_reentrant_extra_is_one_layer_output():
    # Pairs measured both ways: the reentrant peak is higher by b × s × h in the residual stream's dtype.
    measured = PUBLISHED["measured"]
    for plain, reentrant_run in zip(measured[::2], measured[1::2], strict=True):
        case = plain["case"]
        assert reentrant_run["case"]["use_reentrant"] and "use_reentrant" not in case
        width = 4 if case["precision"] == "fp32" else 2
        extra = case["batch"] * case["seq"] * case["size"]["hidden"] * width
        assert reentrant_run["peak"] - plain["peak"] == extra, case["label"]
