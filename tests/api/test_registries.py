"""The API offers exactly the values the core's registries know, and the explanation agrees with its bytes."""

import re
from collections.abc import Collection
from typing import get_args

from app import core
from app.api import schemas


def test_allowed_values_come_from_the_core():
    training = schemas.TrainingIn.model_fields
    pairs: dict[str, Collection[str]] = {
        "optimizer": core.OPTIMIZER_INFO, "optimizer_implementation": core.OPTIMIZER_IMPLEMENTATIONS,
        "activation_checkpointing": core.CHECKPOINTING_CHOICES, "attention": core.ATTENTION_CHOICES,
        "implementation": core.IMPLEMENTATION_CHOICES, "loop": core.LOOPS,
    }
    for name, registry in pairs.items():
        assert set(get_args(training[name].annotation)) == set(registry), name
    assert set(get_args(schemas.PrecisionPresetName)) == set(core.PRECISION_PRESETS)


NUMBER = r"([\d,]+)"


def _group(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    assert match is not None, (pattern, text)
    return match.group(1)


def test_model_state_formulas_reproduce_their_bytes():
    # The drift once seen: "... ÷ 8 (tensor × pipeline)" beside an uneven stage's bytes. Each formula
    # now states the stage's own parameter count; multiplying it out must give the bytes.
    arch = core.get_preset("llama-3-8b").architecture
    for parallelism in (core.Parallelism(tensor=2, pipeline=4, data=2, zero_stage=3), core.Parallelism()):
        result = core.estimate(architecture=arch, training=core.Training(gradient_accumulation_steps=4),
                               parallelism=parallelism)
        for buffer in result.ledger:
            if buffer.category not in ("weights", "master_weights") or buffer.key.startswith("zero."):
                continue
            params = int(_group(NUMBER + r" params", buffer.formula).replace(",", ""))
            bits = int(_group(r"× (\d+) bit", buffer.formula))
            share = re.search(r"÷ (\d+) \(ZeRO", buffer.formula)
            expected = params * bits // 8
            if share:
                expected = -(-expected // int(share.group(1)))
            assert expected == buffer.bytes, (buffer.label, buffer.formula, buffer.bytes)
