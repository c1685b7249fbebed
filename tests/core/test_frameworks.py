"""training.framework = fsdp2 and megatron: each convention's model states against its source.

Megatron-LM's distributed optimizer documents its bytes per parameter (docs/source/api-guide/dist_optimizer.md,
"Data flow" table; d is the data-parallel size):

    fp16 parameters, fp16 gradients: 20 without the distributed optimizer, 4 + 16/d with it
    bf16 parameters, fp32 gradients: 18, 6 + 12/d
    fp32 parameters, fp32 gradients: 16, 8 + 8/d

FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py): the sharded parameter keeps the dtype it had when
fully_shard was applied (fp32 for a mixed-precision run), MixedPrecisionPolicy.param_dtype only applies to the
all-gather, and the sharded gradient is cast back to the parameter's dtype after the reduce-scatter
(_fsdp_collectives.py, foreach_reduce): 4 + 4 + 8 = 16 bytes per parameter over N with AdamW, all sharded.
"""

from dataclasses import replace

import pytest

from app import core

MODEL_STATE_KEYS = ("weights", "master_weights", "optimizer_states", "gradients", "megatron.fp32_main_grads")
ARCH = core.get_preset("llama-3-8b").architecture


def states_bytes(estimate: core.Estimate) -> int:
    return sum(buffer.bytes for buffer in estimate.ledger if buffer.key in MODEL_STATE_KEYS)


@pytest.mark.parametrize(("preset", "replicated", "sharded", "unsharded"), [
    ("fp16-fp32-master", 4, 16, 20),
    ("megatron-bf16", 6, 12, 18),
    ("fp32", 8, 8, 16),
])
@pytest.mark.parametrize("data", [1, 8, 64])
def test_megatron_bytes_per_parameter(preset: str, replicated: int, sharded: int, unsharded: int, data: int) -> None:
    """Megatron-LM's table, on a model whose parameter count every data degree here divides."""
    training = core.Training(precision=core.precision_preset(preset), implementation="megatron", framework="megatron")
    estimate = core.estimate(architecture=ARCH, training=training,
                             parallelism=core.Parallelism(data=data, zero_stage=1 if data > 1 else 0))
    params = estimate.param_count
    assert params % 64 == 0
    expected = replicated * params + sharded * params // data if data > 1 else unsharded * params
    assert states_bytes(estimate) == expected


def test_megatron_convention_needs_megatron() -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=core.Training(framework="megatron"))
    assert caught.value.field == "training.framework"
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=core.Training(framework="megatron", implementation="megatron"),
                      parallelism=core.Parallelism(data=8, zero_stage=2))
    assert caught.value.field == "parallelism.zero_stage"


@pytest.mark.parametrize("data", [8, 64])
def test_fsdp2_model_states_are_sixteen_bytes_over_n(data: int) -> None:
    training = core.Training(precision=core.precision_preset("bf16-fp32-master"), framework="fsdp2")
    estimate = core.estimate(architecture=ARCH, training=training,
                             parallelism=core.Parallelism(data=data, zero_stage=3))
    params = estimate.param_count
    by_key = {buffer.key: buffer.bytes for buffer in estimate.ledger}
    assert "master_weights" not in by_key  # the sharded fp32 parameter is the master copy
    assert by_key["weights"] == 4 * params // data
    assert by_key["optimizer_states"] == 8 * params // data
    sharded_grads = sum(value for key, value in by_key.items() if key.startswith("gradients."))
    assert sharded_grads == 4 * params // data


def test_fsdp2_gathers_in_the_weights_dtype() -> None:
    """A layer of Llama-3-8B holds 218,112,000 parameters (4,096² × 2 + 4,096 × 1,024 × 2 for attention,
    3 × 4,096 × 14,336 for the MLP, 2 × 4,096 for its norms): two of them gathered in bf16."""
    training = core.Training(precision=core.precision_preset("bf16-fp32-master"), framework="fsdp2")
    estimate = core.estimate(architecture=ARCH, training=training,
                             parallelism=core.Parallelism(data=8, zero_stage=3))
    by_key = {buffer.key: buffer.bytes for buffer in estimate.ledger}
    layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000
    assert by_key["fsdp2.gathered.layers"] == 2 * layer * 2
    assert by_key["fsdp2.unsharded_grad.layers"] == layer * 2
    assert "FSDP2 convention" in next(b.formula for b in estimate.ledger if b.key == "fsdp2.gathered.root")


def test_fsdp2_needs_zero_3_and_the_same_total_as_pytorch() -> None:
    with pytest.raises(core.DomainError) as caught:
        core.estimate(architecture=ARCH, training=core.Training(framework="fsdp2"),
                      parallelism=core.Parallelism(data=8, zero_stage=2))
    assert caught.value.field == "parallelism.zero_stage"
    training = core.Training(precision=core.precision_preset("bf16-fp32-master"))
    layout = core.Parallelism(data=8, zero_stage=3)
    pytorch = core.estimate(architecture=ARCH, training=training, parallelism=layout)
    fsdp2 = core.estimate(architecture=ARCH, training=replace(training, framework="fsdp2"), parallelism=layout)
    # The convention moves bytes between categories (no 16-bit sharded copy; fp32 sharded gradients), not their
    # sum: 2 + 2 + 4 + 8 and 4 + 4 + 8 bytes per parameter over N.
    def persistent(estimate: core.Estimate) -> int:
        return sum(buffer.bytes for buffer in estimate.ledger
                   if buffer.key in ("weights", "master_weights", "optimizer_states") or buffer.key.startswith("gradients."))

    assert persistent(fsdp2) == persistent(pytorch) == 16 * pytorch.param_count // 8


def _peak_and_ledger(training: core.Training, parallelism: core.Parallelism) -> tuple[int, list[tuple[str, int]]]:
    result = core.estimate(architecture=ARCH, training=training, parallelism=parallelism)
    return result.peak.bytes, [(buffer.key, buffer.bytes) for buffer in result.ledger]


def test_hf_trainer_is_pytorch_with_the_trainers_loop() -> None:
    """Trainer.compute_loss returns the loss alone: the logits go before backward whatever training.loop says."""
    base = core.Training(precision=core.precision_preset("bf16-fp32-master"), loop="plain")
    layout = core.Parallelism(data=8, zero_stage=1)
    trainer = _peak_and_ledger(replace(base, framework="hf-trainer"), layout)
    assert trainer == _peak_and_ledger(replace(base, loop="hf-trainer"), layout)
    assert trainer != _peak_and_ledger(base, layout)


@pytest.mark.parametrize(("zero_stage", "convention"), [(3, "fsdp2"), (1, "pytorch")])
def test_torchtitan_is_fsdp2_at_zero_3_with_its_loop(zero_stage: int, convention: str) -> None:
    base = core.Training(precision=core.precision_preset("bf16-fp32-master"), loop="plain")
    layout = core.Parallelism(data=8, zero_stage=zero_stage)
    titan = _peak_and_ledger(replace(base, framework="torchtitan"), layout)
    assert titan == _peak_and_ledger(replace(base, framework=convention, loop="hf-trainer"), layout)


def test_trainer_and_torchtitan_refuse_megatron() -> None:
    for framework in ("hf-trainer", "torchtitan"):
        with pytest.raises(core.DomainError) as caught:
            core.estimate(architecture=ARCH, training=core.Training(framework=framework, implementation="megatron"))
        assert caught.value.field == "training.framework"
