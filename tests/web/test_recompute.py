"""What recomputation costs in compute beside what it saves at the peak."""

from __future__ import annotations

from typing import Any

from app import core
from app.core.flops import step_flops
from app.core.job import Job, with_field
from app.web.recompute import MINUS, Choice, recompute_choices, signed_percent
from app.web.view import format_bytes


def _job(**training: Any) -> Job:
    setup: dict[str, Any] = {"seq_len": 4096, "precision": core.precision_preset("bf16"), "attention": "eager"} | training
    return Job(core.get_preset("llama-3-8b").architecture, None, core.Training(**setup), core.Parallelism(),
               core.get_gpu("h100-80gb"))


def _choices(job: Job, given: core.Estimate) -> dict[str, Choice]:
    found = recompute_choices(job, given, "GiB")
    assert found is not None
    return {c.choice: c for c in found}


def test_percentages_have_one_decimal_and_a_real_minus_sign():
    assert signed_percent(0.3126) == "+31.3%"
    assert signed_percent(-0.042) == f"{MINUS}4.2%"
    assert signed_percent(0.0) == "0.0%" and signed_percent(1e-6) == "0.0%"


def test_each_choice_costs_its_share_of_the_step_and_saves_what_the_estimate_says():
    job = _job()
    given = job.estimate()
    choices = _choices(job, given)
    # op-level recomputation saves the fused attention kernel's outputs: with eager attention it is refused
    assert list(choices) == [choice for choice in core.CHECKPOINTING_CHOICES if choice != "op"]
    assert choices["none"].current and choices["none"].compute == ""
    assert job.architecture is not None
    flops = step_flops(job.architecture, micro_batch_size=1, seq_len=4096)
    # Korthikanti et al. 2022: full recomputation reruns each layer's forward, about a third of a step.
    assert 0.30 < flops.recompute_fraction("full") < 0.34
    assert choices["full"].compute == f"{signed_percent(flops.recompute_fraction('full'))} compute"
    assert choices["selective"].compute == f"{signed_percent(flops.recompute_fraction('selective'))} compute"
    for choice in ("selective", "full"):
        peak = with_field(job, "training.activation_checkpointing", choice).estimate().peak.bytes
        assert peak < given.peak.bytes  # eager attention's s × s scores are what selective drops
        assert choices[choice].memory == f"{MINUS}{format_bytes(given.peak.bytes - peak, 'GiB')} at the peak"


def test_from_full_recomputation_the_others_cost_memory_and_save_compute():
    job = _job(activation_checkpointing="full")
    choices = _choices(job, job.estimate())
    assert choices["none"].compute.startswith(MINUS) and choices["none"].memory.startswith("+")
    assert choices["full"].current


def test_when_activations_are_not_alive_at_the_peak_recomputation_saves_nothing_there():
    # bf16 + fp32 master on one H100: the peak is at optimizer.step, after backward has freed the activations.
    job = _job(precision=core.precision_preset("bf16-fp32-master"), attention="sdpa")
    given = job.estimate()
    assert given.peak.event == "optimizer.step"
    choices = _choices(job, given)
    assert choices["full"].memory == "the same peak"


def test_no_recomputation_without_an_architecture():
    job = Job(None, 7 * 10**9, core.Training(), core.Parallelism(), None)
    assert recompute_choices(job, job.estimate(), "GiB") is None
