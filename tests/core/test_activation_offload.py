"""Activation offloading (torchtune's, and transformers' offloaded checkpoints): the layers' inputs move to pinned
host memory, the GPU keeps the copies in flight, the solver offers it, and the setups it is not modelled for are
refused by name."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app import core
from app.core.job import Job
from app.core.solver import fixes
from app.main import app

QWEN = core.get_preset("qwen2.5-7b").architecture  # 28 layers, hidden_size 3,584
# One layer's input at s = 4,096, b = 1 in bf16: 4,096 × 3,584 × 2 B; pinned memory rounds it up to 2^25
INPUT = 4096 * 3584 * 2
PINNED = 1 << 25


def _estimate(offload: str, seq_len: int = 4096) -> core.Estimate:
    run = core.Training(seq_len=seq_len, activation_checkpointing="full", activation_offload=offload)
    return core.estimate(architecture=QWEN, training=run, reserve=False)


def _at(result: core.Estimate, event: str) -> int:
    return next(point.bytes for point in result.timeline if point.event == event and point.step == 1)


def test_the_host_holds_each_layers_input_in_a_power_of_two_block():
    moved = _estimate("torchtune")
    assert INPUT == 29_360_128 and PINNED >= INPUT > PINNED // 2
    assert moved.host is not None
    assert [b.key for b in moved.host.ledger] == ["activations.offloaded"]
    assert moved.host.per_gpu["activations"] == 28 * PINNED
    assert next(b.bytes for b in moved.ledger if b.key == "activations.layers") == 0


@pytest.mark.parametrize(("event", "left_on_gpu"), [
    ("forward: layer 28", 5),  # torchtune's max_fwd_stash_size: the last five inputs until their copies are done
    ("backward: loss gradients", 0),  # every input on the host
    ("backward: output layer", 0),
    ("backward: layer 28", 1),  # the input copied back for the top layer's recomputation
])
def test_the_gpu_holds_what_is_in_flight_and_nothing_else(event, left_on_gpu):
    kept, moved = _estimate("none"), _estimate("torchtune")
    assert _at(kept, event) - _at(moved, event) == (28 - left_on_gpu) * INPUT


def test_the_peak_falls_by_the_moved_inputs_when_it_is_at_the_loss():
    kept, moved = _estimate("none", 65_536), _estimate("torchtune", 65_536)
    assert kept.peak.event == moved.peak.event == "backward: loss gradients"
    assert kept.peak.bytes - moved.peak.bytes == 28 * 65_536 * 3584 * 2


@pytest.mark.parametrize(("event", "left_on_gpu"), [
    ("forward: layer 28", 0),  # save_on_cpu copies on the compute stream: no GPU copy waits for its transfer
    ("backward: loss gradients", 0),
    ("backward: layer 28", 1),  # the input copied back for the top layer's recomputation
])
def test_offloaded_checkpoints_leave_no_stash_on_the_gpu(event, left_on_gpu):
    kept, moved = _estimate("none"), _estimate("checkpoints-to-host")
    assert _at(kept, event) - _at(moved, event) == (28 - left_on_gpu) * INPUT
    assert moved.host is not None and moved.host.per_gpu["activations"] == 28 * PINNED


def test_offloaded_checkpoints_take_every_input_however_small():
    # hidden 64, s 4, bf16: each input 4 × 64 × 2 = 512 B; torchtune leaves tensors under 1,024 B on the GPU,
    # save_on_cpu moves every one (counted on CPU: tests/validation/test_activation_offload.py)
    arch = core.architecture_from_hf_config({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                             "num_hidden_layers": 2, "num_attention_heads": 4,
                                             "num_key_value_heads": 2, "vocab_size": 512})
    host = {}
    for offload in ("torchtune", "checkpoints-to-host"):
        run = core.Training(seq_len=4, precision=core.precision_preset("bf16"), activation_checkpointing="full",
                            activation_offload=offload)
        result = core.estimate(architecture=arch, training=run, reserve=False)
        host[offload] = result.host.per_gpu.total_bytes if result.host else 0
    assert host == {"torchtune": 0, "checkpoints-to-host": 2 * 512}


@pytest.mark.parametrize("offload", ["torchtune", "checkpoints-to-host"])
@pytest.mark.parametrize(("training", "parallelism", "words"), [
    ({"activation_checkpointing": "none"}, {}, "activation_checkpointing full"),
    ({"activation_checkpointing": "selective"}, {}, "activation_checkpointing full"),
    ({"recompute_every": 2}, {}, "every layer recomputed"),
    ({"implementation": "megatron"}, {}, "choose megatron"),
    ({}, {"pipeline": 2}, "pipeline"),
])
def test_setups_not_modelled_are_refused_by_name(training, parallelism, words, offload):
    run = core.Training(**{"seq_len": 4096, "activation_checkpointing": "full", "activation_offload": offload,
                           **training})
    with pytest.raises(core.DomainError, match=words) as error:
        core.estimate(architecture=QWEN, training=run, parallelism=core.Parallelism(**parallelism), reserve=False)
    assert error.value.field == "training.activation_offload"


def test_the_api_refuses_with_a_422_naming_the_field():
    body = {"model": {"preset": "qwen2.5-7b"}, "training": {"activation_offload": "torchtune"}}
    response = TestClient(app).post("/api/v1/estimate", json=body)
    assert response.status_code == 422
    assert "activation_offload" in response.json()["detail"][0]["loc"]


def test_the_api_reports_the_moved_inputs_in_the_host_section():
    body = {"model": {"preset": "qwen2.5-7b"},
            "training": {"seq_len": 4096, "activation_checkpointing": "full", "activation_offload": "torchtune"}}
    response = TestClient(app).post("/api/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    host = response.json()["host"]
    assert host["per_gpu"]["activations"] == host["per_gpu"]["total"] == 28 * PINNED


def test_a_long_sequence_that_does_not_fit_is_offered_offloading():
    # Llama 3.2 1B at 393,216 tokens: 16 inputs of 393,216 × 2,048 × 2 B = 1.5 GiB, each in a 2 GiB pinned block
    arch, gpu = core.get_preset("llama-3.2-1b").architecture, core.get_gpu("h100-80gb")
    run = core.Training(seq_len=393_216, activation_checkpointing="full", loss="fused-linear",
                        optimizer_implementation="fused", loop="hf-trainer", allocator="expandable-segments")
    job = Job(architecture=arch, training=run, gpu=gpu)
    verdict = job.estimate().gpu
    assert verdict is not None and not verdict.fits
    offered = [fix for fix in fixes(job) if "training.activation_offload" in fix.change]
    assert [fix.change for fix in offered] == [{"training.activation_offload": "torchtune"}]
    assert offered[0].cost.kind == "host"
    assert "32.0 GiB of pinned host memory" in offered[0].cost.text  # 16 × 2 GiB
    assert "48.0 GiB over PCIe" in offered[0].cost.text  # 2 × 16 × 1.5 GiB


def test_without_recomputation_the_fix_turns_it_on_too():
    arch, gpu = core.get_preset("llama-3.2-1b").architecture, core.get_gpu("h100-80gb")
    job = Job(architecture=arch, training=core.Training(seq_len=393_216, loss="fused-linear"), gpu=gpu)
    offered = [fix for fix in fixes(job) if "training.activation_offload" in fix.change]
    assert offered and offered[0].change["training.activation_checkpointing"] == "full"
    assert (offered[0].cost.extra_compute or 0) > 0


def test_with_some_layers_recomputed_the_fix_recomputes_them_all():
    arch, gpu = core.get_preset("llama-3.2-1b").architecture, core.get_gpu("h100-80gb")
    run = core.Training(seq_len=393_216, activation_checkpointing="full", recompute_every=2, loss="fused-linear")
    offered = [fix for fix in fixes(Job(architecture=arch, training=run, gpu=gpu))
               if "training.activation_offload" in fix.change]
    assert offered and offered[0].change == {"training.activation_offload": "torchtune", "training.recompute_every": 1,
                                             "training.recompute_first_layers": None}


def test_under_the_trainer_the_fix_is_transformers_offload():
    arch, gpu = core.get_preset("llama-3.2-1b").architecture, core.get_gpu("h100-80gb")
    run = core.Training(seq_len=393_216, activation_checkpointing="full", loss="fused-linear", framework="hf-trainer",
                        optimizer_implementation="fused", loop="hf-trainer", allocator="expandable-segments")
    offered = [fix for fix in fixes(Job(architecture=arch, training=run, gpu=gpu))
               if "training.activation_offload" in fix.change]
    assert [fix.change for fix in offered] == [{"training.activation_offload": "checkpoints-to-host"}]
    assert "32.0 GiB of pinned host memory" in offered[0].cost.text  # 16 × 2 GiB, as torchtune's
    assert "compute stream" in offered[0].cost.text
