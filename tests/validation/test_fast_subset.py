"""The fast subset of the validation sweep: real training steps on CPU against trainmem's predictions.

Model states must match to the byte; activations (per layer and for the whole model), autocast's
weight copies and the logits workspace within 5%. `make test` installs the validate extra
(torch CPU and transformers), so in CI these run rather than skip.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import sweep  # noqa: E402
from validation.cases import Row  # noqa: E402

pytestmark = pytest.mark.validation


def _describe(rows: list[Row]) -> str:
    return "; ".join(
        f"{row.quantity}: predicted {row.predicted:,} measured {row.measured:,} ({row.error_pct:+.2f}%)"
        for row in rows
        if not row.passed
    )


@pytest.mark.parametrize("case", sweep.FAST_STATES_CASES, ids=lambda case: case.label)
def test_model_states_are_exact(case):
    rows = case.run()
    assert [row.quantity for row in rows] == ["weights", "gradients", "master_weights", "optimizer_states"]
    assert all(row.error_bytes == 0 for row in rows), _describe(rows)
    assert rows[0].measured > 0


@pytest.mark.parametrize("case", sweep.FAST_ACTIVATION_CASES, ids=lambda case: case.label)
def test_activations_within_five_percent(case):
    rows = case.run()
    targeted = [row for row in rows if row.target == "5%"]
    assert any(row.quantity == "model activations" for row in targeted)
    assert all(row.passed for row in targeted), _describe(rows)


def test_every_family_precision_attention_and_optimizer_is_in_the_fast_subset():
    activation = sweep.FAST_ACTIVATION_CASES
    assert {case.family for case in activation} == set(sweep.SIZES)
    assert {case.precision for case in activation} == set(sweep.PRECISIONS)
    assert {case.attention for case in activation} == set(sweep.ATTENTIONS)
    assert {case.checkpointing for case in activation} == set(sweep.CHECKPOINTING)
    from validation.cases import OPTIMIZERS

    assert {case.optimizer for case in sweep.FAST_STATES_CASES} == set(OPTIMIZERS)


def test_the_recorder_counts_a_view_by_its_storage():
    import torch

    from validation.measure import SavedTensorRecorder

    layers = torch.nn.ModuleList([torch.nn.Identity()])
    recorder = SavedTensorRecorder(torch.nn.Linear(2, 2), layers)
    base = torch.randn(4, 8, requires_grad=True) * 1.0  # a storage of 32 floats
    other = torch.randn(2, 8, requires_grad=True)  # 16 floats
    with recorder.recording():
        layers[0](base)  # enters and leaves the only layer: what follows is the head
        base[:, :2].exp().sum()  # exp keeps its output, a fresh storage of 8 floats
        (base[:2] * other).sum()  # mul keeps both operands: a view of base's 32 floats, and other
        (base[2:] * other).sum()  # the same two storages again: counted once
    measured = recorder.measurement()
    assert measured.head == (8 + 32 + 16) * 4
    assert measured.layers == [0]
