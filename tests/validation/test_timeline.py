"""Live memory through two training steps: the tracker against the CPU allocator, fake tensors against
real ones, the events against trainmem's names, and trainmem's peak against the measured one.

Small models on CPU, a few seconds in all; the real-size sweep is ``python -m validation.timeline``.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

import torch  # noqa: E402

from validation import peak  # noqa: E402
from validation import timeline as tl  # noqa: E402
from validation.models import Size  # noqa: E402

pytestmark = pytest.mark.validation

GQA = Size(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, vocab=509)


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    import transformers

    transformers.logging.set_verbosity_error()
    threads = torch.get_num_threads()
    torch.set_num_threads(min(2, threads))
    yield
    torch.set_num_threads(threads)


def _known_other_allocation(op: str, size: int, case: tl.TimelineCase) -> bool:
    """What the allocator may hold that no operation returned: a scalar (a Python number the argument
    parser wrapped, or one a kernel made), a checkpoint's RNG state, or a kernel's own buffer."""
    if size <= 8:
        return True
    if op == "outside any operation":
        return case.checkpointing == "full" and size == torch.get_rng_state().nbytes
    return op.startswith("aten::")


@pytest.mark.parametrize("case", tl.ALLOCATOR_CASES, ids=lambda case: case.label)
def test_the_tracker_agrees_with_the_cpu_allocator_to_the_byte(case):
    measured, check = tl.cross_check(case)
    assert check.tracker_peak > 0
    assert check.tracker_peak == check.allocator_outliving_peak
    assert check.tracker_final == check.allocator_final
    # What the allocator holds beyond the storages operations return is small and of known kinds.
    assert check.allocator_peak >= check.tracker_peak
    others = sum(size for _, size in check.others_at_peak)
    assert check.allocator_peak - check.tracker_peak <= others
    assert all(_known_other_allocation(op, size, case) for op, size in check.others_at_peak), check.others_at_peak
    assert measured.peak().peak - measured.baseline == check.tracker_peak


def test_fake_tensors_give_the_bytes_of_real_ones_at_every_event():
    case = tl.TimelineCase("llama", size=GQA, batch=2, seq=32, precision="bf16", accumulation=2)
    real = tl.measure(case, keep_tracker=False)
    fake = tl.measure(replace(case, fake_tensors=True), keep_tracker=False)
    assert [(p.step, p.event, p.live, p.peak) for p in fake.points] == [
        (p.step, p.event, p.live, p.peak) for p in real.points
    ]


def test_torchs_memtracker_counts_the_same_peak():
    case = tl.TimelineCase("llama", size=GQA, batch=2, seq=32, precision="bf16", loop="hf-trainer")
    assert tl.memtracker_peak(case) == tl.measure(case, keep_tracker=False).peak().peak


def test_events_are_trainmems_names_in_order():
    case = tl.TimelineCase("llama", size=GQA, batch=1, seq=16, precision="fp32", accumulation=2)
    measured = tl.measure(case, keep_tracker=False)
    micro_batch = ["forward: embedding", "forward: layer 1", "forward: layer 2", "forward: loss",
                   "backward: loss gradients", "backward: output layer", "backward: layer 2", "backward: layer 1",
                   "backward: embedding"]
    one_step = (["step start"] + [f"micro-batch {k}: {event}" for k in (1, 2) for event in micro_batch]
                + ["optimizer.step", "zero_grad"])
    assert [(p.step, p.event) for p in measured.points] == [(s, e) for s in (1, 2) for e in one_step]


def test_the_losss_backward_holds_two_fp32_logits_gradients_at_once():
    # nll_loss_backward writes an fp32 gradient of the log-probabilities, and _log_softmax_backward_data
    # an fp32 gradient of the logits while the first is its input (aten/src/ATen/native/LossNLL.cpp,
    # SoftMax.cpp): both are alive during "backward: loss gradients".
    case = tl.TimelineCase("llama", size=GQA, batch=2, seq=32, precision="bf16")
    measured = tl.measure(case, keep_tracker=False)
    point = next(p for p in measured.points if p.step == 1 and p.event == "backward: loss gradients")
    assert point.peak_breakdown["backward_temporaries"] >= 2 * 4 * case.batch * case.seq * GQA.vocab
    assert "gradients" not in point.peak_breakdown  # step 1: no gradient exists before the output layer's


def test_optimizer_state_appears_in_step_one_and_gradients_leave_at_zero_grad():
    case = tl.TimelineCase("llama", size=GQA, batch=1, seq=16, precision="fp32")
    measured = tl.measure(case, keep_tracker=False)
    points = {(p.step, p.event): p for p in measured.points}
    weights = points[1, "step start"].live_breakdown["weights"]
    assert "optimizer_states" not in points[1, "step start"].live_breakdown
    assert points[1, "optimizer.step"].live_breakdown["optimizer_states"] == 2 * weights  # AdamW: m and v
    assert points[1, "backward: embedding"].live_breakdown["gradients"] == weights
    assert "gradients" not in points[1, "zero_grad"].live_breakdown
    assert points[2, "step start"].live_breakdown["optimizer_states"] == 2 * weights


@pytest.mark.parametrize("case", [
    tl.TimelineCase("llama", size=GQA, batch=2, seq=64, precision="fp32"),
    tl.TimelineCase("llama", size=GQA, batch=2, seq=64, precision="bf16", implementation="for-loop",
                    accumulation=2, loop="hf-trainer"),
], ids=lambda case: case.label)
def test_trainmems_peak_is_within_two_percent_in_the_same_event(case):
    row = peak.run(case)
    assert row.measured > 0
    assert abs(row.error_pct) <= peak.PEAK_TARGET_PCT, (row.predicted, row.measured)
    assert row.same_event, (row.predicted_event, row.predicted_step, row.measured_event, row.measured_step)
