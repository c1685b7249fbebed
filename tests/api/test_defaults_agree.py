"""The API's defaults are the core's: a field the schema gives a default for has the value the core's dataclass
starts from, so a body that leaves it out and one that gives the default get one answer."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from app import core
from app.api import schemas
from app.core.finetuning import Finetuning

PAIRS = [(schemas.TrainingIn, core.Training()), (schemas.ParallelismIn, core.Parallelism()),
         (schemas.FinetuningIn, Finetuning())]


def _core_value(value: object) -> object:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, str) and value in core.PRECISION_PRESETS:
        return core.precision_preset(value)  # the schema names a preset, the core holds its dtypes
    return value


@pytest.mark.parametrize(("model", "default"), PAIRS, ids=lambda item: getattr(item, "__name__", ""))
def test_every_schema_default_is_the_cores(model: type[BaseModel], default: object) -> None:
    core_fields = {field.name for field in dataclasses.fields(default)}  # type: ignore[arg-type]
    compared = 0
    for name, field in model.model_fields.items():
        if name not in core_fields or field.default is PydanticUndefined or field.default is None:
            continue
        core_value = _core_value(getattr(default, name))
        schema_value = _core_value(field.default)
        assert schema_value == core_value, f"{model.__name__}.{name}: {schema_value!r} in the schema, {core_value!r}"
        compared += 1
    assert compared >= 5
