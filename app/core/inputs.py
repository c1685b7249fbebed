"""Each input of a run declared once: its kind, default, range or choices, its label and its help.

A field of `Training`, `Parallelism` or `Finetuning` that a user sets is declared with `declared(...)`, which keeps the
declaration in the dataclass field's metadata. Everything that restated a field before reads it from there: the range
and choice checks (`check_declared`), the fields a question may vary (`app.core.job.JOB_FIELDS`), the JSON API's
schema (`app.api.declared`), the command line's flags and help, and the page's labels and defaults. A new setting is
then its declaration, the formula that reads it, and a test.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from app.core.errors import DomainError

Kind = Literal["int", "float", "choice", "bool"]
_KEY: Final = "input"  # the metadata key that holds a field's declaration


@dataclass(frozen=True)
class Input:
    """What a user may give for one field: its kind and limits, and its words."""

    kind: Kind
    label: str  # the page's name for it
    help: str  # what it means, in the API's words: the schema's description and the command line's help
    low: int | float = 0
    high: int | float = 0  # 0: no upper bound declared here (the field is checked elsewhere)
    choices: tuple[str, ...] = ()
    nullable: bool = False  # None stands for "not set" (e.g. recompute_first_layers: every layer)
    below_high: bool = False  # the upper bound itself excluded (a probability below 1)


def declared(default: Any, kind: Kind, label: str, help: str, *, low: int | float = 0, high: int | float = 0,
             choices: Collection[str] = (), nullable: bool = False, below_high: bool = False) -> Any:
    """A dataclass field with its default and its declaration; `choices` may be a registry (its keys are taken)."""
    spec = Input(kind, label, help, low, high, tuple(choices), nullable, below_high)
    return dataclasses.field(default=default, metadata={_KEY: spec})


def declarations(cls: type) -> dict[str, Input]:
    """The declared fields of a dataclass, in their order, by name."""
    return {item.name: item.metadata[_KEY] for item in dataclasses.fields(cls) if _KEY in item.metadata}


def defaults(cls: type) -> dict[str, Any]:
    """Each declared field's default."""
    return {item.name: item.default for item in dataclasses.fields(cls) if _KEY in item.metadata}


def check_value(path: str, spec: Input, value: object) -> None:
    """Refuse a value of the wrong kind, outside its range or not among its choices, naming `path`."""
    if value is None and spec.nullable:
        return
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise DomainError(path, f"takes true or false, got {value!r}")
    elif spec.kind == "choice":
        if value not in spec.choices:
            raise DomainError(path, f"must be one of {', '.join(spec.choices)}, got {value!r}")
    elif spec.kind == "int":
        _check_int(path, spec, value)
    else:
        _check_float(path, spec, value)


def _check_int(path: str, spec: Input, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(path, f"must be an integer, got {value!r}")
    if value < spec.low or (spec.high and value > spec.high):
        raise DomainError(path, f"must be between {spec.low:,} and {spec.high:,}, got {value:,}")


def _check_float(path: str, spec: Input, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DomainError(path, f"must be a number, got {value!r}")
    over = value >= spec.high if spec.below_high else value > spec.high
    if value < spec.low or over:
        upper = f"below {_shown(spec.high)}" if spec.below_high else f"at most {_shown(spec.high)}"
        raise DomainError(path, f"must be at least {_shown(spec.low)} and {upper}, got {value:g}")


def _shown(bound: int | float) -> str:
    return f"{int(bound):,}" if bound == int(bound) else f"{bound:g}"


def check_declared(section: str, values: object, specs: Mapping[str, Input], *, skip: Collection[str] = ()) -> None:
    """Each declared field of `values` (a Training, a Parallelism...) of its kind and within its limits; those in
    `skip` are checked by a rule that knows more (a bound that depends on the architecture)."""
    for name, spec in specs.items():
        if name not in skip:
            check_value(f"{section}.{name}", spec, getattr(values, name))
