"""Model presets, read from ``data/models.json`` where every number carries its source."""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass
from functools import cache

from app.core.architecture import Architecture
from app.core.errors import DomainError


@dataclass(frozen=True)
class ModelPreset:
    id: str
    name: str
    architecture: Architecture
    published_param_count: int
    architecture_source: str
    param_count_source: str


@cache
def model_presets() -> dict[str, ModelPreset]:
    """All presets by id, in the order of the data file."""
    # pkgutil reads package data from a directory or a zip as importlib.resources does, without
    # importing tempfile, shutil and the compression modules into the command line's start-up.
    raw = json.loads(pkgutil.get_data("app.core", "data/models.json").decode("utf-8"))  # type: ignore[union-attr]
    presets = {}
    for preset_id, entry in raw.items():
        if preset_id.startswith("_"):
            continue
        presets[preset_id] = ModelPreset(
            id=preset_id,
            name=entry["name"],
            architecture=Architecture(**entry["architecture"]),
            published_param_count=entry["published_param_count"],
            architecture_source=entry["architecture_source"],
            param_count_source=entry["param_count_source"],
        )
    return presets


def get_preset(preset_id: str) -> ModelPreset:
    presets = model_presets()
    if preset_id not in presets:
        raise DomainError("model.preset", f"unknown preset {preset_id!r}; known: {', '.join(presets)}")
    return presets[preset_id]
