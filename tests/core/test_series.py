"""A sweep's points are what a full estimate says for each value, whether fitted or estimated one by one."""

from __future__ import annotations

import dataclasses
import random

import pytest

from app import core
from app.core.finetuning import Finetuning
from app.core.job import Job, with_field
from app.core.series import MAX_REPLAYED, MAX_VALUES, polynomial, series
from tests.budget import spread

LLAMA = core.get_preset("llama-3-8b").architecture
OLMO2 = core.get_preset("olmo-2-7b").architecture
GEMMA3 = core.get_preset("gemma-3-1b").architecture
GPT2 = core.get_preset("gpt2").architecture
H100 = core.get_gpu("h100-80gb")


def _job(arch=LLAMA, gpu=H100, **changes) -> Job:
    training = {k: v for k, v in changes.items() if k in {f.name for f in dataclasses.fields(core.Training)}}
    parallelism = {k: v for k, v in changes.items() if k in {f.name for f in dataclasses.fields(core.Parallelism)}}
    if isinstance(training.get("precision"), str):
        training["precision"] = core.precision_preset(training["precision"])
    return Job(architecture=arch, training=core.Training(**training), parallelism=core.Parallelism(**parallelism),
               gpu=gpu)


JOBS = {
    "llama bf16 sdpa": _job(seq_len=4096),
    "llama autocast eager, accumulation 2": _job(precision="autocast-bf16", attention="eager",
                                                 gradient_accumulation_steps=2, micro_batch_size=2),
    "llama full recompute, hf-trainer loop": _job(activation_checkpointing="full", loop="hf-trainer"),
    "llama ZeRO-3 over 8": _job(data=8, zero_stage=3, optimizer_implementation="for-loop"),
    "gpt2 fp32 eager (dropout)": _job(GPT2, precision="fp32", attention="eager", gpu=None),
    "gpt2 fp32 sdpa (memory-efficient, padded)": _job(GPT2, precision="fp32"),
    "llama tensor 2 (ceiling divisions)": _job(tensor=2, sequence_parallel=True),
    "llama pipeline 4": _job(pipeline=4, gradient_accumulation_steps=8),
    "megatron selective": _job(implementation="megatron", activation_checkpointing="selective",
                               precision="megatron-bf16"),
    # Buffers polynomial only piecewise: a layer's backward working set (counted where it exceeds the gradients
    # not yet written), the fp32 norm after OLMo 2's MLP, the math path's transients, a sliding window passed.
    "llama LoRA recompute": _job(activation_checkpointing="full", finetuning=Finetuning(method="lora")),
    "olmo 2 full recompute": _job(OLMO2, activation_checkpointing="full"),
    "llama fp32 (math path)": _job(precision="fp32"),
    "gemma 3 sliding window": _job(GEMMA3, gpu=None),
}


def _same(point, result: core.Estimate) -> None:
    # The allocated peak is exact at every point; the allocator's reserve only where a full estimate ran.
    assert point.peak == result.peak._replace(reserved_bytes=point.peak.reserved_bytes)
    assert point.reserved_bytes in (None, result.peak.reserved_bytes)
    assert dict(point.peak.breakdown) == dict(result.peak.breakdown)
    assert dict(point.per_gpu) == dict(result.per_gpu)
    assert point.fits == (result.gpu.fits if result.gpu else None)


@pytest.mark.parametrize("name, path, low, high", spread(
    [(name, *field) for name in JOBS for field in (("training.seq_len", 1, 200_000),
                                                   ("training.micro_batch_size", 1, 300))], "every point"))
def test_every_point_is_what_an_estimate_says(name, path, low, high):
    job = JOBS[name]
    rng = random.Random(f"{name}{path}")
    values = sorted({low, high, *(rng.randint(low, high) for _ in range(12))})
    points = series(job, path, values)
    assert [point.value for point in points] == values
    for point in points:
        _same(point, with_field(job, path, point.value).estimate())


