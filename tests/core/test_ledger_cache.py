"""The model states' buffers are kept per every training input but those named in `ledger.STEP_ONLY`: each of those
is checked here to leave the buffers as they are, computed afresh without the cache."""

from __future__ import annotations

import dataclasses

import pytest

from app import core
from app.core import ledger
from app.core.finetuning import Finetuning
from app.core.setup import activation_setup
from app.core.stages import stage_kinds

# Two values each field may take in every setup below.
OTHER = {"micro_batch_size": 4, "seq_len": 8192, "gradient_accumulation_steps": 3, "attention": "eager",
         "activation_checkpointing": "full", "recompute_every": 2, "recompute_first_layers": 3, "compile": "inductor",
         "activation_offload": "torchtune", "activation_offload_layers": 4, "loss": "chunked", "loss_chunks": 4, "loop": "hf-trainer",
         "allocator": "expandable-segments", "framework_overhead_bytes": 1 << 30}
SETUPS = [
    ("llama-3-8b", core.Training(), core.Parallelism(data=8, zero_stage=3)),
    ("mixtral-8x7b", core.Training(finetuning=Finetuning(method="lora", target_modules=("q_proj", "v_proj"))),
     core.Parallelism(pipeline=2, tensor=2)),
    ("llama-3-8b", core.Training(framework="deepspeed"), core.Parallelism(data=4, zero_stage=2, offload="optimizer")),
]


def _states(preset: str, training: core.Training, parallelism: core.Parallelism) -> tuple:
    arch = core.get_preset(preset).architecture
    kind = stage_kinds(arch, pipeline=parallelism.pipeline, micro_batches=training.gradient_accumulation_steps)[-1]
    setup = activation_setup(training, parallelism)
    stage = ledger._Stage(arch, training, parallelism, kind, setup, (), texts=True)
    stage.model_states()
    stage.host_gradients()
    stage.deepspeed_states()
    return tuple(stage.buffers), tuple(stage.host)


def test_every_step_only_field_has_another_value_here():
    assert set(OTHER) == set(ledger.STEP_ONLY)


@pytest.mark.parametrize(("preset", "training", "parallelism"), SETUPS)
@pytest.mark.parametrize("name", ledger.STEP_ONLY)
def test_a_step_only_field_leaves_the_model_states_as_they_are(preset, training, parallelism, name):
    changed = dataclasses.replace(training, **{name: OTHER[name]})
    assert _states(preset, changed, parallelism) == _states(preset, training, parallelism)


def test_a_field_outside_the_list_is_part_of_the_key():
    # The optimizer is not step-only: the kept buffers of one optimizer never answer for another.
    arch = core.get_preset("gpt2").architecture
    adam = core.estimate(architecture=arch, training=core.Training(optimizer="adamw"), reserve=False)
    sgd = core.estimate(architecture=arch, training=core.Training(optimizer="sgd"), reserve=False)
    assert (adam.per_gpu.categories()["optimizer_states"] or 0) > 0
    assert sgd.per_gpu.categories()["optimizer_states"] == 0
