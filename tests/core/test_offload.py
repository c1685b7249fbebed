"""Offloading moves model states to host memory: the GPU holds less, the host what moved, nothing is lost."""

from __future__ import annotations

import pytest

from app import core

LLAMA = core.get_preset("llama-3-8b").architecture
PARAMS = 8_030_261_248


def _estimate(offload: str, zero: int, data: int = 8, **parallelism) -> core.Estimate:
    return core.estimate(architecture=LLAMA, training=core.Training(seq_len=2048),
                         parallelism=core.Parallelism(data=data, zero_stage=zero, offload=offload, **parallelism))


def test_optimizer_offload_moves_state_and_master_to_the_host():
    kept, moved = _estimate("none", 2), _estimate("optimizer", 2)
    assert moved.host is not None
    for category in ("optimizer_states", "master_weights"):
        assert moved.per_gpu[category] == 0
        assert moved.host.per_gpu[category] == kept.per_gpu[category]
    # ZeRO-Offload's CPU update reads an fp32 copy of this rank's gradient partition (Ren et al. 2021, section 4).
    assert moved.host.per_gpu["gradients"] == -(-PARAMS // 8) * 4
    assert moved.peak.bytes < kept.peak.bytes
    assert moved.host.gpus_per_node == 8 and moved.host.per_node_bytes == 8 * moved.host.per_gpu.total_bytes


def test_parameter_offload_keeps_only_the_gathered_layers_on_the_gpu():
    params, optimizer = _estimate("optimizer+parameters", 3), _estimate("optimizer", 3)
    assert params.host is not None
    gathered = {b.key for b in params.ledger if b.category == "weights"}
    assert gathered == {"zero.gathered.layers", "zero.gathered.embedding", "zero.gathered.head"}
    assert params.host.per_gpu["weights"] == -(-PARAMS * 2 // 8)  # the bf16 partition, ZeRO-3 over 8
    on_gpu, without_parameters = params.per_gpu["weights"], optimizer.per_gpu["weights"]
    assert on_gpu is not None and without_parameters is not None and on_gpu < without_parameters


def test_host_per_node_counts_only_the_gpus_there_are():
    small = _estimate("optimizer", 1, data=2, gpus_per_node=8)
    assert small.host is not None and small.host.gpus_per_node == 2


@pytest.mark.parametrize("offload, zero, message", [
    ("optimizer", 0, "ZeRO stage 1, 2 or 3"), ("optimizer+parameters", 2, "stage 3"), ("disk", 3, "one of"),
])
def test_offload_needs_its_zero_stage(offload, zero, message):
    with pytest.raises(core.DomainError, match=message) as error:
        _estimate(offload, zero)
    assert error.value.field == "parallelism.offload"


def test_no_offload_no_host():
    assert _estimate("none", 3).host is None
