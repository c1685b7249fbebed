"""The request's sections built from the core's declarations (`app.core.inputs`): each declared field becomes a
pydantic field of its kind, with its default, its bounds or choices, and its help as the schema's description.
Fields of other shapes (a precision preset or a dtype per tensor, a list of module names) are given beside them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.core.inputs import Input, declarations

if TYPE_CHECKING:
    class Section(BaseModel):
        """A request section as the type checker sees it: its fields are built at import, so any is read as Any."""

        def __getattr__(self, name: str) -> Any: ...
else:
    Section = BaseModel

_TYPES: dict[str, Any] = {"int": int, "float": float, "bool": bool}


def _annotation(spec: Input) -> Any:
    kind = Literal[spec.choices] if spec.kind == "choice" else _TYPES[spec.kind]
    return kind | None if spec.nullable else kind


def _bounds(spec: Input) -> dict[str, Any]:
    if spec.kind not in ("int", "float"):
        return {}
    upper = {} if not spec.high else {"lt" if spec.below_high else "le": spec.high}
    return {"ge": spec.low, **upper}


def declared_field(default: Any, spec: Input) -> tuple[Any, Any]:
    """One declared field as pydantic takes it: (annotation, Field)."""
    return _annotation(spec), Field(default=default, description=spec.help, **_bounds(spec))


def declared_model(name: str, section: type, config: ConfigDict, *, given: dict[str, tuple[Any, Any]],
                   leave_out: tuple[str, ...] = (), doc: str | None = None) -> type[Section]:
    """A request section with a field for each field of the core's `section`, in its order: declared ones from their
    declarations, the rest from `given`; `leave_out` names the fields the section leaves to another one."""
    specs = declarations(section)
    fields: dict[str, Any] = {}
    for item in dataclasses.fields(section):
        if item.name in leave_out:
            continue
        if item.name in specs:
            fields[item.name] = declared_field(item.default, specs[item.name])
        elif item.name in given:
            fields[item.name] = given[item.name]
        else:
            raise TypeError(f"{section.__name__}.{item.name} is neither declared nor given a request field")
    return create_model(name, __config__=config, __doc__=doc, __module__="app.api.schemas", **fields)
