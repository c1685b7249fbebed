"""The chunked loss measured on CPU (validation/loss.py): each chunk's buffers exactly as the ledger counts them."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")

from validation import loss  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", loss.CASES, ids=lambda case: case.label)
def test_chunked_cross_entropy_buffers_match_the_ledger(case):
    assert loss.measure(case) == loss.predict(case)
