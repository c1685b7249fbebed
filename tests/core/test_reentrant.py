"""The reentrant checkpoint (training.use_reentrant): the rebuilt layer's output held through its backward, and
refused where it was not measured."""

from __future__ import annotations

import pytest

from app import core
from app.core import Parallelism, Training

ARCH = core.get_preset("llama-3.2-1b").architecture


def _output(training: Training) -> core.Buffer | None:
    result = core.estimate(architecture=ARCH, training=training, reserve=False)
    return next((b for b in result.ledger if b.key == "recompute.output"), None)


def test_the_reentrant_checkpoint_holds_one_layer_output_more():
    training = Training(activation_checkpointing="full", seq_len=4096, micro_batch_size=2, use_reentrant=True)
    output = _output(training)
    assert output is not None
    assert output.bytes == 2 * 4096 * ARCH.hidden_size * 2  # b × s × h in bf16, the residual stream's dtype
    assert _output(Training(activation_checkpointing="full", seq_len=4096, micro_batch_size=2)) is None


def test_under_autocast_the_output_is_the_residual_streams_width():
    training = Training(activation_checkpointing="full", use_reentrant=True,
                        precision=core.precision_preset("autocast-bf16"))
    output = _output(training)
    assert output is not None and output.bytes == 2048 * ARCH.hidden_size * 4


@pytest.mark.parametrize(("training", "parallelism"), [
    (Training(use_reentrant=True), Parallelism()),
    (Training(activation_checkpointing="selective", use_reentrant=True), Parallelism()),
    (Training(activation_checkpointing="full", recompute_every=2, use_reentrant=True), Parallelism()),
    (Training(activation_checkpointing="full", use_reentrant=True), Parallelism(tensor=2)),
    (Training(activation_checkpointing="full", implementation="megatron", use_reentrant=True), Parallelism()),
])
def test_refused_where_not_measured(training, parallelism):
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=training, parallelism=parallelism)
    assert caught.value.field == "training.use_reentrant"


def test_not_measured_with_compile_or_beside_offloading_compiled():
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=Training(activation_checkpointing="full", use_reentrant=True,
                                                           compile="inductor", precision=core.precision_preset("bf16")))
    assert caught.value.field == "training.use_reentrant"
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=Training(activation_checkpointing="full", compile="inductor",
                                                           activation_offload="torchtune",
                                                           precision=core.precision_preset("bf16")))
    assert caught.value.field == "training.activation_offload"
