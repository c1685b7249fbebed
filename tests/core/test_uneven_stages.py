"""Uneven pipeline stages (parallelism.first_stage_layers, last_stage_layers; Megatron-LM's
--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers).

Llama-3-8B by hand from its config.json (https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json):
a decoder layer holds Q and O (4,096²), K and V (1,024 × 4,096), the gated MLP (3 × 14,336 × 4,096) and two norms
(4,096): 218,112,000 parameters; the output layer 128,256 × 4,096 and the final norm 4,096.
"""

from typing import Any

import pytest

from app import core
from app.configs import import_config

ARCH = core.get_preset("llama-3-8b").architecture
LAYER = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096 + 2 * 4096
TRAINING = core.Training(seq_len=4096, precision=core.precision_preset("bf16"), attention="flash")


def estimate(**layout: Any) -> core.Estimate:
    training = TRAINING
    if "gradient_accumulation_steps" in layout:
        training = core.Training(seq_len=4096, precision=core.precision_preset("bf16"), attention="flash",
                                 gradient_accumulation_steps=layout.pop("gradient_accumulation_steps"))
    return core.estimate(architecture=ARCH, training=training, parallelism=core.Parallelism(**layout))


@pytest.mark.parametrize(("layout", "split"), [
    ({"pipeline": 4, "first_stage_layers": 6, "last_stage_layers": 6}, (6, 10, 6)),
    ({"pipeline": 4, "first_stage_layers": 2}, (2, 10, 10)),  # the 30 left over the other three stages
    ({"pipeline": 4, "last_stage_layers": 5}, (9, 9, 5)),
    ({"pipeline": 2, "first_stage_layers": 10, "last_stage_layers": 22}, (10, 0, 22)),
    ({"pipeline": 4}, (8, 8, 8)),
])
def test_stage_layers(layout: dict, split: tuple[int, int, int]) -> None:
    assert core.Parallelism(**layout).stage_layers(32) == split


def test_last_stage_weights_by_hand() -> None:
    """Six layers on the last stage, with the final norm and the output layer, in bf16 (no ZeRO)."""
    result = estimate(pipeline=4, first_stage_layers=6, last_stage_layers=6)
    assert LAYER == 218_112_000
    assert result.pipeline_stage == 3
    weights = next(buffer for buffer in result.ledger if buffer.key == "weights")
    assert weights.bytes == 2 * (6 * LAYER + 4096 + 128_256 * 4096)
    # The cluster holds every layer once whatever the split.
    assert result.cluster["weights"] == estimate(pipeline=4).cluster["weights"] == 2 * core.param_count(ARCH)


def test_a_heavier_middle_stage_is_the_one_reported() -> None:
    """Two layers on the first and last stages, 14 on each between, 4 micro-batches a step under 1F1B: stage 1 holds
    min(4, 3) = 3 micro-batches of 14 layers, more than the first's 4 of 2."""
    result = estimate(pipeline=4, first_stage_layers=2, last_stage_layers=2, gradient_accumulation_steps=4)
    assert result.pipeline_stage == 1
    saved = {buffer.key: buffer.bytes for buffer in result.ledger}
    one_layer = sum(item.bytes for item in result.layer_activations)
    # The micro-batch in backward, and the two more still in flight.
    assert saved["activations.layers"] + saved["activations.in_flight"] == 3 * 14 * one_layer


@pytest.mark.parametrize(("layout", "message"), [
    ({"pipeline": 4, "first_stage_layers": 7, "last_stage_layers": 6}, "split evenly"),
    ({"pipeline": 1, "first_stage_layers": 4}, "more than one pipeline stage"),
    ({"pipeline": 2, "first_stage_layers": 10, "last_stage_layers": 10}, "add up to"),
    ({"pipeline": 4, "first_stage_layers": 4, "virtual_stages": 2, "gradient_accumulation_steps": 4}, "1F1B"),
    ({"pipeline": 4, "first_stage_layers": 33}, "between"),
])
def test_refused_by_name(layout: dict, message: str) -> None:
    with pytest.raises(core.DomainError) as caught:
        estimate(**layout)
    assert caught.value.field == "parallelism.first_stage_layers"
    assert message in caught.value.message


def test_megatron_flags_are_read() -> None:
    answer = import_config("megatron", "pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                                       "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                                       "--decoder-last-pipeline-num-layers 6 --micro-batch-size 1 --seq-length 4096")
    parallelism = answer["request"]["parallelism"]
    assert (parallelism["first_stage_layers"], parallelism["last_stage_layers"]) == (6, 6)
    assert not [item for item in answer["ignored"] if "pipeline-num-layers" in str(item)]
