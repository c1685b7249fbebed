"""The step replayed through the allocator: how buffers become tensors, the verdict under pressure, and the fix that
costs nothing."""

from __future__ import annotations

import dataclasses

import pytest

from app import core
from app.core import reserve
from app.core.finetuning import Finetuning
from app.core.job import Job
from app.core.reserve import _pack_small, split
from app.core.solver import fixes

LLAMA = core.get_preset("llama-3-8b").architecture
H100 = core.get_gpu("h100-80gb")
MIB = 1 << 20


def test_split_is_proportional_and_loses_no_byte():
    assert split(100, (1, 1, 2)) == (25, 25, 50)
    assert split(101, (1, 2)) == (33, 68)
    assert split(10, (1,)) == (10,) and split(0, (1, 2)) == ()


def test_small_tensors_are_packed_up_to_a_mebibyte_where_the_first_stood():
    big = 4 * MIB
    assert _pack_small((100, big, 600, 300 * 1024, big)) == (512 + 1024 + 300 * 1024, big, big)
    assert _pack_small((MIB, 1)) == (MIB, 512)  # 1 MiB is full: the next starts a piece of its own


def _lora(seq_len: int, **changes) -> core.Training:
    return core.Training(seq_len=seq_len, activation_checkpointing="full", finetuning=Finetuning(method="lora"),
                         precision=core.precision_preset("bf16"), **changes)


def test_the_reserve_holds_at_least_the_tensors():
    for training in (core.Training(), _lora(4096), core.Training(seq_len=4096, allocator="expandable-segments")):
        result = core.estimate(architecture=LLAMA, training=training)
        assert result.peak.reserved_bytes >= result.peak.bytes
        assert len(result.reserved_timeline) == len(result.timeline)
        assert all(reserved >= point.bytes for reserved, point in zip(result.reserved_timeline, result.timeline,
                                                                       strict=True))


def test_near_the_capacity_the_cache_is_released_before_the_allocator_gives_up():
    # Without a limit the default allocator would reserve more than the H100 has; within it, freeing its cached
    # segments lets the step run: it fits, with the reserve capped by the capacity.
    training = _lora(26624)
    free = core.estimate(architecture=LLAMA, training=training)
    on_h100 = core.estimate(architecture=LLAMA, training=training, gpu=H100)
    assert free.peak.reserved_bytes > H100.capacity_bytes - H100.context_bytes
    assert on_h100.gpu is not None and on_h100.gpu.fits
    assert on_h100.peak.reserved_bytes <= H100.capacity_bytes - H100.context_bytes


def test_expandable_segments_come_first_when_they_decide():
    job = Job(architecture=LLAMA, training=_lora(30720), gpu=H100)
    given = job.estimate()
    assert given.gpu is not None and not given.gpu.fits
    found = fixes(job, given)
    assert found and found[0].change == {"training.allocator": "expandable-segments"}
    assert found[0].cost.kind == "none"
    assert found[0].estimate.gpu is not None and found[0].estimate.gpu.fits


def _stage_reserve_of(job: Job, monkeypatch: pytest.MonkeyPatch) -> tuple[reserve.StageReserve, dict]:
    """The stage's reserve as the estimate worked it out, with the arguments it was worked out from."""
    seen: list[tuple[reserve.StageReserve, dict]] = []
    original = reserve.stage_reserve

    def recorded(*args, **kwargs):
        result = original(*args, **kwargs)
        seen.append((result, {"args": args, "kwargs": kwargs}))
        return result

    monkeypatch.setattr(reserve, "stage_reserve", recorded)
    job.estimate()
    monkeypatch.undo()
    return seen[0]