def _counting_estimates(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each Job.estimate call from here on, as whether it replayed the allocator; `monkeypatch.undo()` ends it."""
    calls: list[bool] = []
    estimate = Job.estimate

    def counted(job: Job, *, reserve: bool = True, verdict_only: bool = False) -> core.Estimate:
        calls.append(reserve)
        return estimate(job, reserve=reserve, verdict_only=verdict_only)

    monkeypatch.setattr(Job, "estimate", counted)
    return calls


@pytest.mark.parametrize("name", ["llama bf16 sdpa", "llama LoRA recompute", "olmo 2 full recompute"])
def test_a_thousand_lengths_cost_a_few_estimates(name, monkeypatch):
    # The fit's pieces, their checks and the bisections between them: far fewer estimates than values (make bench
    # holds the API's sweep to the time of 25 estimate calls).
    # Replaying the allocator costs most: only the bisection for the largest length that fits replays (about
    # log2 of the values), the fit itself needs the tensors' timelines only.
    calls = _counting_estimates(monkeypatch)
    values = list(range(128, 128 * 1001, 128))
    points = series(JOBS[name], "training.seq_len", values)
    assert len(calls) <= 60 and sum(calls) <= 12
    monkeypatch.undo()
    for point in points[::97]:
        _same(point, with_field(JOBS[name], "training.seq_len", point.value).estimate())


def test_the_fit_applies_where_the_memory_is_polynomial():
    assert polynomial(JOBS["llama bf16 sdpa"], "training.seq_len")
    assert polynomial(JOBS["llama ZeRO-3 over 8"], "training.micro_batch_size")
    assert not polynomial(JOBS["llama tensor 2 (ceiling divisions)"], "training.seq_len")
    assert not polynomial(JOBS["llama pipeline 4"], "training.seq_len")
    assert not polynomial(JOBS["gpt2 fp32 sdpa (memory-efficient, padded)"], "training.seq_len")
    assert not polynomial(JOBS["llama bf16 sdpa"], "parallelism.data")


@pytest.mark.parametrize("path, values", [
    ("training.attention", ["eager", "sdpa", "flash", "eager"]),
    ("parallelism.zero_stage", [0, 1, 2, 3]),
    ("parallelism.data", [1, 2, 8, 64]),
    ("training.precision", ["fp32", "bf16", "autocast-bf16"]),
    ("parallelism.sequence_parallel", [True, False]),
    ("model.num_hidden_layers", [8, 16, 32]),
    ("model.preset", ["gpt2", "llama-3-8b"]),
    ("gpu", ["h100-80gb", "a100-40gb"]),
])
def test_fields_of_every_kind(path, values):
    job = _job(data=8, zero_stage=1, tensor=2)
    for point, value in zip(series(job, path, values), values, strict=True):
        assert point.value == value
        _same(point, with_field(job, path, value).estimate())


def test_repeated_values_are_answered_in_place():
    points = series(JOBS["llama bf16 sdpa"], "training.seq_len", [4096, 1024, 4096])
    assert points[0] == points[2] and points[0].peak.bytes > points[1].peak.bytes


@pytest.mark.parametrize("path, values, where", [
    ("training.seq_len", [1024, 0], "vary.values.1"),
    ("training.seq_len", [1024, True], "vary.values.1"),
    ("training.attention", ["sdpa", "fast"], "vary.values.1"),
    ("parallelism.tensor", [1, 3], "vary.values.1"),  # 32 heads do not split three ways
    ("training.nonsense", [1], "vary.field"),
    ("training.seq_len", [], "vary.values"),
    ("training.seq_len", list(range(1, MAX_VALUES + 2)), "vary.values"),
])
def test_bad_values_name_their_place(path, values, where):
    with pytest.raises(core.DomainError) as error:
        series(JOBS["llama bf16 sdpa"], path, values)
    assert error.value.field == where


@pytest.mark.parametrize("gpu", ["a100-40gb", "h100-80gb"])
def test_a_long_sweep_replays_a_few_values_and_judges_the_rest_as_full_estimates_do(gpu):
    # 1,000 data-parallel degrees under ZeRO-3: each value's tensors, a bounded number of replays around where the
    # fit changes, and the verdict of a full estimate wherever it is compared (the first 60, where it changes).
    job = Job(architecture=core.get_preset("llama-3-8b").architecture, training=core.Training(seq_len=4096),
              parallelism=core.Parallelism(zero_stage=3), gpu=core.get_gpu(gpu))
    points = series(job, "parallelism.data", list(range(1, 1001)))
    assert sum(point.reserved_bytes is not None for point in points) <= MAX_REPLAYED
    for data in (*range(1, 61), 500, 1000):
        full = with_field(job, "parallelism.data", data).estimate()
        assert points[data - 1].fits == full.gpu.fits, data  # type: ignore[union-attr]
        assert points[data - 1].peak.bytes == full.peak.bytes


@pytest.mark.parametrize("gpu", ["l4-24gb", "a100-40gb"])
def test_values_left_over_past_the_pieces_are_judged_by_the_largest_that_fits(gpu, monkeypatch):
    # Gemma 3's sliding windows make its memory polynomial in the sequence only piecewise: past MAX_SEGMENTS pieces
    # the values left over are too many to replay each (1,000 took 8.6 s of CPU), so each gets its tensors' timeline
    # and the fit of the largest length that fits, as a fitted value does; a full estimate agrees wherever compared.
    job = _job(GEMMA3, gpu=core.get_gpu(gpu))
    values = [1 + 64 * i for i in range(1000)]
    replays = _counting_estimates(monkeypatch)
    points = series(job, "training.seq_len", values)
    monkeypatch.undo()
    assert sum(replays) <= 2 * MAX_REPLAYED
    fits = [point.fits for point in points]
    last = fits.index(False) - 1
    assert last >= 0 and not any(fits[last + 1:])
    for index in (0, last, last + 1, 500, 999):
        full = with_field(job, "training.seq_len", values[index]).estimate()
        assert points[index].fits == full.gpu.fits, values[index]  # type: ignore[union-attr]
        assert points[index].peak.bytes == full.peak.bytes


def test_near_the_boundary_the_values_left_over_keep_their_own_verdicts():
    # Gemma-3-1B's reserve jumps 2.7 GB at every fourth length near where it stops fitting on an A100-40GB: judged by
    # the largest length that fits, 3,578 read as not fitting while its estimate fits with 1.35 GB to spare.
    job = _job(GEMMA3, gpu=core.get_gpu("a100-40gb"))
    values = [100 + 37 * i for i in range(1000)]
    points = series(job, "training.seq_len", values)
    for point in points:
        if 3000 <= point.value <= 4200:  # type: ignore[operator]
            full = with_field(job, "training.seq_len", point.value).estimate()
            assert point.fits == full.gpu.fits, point.value  # type: ignore[union-attr]
