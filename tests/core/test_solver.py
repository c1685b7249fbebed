"""The solver's answers sit on the boundary: the answer fits, one step further does not; fixes each fit."""

from __future__ import annotations

import pytest

from app import core
from app.core.job import Job, with_field
from app.core.solver import COST_ORDER, TARGETS, fixes, solve

LLAMA = core.get_preset("llama-3-8b").architecture
GPT2 = core.get_preset("gpt2").architecture


def _job(arch=LLAMA, gpu="a100-80gb", precision="bf16-fp32-master", **kw) -> Job:
    training = {k: kw.pop(k) for k in list(kw) if k in core.Training.__dataclass_fields__}
    return Job(architecture=arch, training=core.Training(precision=core.precision_preset(precision), **training),
               parallelism=core.Parallelism(**kw), gpu=core.get_gpu(gpu))


def _fits(job: Job, target: str, value: int) -> bool:
    gpu = with_field(job, TARGETS[target], value).estimate().gpu
    assert gpu is not None
    return gpu.fits


CASES = {
    "llama 8x A100 ZeRO-2": _job(seq_len=4096, data=8, zero_stage=2),
    "llama 8x A100 ZeRO-3 full recompute": _job(seq_len=4096, data=8, zero_stage=3, activation_checkpointing="full"),
    "llama tensor 4 pipeline 2": _job(seq_len=8192, tensor=4, pipeline=2, gradient_accumulation_steps=4),
    "gpt2 fp32 eager on 24 GB": _job(GPT2, gpu="rtx-4090-24gb", precision="fp32", attention="eager", seq_len=1024),
    "gpt2 autocast sdpa": _job(GPT2, gpu="a100-40gb", precision="autocast-bf16", seq_len=1024),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("target", ["micro_batch_size", "seq_len"])
def test_largest_value_fits_and_the_next_does_not(name, target):
    job = CASES[name]
    answer = solve(job, target)
    if answer.value is None:
        assert not _fits(job, target, 1) and answer.note
        return
    assert _fits(job, target, answer.value)
    assert answer.estimate.gpu is not None and answer.estimate.gpu.fits
    assert not _fits(job, target, answer.value + 1)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_fewest_data_parallel_gpus(stage):
    job = _job(seq_len=2048, data=1, zero_stage=stage, activation_checkpointing="full")
    answer = solve(job, "data")
    assert answer.value is not None and answer.value > 1
    assert _fits(job, "data", answer.value) and not _fits(job, "data", answer.value - 1)


def test_no_data_parallel_degree_helps_without_zero():
    answer = solve(_job(seq_len=4096, data=4, zero_stage=0), "data")
    assert answer.value is None and answer.note is not None and "ZeRO" in answer.note


def test_a_job_that_fits_needs_no_fixes_and_a_batch_of_one_is_reported():
    job = _job(GPT2, gpu="h100-80gb", seq_len=1024)
    assert fixes(job) == ()
    value = solve(job, "micro_batch_size").value
    assert value is not None and value > 1


def test_every_fix_fits_and_they_come_cheapest_first():
    job = _job(seq_len=4096, micro_batch_size=4, data=8, zero_stage=1, gpu="a100-80gb")
    gpu = job.estimate().gpu
    assert gpu is not None and not gpu.fits
    found = fixes(job)
    assert found, "a 8-GPU ZeRO-1 Llama-3-8B job at 4 x 4,096 tokens has single changes that fit"
    kinds = [fix.cost.kind for fix in found]
    assert kinds == sorted(kinds, key=COST_ORDER.index)
    for fix in found:
        varied = job
        for path, value in fix.change.items():
            varied = with_field(varied, path, value)
        result = varied.estimate()
        assert result.gpu is not None and result.gpu.fits and result.peak == fix.estimate.peak
    recompute = next(fix for fix in found if "training.activation_checkpointing" in fix.change)
    extra = recompute.cost.extra_compute
    assert recompute.cost.kind == "compute" and extra is not None and 0 < extra < 0.34
    accumulate = next(fix for fix in found if "training.gradient_accumulation_steps" in fix.change)
    change = accumulate.change
    micro, accumulation = change["training.micro_batch_size"], change["training.gradient_accumulation_steps"]
    assert isinstance(micro, int) and isinstance(accumulation, int) and micro * accumulation == 4


def test_zero_3_costs_half_again_the_traffic():
    # Model states of 16 B per parameter (128 GB) do not fit one A100 80GB; sharded over 8 they do.
    job = _job(seq_len=4096, data=8, zero_stage=0, gpu="a100-80gb")
    zero = {fix.change["parallelism.zero_stage"]: fix.cost for fix in fixes(job)
            if set(fix.change) == {"parallelism.zero_stage"}}
    assert set(zero) == {1, 2, 3}
    # Rajbhandari et al. 2019, section 7: stages 1-2 move 2Ψ per step like data parallelism, stage 3 moves 3Ψ.
    assert zero[3].extra_communication == pytest.approx(0.5)
    assert zero[1].extra_communication == zero[2].extra_communication == 0


def test_what_the_solver_cannot_answer():
    with pytest.raises(core.DomainError) as error:
        solve(Job(architecture=LLAMA), "seq_len")
    assert error.value.field == "gpu"
    with pytest.raises(core.DomainError) as error:
        solve(Job(num_params=7_000_000_000, gpu=core.get_gpu("h100-80gb")), "seq_len")
    assert error.value.field == "model"
    with pytest.raises(core.DomainError) as error:
        solve(_job(), "tensor")
    assert error.value.field == "target"
    # A bare parameter count can still be solved for data-parallel GPUs.
    count = Job(num_params=70_000_000_000, parallelism=core.Parallelism(zero_stage=3),
                gpu=core.get_gpu("h100-80gb"))
    answer = solve(count, "data")
    assert answer.value is not None and answer.value > 1


def test_expert_parallelism_is_offered_for_a_mixture():
    """Mixtral-8x7B on 8 data-parallel H100s (ZeRO-1, full recomputation) does not fit; splitting its experts over the
    GPUs it already has does: the smallest expert degree that fits is offered, with no GPU added."""
    job = Job(architecture=core.get_preset("mixtral-8x7b").architecture,
              training=core.Training(seq_len=4096, precision=core.precision_preset("bf16"),
                                     activation_checkpointing="full"),
              parallelism=core.Parallelism(data=8, zero_stage=1), gpu=core.get_gpu("h100-80gb"))
    capacity = core.get_gpu("h100-80gb").capacity_bytes
    assert job.estimate().peak.bytes > capacity
    offered = [fix for fix in fixes(job) if "parallelism.expert" in fix.change]
    assert len(offered) == 1
    degree = offered[0].change["parallelism.expert"]
    assert isinstance(degree, int)
    assert offered[0].estimate.peak.bytes <= capacity and offered[0].cost.extra_gpus is None
    for smaller in (2, 4):
        if smaller < degree:
            assert with_field(job, "parallelism.expert", smaller).estimate().peak.bytes > capacity


def test_a_newcomer_on_one_gpu_gets_offloading_before_more_gpus():
    # Llama-3-8B, AdamW in bf16 with an fp32 master copy, 4,096 tokens, one H100 80GB: 16 bytes a parameter of
    # model states alone (128 GB) cannot fit; ZeRO-Offload moves 12 of them to the host and runs on one GPU.
    job = Job(architecture=core.get_preset("llama-3-8b").architecture, training=core.Training(seq_len=4096),
              gpu=core.get_gpu("h100-80gb"))
    first = fixes(job)[0]
    assert first.change == {"parallelism.offload": "optimizer", "parallelism.zero_stage": 2}
    assert first.cost.kind == "host" and first.estimate.gpu is not None and first.estimate.gpu.fits
    assert all(fix.cost.kind in ("host", "hardware", "numerics") for fix in fixes(job))  # nothing cheaper fits


def test_zero_without_offload_comes_before_offloading():
    # Eight GPUs: sharding the states over them (no more traffic at stage 1 or 2) is cheaper than moving them to the
    # host, and is offered first.
    job = _job(seq_len=4096, data=8, zero_stage=0, gpu="a100-80gb")
    kinds = [fix.cost.kind for fix in fixes(job)]
    assert "communication" in kinds and "host" in kinds
    assert kinds.index("communication") < kinds.index("host")


def test_a_mixture_with_expert_parallelism_gets_offloading_before_more_gpus():
    job = Job(architecture=core.get_preset("mixtral-8x7b").architecture, training=core.Training(seq_len=4096),
              parallelism=core.Parallelism(data=8, expert=8), gpu=core.get_gpu("h100-80gb"))
    first = fixes(job)[0]
    assert first.change["parallelism.offload"] == "optimizer" and first.cost.kind == "host"


def test_a_paged_optimizer_is_a_fix_whose_cost_is_the_host_link():
    # Llama-2-7B in bf16 with 8-bit AdamW at 2,048 tokens passes an A100 40GB; the paged 8-bit AdamW's 1-byte moments
    # leave the verdict (bitsandbytes pages them to host memory rather than fail), so it fits, at the cost of PCIe.
    job = _job(arch=core.get_preset("llama-2-7b").architecture, gpu="a100-40gb", precision="bf16", seq_len=2048,
               optimizer="adamw-8bit")
    paged = next(fix for fix in fixes(job) if fix.change.get("training.optimizer") == "paged-adamw-8bit")
    assert paged.cost.kind == "host" and "PCIe" in paged.cost.text
    assert paged.estimate.gpu is not None and paged.estimate.gpu.fits


def test_a_verdict_alone_replays_a_job_that_runs_out_once(monkeypatch):
    # A search for a boundary asks only whether a value fits: where the replay within the GPU's room runs out, it is
    # not replayed again without a limit; where the tensors alone pass the room, not replayed at all; where it fits,
    # the estimate is the whole one.
    from app.core import reserve
    replays: list[int | None] = []
    original = reserve.replay

    def counted(*args, **kwargs):
        replays.append(kwargs.get("limit"))
        return original(*args, **kwargs)

    monkeypatch.setattr(reserve, "replay", counted)
    # Gemma 3 1B on an A100 40GB: 3,608 tokens run out within the room (their tensors alone do not pass it), 3,607 fit.
    job = Job(architecture=core.get_preset("gemma-3-1b").architecture, training=core.Training(seq_len=3607),
              gpu=core.get_gpu("a100-40gb"))
    over = with_field(job, "training.seq_len", 3608)
    assert not over.surely_over() and not replays
    assert over.fitting_estimate() is None and len(replays) == 1 and replays[0] is not None
    whole = over.estimate()
    assert whole.gpu is not None and not whole.gpu.fits and len(replays) == 3 and replays[-1] is None
    replays.clear()
    assert job.fitting_estimate() == job.estimate() and len(replays) == 2
    replays.clear()
    tensors_over = with_field(job, "training.seq_len", 131072)  # its tensors alone pass the room: no replay at all
    assert tensors_over.surely_over() and tensors_over.fitting_estimate() is None and not replays


def test_compiling_is_offered_where_it_decides_and_only_where_it_was_measured():
    from app import wire

    # Qwen2.5-1.5B at 4,096 tokens on an A100 40GB: over by what inductor's partitioner does not keep.
    body = {"model": {"preset": "Qwen/Qwen2.5-1.5B"}, "training": {"seq_len": 4096, "micro_batch_size": 1},
            "gpu": "a100-40gb"}
    job = wire.job_from(body)
    given = job.estimate()
    assert given.gpu is not None and not given.gpu.fits
    compiled = [fix for fix in fixes(job, given) if fix.change == {"training.compile": "inductor"}]
    assert len(compiled) == 1 and compiled[0].cost.kind == "throughput" and "compile" in compiled[0].cost.text
    fitted = compiled[0].estimate
    assert fitted.peak.bytes < given.peak.bytes and fitted.gpu is not None and fitted.gpu.fits
    # LoRA under inductor was not measured: the rules refuse it, so it is never offered.
    lora = wire.job_from({**body, "finetuning": {"method": "lora"}, "training": {"seq_len": 65536}})
    verdict = lora.estimate().gpu
    assert verdict is not None and not verdict.fits
    assert not any("training.compile" in fix.change for fix in fixes(lora))


def test_upgrading_bitsandbytes_is_a_free_fix_where_the_stated_release_alone_runs_out():
    # Llama-2-7B under QLoRA at 3,072 tokens on an RTX 4090: bitsandbytes 0.41.1 keeps each 4-bit layer's input
    # through the backward and dequantizes through fp16, which passes 24 GB; a release from 0.43.2 on fits.
    current = with_field(_job(core.get_preset("llama-2-7b").architecture, gpu="rtx-4090-24gb", precision="bf16",
                              seq_len=3072, micro_batch_size=1), "finetuning.method", "qlora")
    old = with_field(current, "finetuning.bitsandbytes_version", "0.41.1")
    now, before = current.estimate().gpu, old.estimate().gpu
    assert now is not None and before is not None and now.fits and not before.fits
    first = fixes(old)[0]
    assert first.change == {"finetuning.bitsandbytes_version": None} and first.cost.kind == "none"
    assert "0.43.2" in first.summary and first.estimate.peak.bytes == current.estimate().peak.bytes
    # At 4,096 tokens neither fits; a release with both changes in it has nothing to upgrade.
    longer = with_field(with_field(old, "finetuning.bitsandbytes_version", "0.43.2"), "training.seq_len", 4096)
    offered = fixes(longer)
    assert offered and not any("finetuning.bitsandbytes_version" in fix.change for fix in offered)


@pytest.mark.parametrize("value", ["0.41", "0.43.2.dev0", "0.42.0+cu118"])
def test_a_bitsandbytes_version_is_a_field_a_question_may_vary(value):
    job = with_field(_job(core.get_preset("llama-2-7b").architecture), "finetuning.method", "qlora")
    assert with_field(job, "finetuning.bitsandbytes_version", value).training.finetuning.bitsandbytes_version == value


@pytest.mark.parametrize("value", ["latest", 41, "0." * 30])
def test_what_is_not_a_version_is_refused_by_name(value):
    with pytest.raises(core.DomainError) as error:
        with_field(_job(), "finetuning.bitsandbytes_version", value)
    assert error.value.field == "finetuning.bitsandbytes_version"