@pytest.mark.parametrize("seq_len, fits, released", [(4096, True, False), (26624, True, True), (30720, False, True)])
def test_the_replay_within_the_room_stands_for_the_replay_without_a_limit(seq_len, fits, released, monkeypatch):
    # The allocator's answer on a GPU, replayed once within its room: the replay without a limit where that stays
    # within the room, the replay within it where the cache had to be released, and where even that runs out the
    # replay without a limit, which says how far past the room the step goes.
    result, call = _stage_reserve_of(Job(architecture=LLAMA, training=_lora(seq_len), gpu=H100), monkeypatch)
    ledger, steps, ramps = call["args"]
    kwargs = call["kwargs"]
    room = reserve.allocator_room(H100, kwargs["extra_bytes"] + kwargs["communicator_bytes"])
    args = {"templates": kwargs["templates"], "forward_transient": kwargs["forward_transient"], "kind": kwargs["kind"],
            "preallocated": (H100.workspace_bytes,), "fold": kwargs["fold"]}
    replayed = [buffer for buffer in ledger if buffer.key != reserve.OUTSIDE_KEY]
    free = reserve.replay(replayed, steps, ramps, **args)
    bounded = reserve.replay(replayed, steps, ramps, limit=room, **args)
    assert (free.max_bytes > room) == released
    assert result.out_of_memory == (not fits)
    assert result.reserved == (bounded if fits else free)
    if not released:
        assert bounded == free
    verdict = reserve.stage_reserve(ledger, steps, ramps, **kwargs | {"verdict_only": True})
    assert verdict.out_of_memory == (not fits) and verdict.reserved == bounded


@pytest.mark.parametrize("allocator", ["default", "expandable-segments"])
def test_the_extra_the_user_sets_lies_outside_the_allocator(allocator):
    base = core.estimate(architecture=LLAMA, training=core.Training(allocator=allocator), gpu=H100)
    extra = core.estimate(architecture=LLAMA, training=core.Training(allocator=allocator,
                                                                     framework_overhead_bytes=512 * MIB), gpu=H100)
    assert extra.peak.reserved_bytes == base.peak.reserved_bytes
    assert extra.gpu is not None and base.gpu is not None
    assert extra.gpu.outside_bytes == base.gpu.outside_bytes + 512 * MIB
    assert extra.gpu.headroom_bytes == base.gpu.headroom_bytes - 512 * MIB


def test_an_unknown_allocator_is_refused_by_name():
    with pytest.raises(core.DomainError) as error:
        core.estimate(architecture=LLAMA, training=dataclasses.replace(core.Training(), allocator="buddy"))
    assert error.value.field == "training.allocator"


def _folded(result: core.Estimate) -> bool:
    return any("allocator's replay moved" in warning for warning in result.warnings)


@pytest.mark.parametrize("name", sorted(core.model_presets()))
def test_every_preset_is_replayed_layer_by_layer(name):
    result = core.estimate(architecture=core.get_preset(name).architecture, training=core.Training())
    assert not _folded(result)


@pytest.mark.parametrize("layers, allocator", [(300, "default"), (1000, "expandable-segments")])
def test_a_model_of_thousands_of_layers_is_replayed_several_layers_at_a_time(layers, allocator, monkeypatch):
    # 1,000 layers made 64,100 tensors, 424 ms of CPU; folded, at most MAX_REPLAYED_TENSORS, and the reserve moved by
    # at most 0.2% against the replay layer by layer (docs/VALIDATION.md, "A replay of many layers").
    arch = dataclasses.replace(LLAMA, num_hidden_layers=layers)
    training = core.Training(allocator=allocator)
    made: list[int] = []
    malloc = reserve.CachingAllocator.malloc

    def counted(allocator, size):
        made.append(size)
        return malloc(allocator, size)

    monkeypatch.setattr(reserve.CachingAllocator, "malloc", counted)
    budget = reserve.MAX_REPLAYED_TENSORS
    folded = core.estimate(architecture=arch, training=training)
    assert _folded(folded) and len(made) <= budget
    made.clear()
    monkeypatch.setattr(reserve, "MAX_REPLAYED_TENSORS", 10**9)
    whole = core.estimate(architecture=arch, training=training)
    assert not _folded(whole) and len(made) > budget
    assert folded.peak.bytes == whole.peak.bytes  # the tensors are not folded, only their replay
    assert abs(folded.peak.reserved_bytes / whole.peak.reserved_bytes - 1) < 0.005
