"""Model presets, read from ``data/models.json`` where every number carries its source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

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
    raw = json.loads(resources.files("app.core").joinpath("data/models.json").read_text(encoding="utf-8"))
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
