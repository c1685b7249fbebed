"""FSDP2's peak measured on CPU (validation/fsdp2.py) against the fsdp2 convention: two cases whose peaks fall at
the loss and in backward."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from validation import fsdp2  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", [fsdp2.CASES[0], fsdp2.CASES[8]], ids=lambda case: case.label)
def test_fsdp2_peak_within_target(case: fsdp2.Case) -> None:
    row = fsdp2.run(case)
    assert abs(row.error_pct) <= fsdp2.TARGET_PCT, (row.predicted, row.measured, row.measured_breakdown)
