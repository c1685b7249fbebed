"""LoRA targets as a string against peft on small real models (validation/lora_targets.py): each expression trainmem
accepts gives peft's trainable count exactly."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import peft  # noqa: F401  (CI installs the validate extra: a missing peft is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("peft")

from validation import lora_targets  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", lora_targets.CASES, ids=lambda case: case.label)
def test_an_accepted_expression_counts_as_peft_does(case):
    measured, predicted = lora_targets.measure(case), lora_targets.predict(case)
    assert lora_targets.agrees(measured, predicted), (measured, predicted)
