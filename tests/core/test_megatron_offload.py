"""Megatron-LM's activation offloading (--cpu-offloading-num-layers N, Transformer Engine's CPU offload context): the
first N layers' saved tensors of at least 262,144 elements move to pinned host memory and the GPU holds at most L - N
layers' saved tensors at once; Megatron-LM's own checks are the estimate's; its command line turns it on; the solver
offers it where Megatron-LM allows it. Modelled from source (app.core.activation_offload), by hand here."""

from __future__ import annotations

import pytest

from app import core
from app.core.activation_offload import pinned_bytes
from app.core.job import Job
from app.core.solver import fixes
from tests.configs.helpers import ignored, imported

LLAMA = core.get_preset("llama-2-7b").architecture  # 32 layers, hidden 4,096, 32 heads
PARALLEL = core.Parallelism(tensor=8, sequence_parallel=True)
SMALL = 256 * 1024


def _estimate(offloaded: int = 0, *, seq_len: int = 16384, **training: object) -> core.Estimate:
    run = core.Training(micro_batch_size=1, seq_len=seq_len, precision=core.precision_preset("megatron-bf16"),
                        implementation="megatron", attention="flash",
                        activation_offload="megatron" if offloaded else "none", activation_offload_layers=offloaded,
                        **training)  # type: ignore[arg-type]
    return core.estimate(architecture=LLAMA, training=run, parallelism=PARALLEL, gpu=core.get_gpu("h100-80gb"))


def _at(result: core.Estimate, event: str) -> int:
    return next(point.bytes for point in result.timeline if point.event == event and point.step == 1)


def _split(result: core.Estimate) -> tuple[int, int, int]:
    """One layer's saved bytes, those of its tensors under 262,144 elements, and the pinned bytes of the others."""
    layer = result.layer_activations
    small = [x for x in layer if 0 < x.elements < SMALL]
    return (sum(x.bytes for x in layer), sum(x.bytes for x in small),
            sum(pinned_bytes(x.bytes) for x in layer if x not in small))


@pytest.mark.parametrize("offloaded", [1, 8, 16, 31])
def test_at_the_loss_only_the_layers_not_offloaded_and_the_small_tensors_remain(offloaded):
    plain, moved = _estimate(), _estimate(offloaded)
    each, small, _ = _split(plain)
    # At b = 1, s = 16,384 over 8 ranks: the flash kernel's fp32 log-sum-exp, 32 heads ÷ 8 × 16,384 = 65,536
    # elements, is the one tensor that stays; the rest (b·s·h ÷ 8 = 8,388,608 elements and up) moves.
    assert small == 65_536 * 4
    for event in ("forward: layer 32", "forward: loss", "backward: layer 32"):
        assert _at(plain, event) - _at(moved, event) == offloaded * (each - small)


@pytest.mark.parametrize("event", ["forward: layer 1", "backward: layer 1"])
def test_the_lowest_layer_is_on_the_gpu_whole_at_its_forward_and_backward(event):
    assert _at(_estimate(8), event) == _at(_estimate(), event)


def test_the_host_holds_the_offloaded_layers_in_pinned_blocks():
    moved = _estimate(8)
    _, _, pinned = _split(moved)
    assert moved.host is not None and [b.key for b in moved.host.ledger] == ["activations.offloaded"]
    assert moved.host.per_gpu["activations"] == 8 * pinned
    assert _estimate().host is None


def test_the_reserved_peak_falls_with_the_layers_offloaded():
    reserved = [_estimate(n).peak.reserved_bytes for n in (0, 8, 16, 31)]
    assert reserved == sorted(reserved, reverse=True) and reserved[0] > reserved[-1]


@pytest.mark.parametrize(("training", "parallelism", "field"), [
    ({"activation_checkpointing": "full"}, {}, "training.activation_offload"),
    ({"activation_checkpointing": "selective"}, {}, "training.activation_offload"),
    ({"implementation": "transformers"}, {}, "training.activation_offload"),
    ({}, {"pipeline": 2}, "training.activation_offload"),
    ({"activation_offload_layers": 0}, {}, "training.activation_offload_layers"),
    ({"activation_offload_layers": 32}, {}, "training.activation_offload_layers"),
    ({"activation_offload": "none", "activation_offload_layers": 4}, {}, "training.activation_offload_layers"),
])
def test_what_megatron_lm_refuses_is_refused_by_name(training, parallelism, field):
    # transformer_config.py at d98e8a6: no recomputation of any granularity, no pipeline parallelism, and
    # 0 < cpu_offloading_num_layers < num_layers.
    run = dict(implementation="megatron", precision=core.precision_preset("megatron-bf16"),
               activation_offload="megatron", activation_offload_layers=4) | training
    with pytest.raises(core.DomainError) as error:
        core.estimate(architecture=LLAMA, training=core.Training(**run),
                      parallelism=core.Parallelism(**({"tensor": 8} | parallelism)))
    assert error.value.field == field


LAUNCH = ("pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 8192 "
          "--max-position-embeddings 8192 --micro-batch-size 1 --bf16 --tensor-model-parallel-size 8 "
          "--sequence-parallel --use-flash-attn ")


def test_the_command_line_turns_it_on_with_its_layer_count():
    answer = imported("megatron", LAUNCH + "--cpu-offloading-num-layers 8 --cpu-offloading-retain-pinned-cpu-buffers")
    training = answer["request"]["training"]
    assert training["activation_offload"] == "megatron" and training["activation_offload_layers"] == 8
    assert "--cpu-offloading-retain-pinned-cpu-buffers" in ignored(answer)


def test_zero_layers_offloads_nothing():
    answer = imported("megatron", LAUNCH + "--cpu-offloading-num-layers 0")
    assert "activation_offload" not in answer["request"]["training"]
    assert "--cpu-offloading-num-layers" in ignored(answer)


def test_the_solver_offers_it_where_megatron_lm_allows_it():
    run = core.Training(micro_batch_size=1, seq_len=131072, precision=core.precision_preset("megatron-bf16"),
                        implementation="megatron", attention="flash")
    found = fixes(Job(architecture=LLAMA, training=run, parallelism=PARALLEL, gpu=core.get_gpu("h100-80gb")))
    offered = {fix.change.get("training.activation_offload_layers") for fix in found
               if fix.change.get("training.activation_offload") == "megatron"}
    assert offered == {16, 31}
    recomputing = Job(architecture=LLAMA, training=core.Training(
        micro_batch_size=1, seq_len=131072, precision=core.precision_preset("megatron-bf16"), implementation="megatron",
        attention="flash", activation_checkpointing="selective"), parallelism=PARALLEL, gpu=core.get_gpu("h100-80gb"))
    assert not any(fix.change.get("training.activation_offload") == "megatron" for fix in fixes(recomputing))
