"""Model presets: ``data/models.json``, where every number carries its source, and ``data/hub_models.json``, the
config.json fields of models by their Hugging Face Hub id, read as a pasted config.json is."""

from __future__ import annotations

import json
import pkgutil
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, Literal

from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.hf_config import architecture_from_hf_config

# The Hub repository a models.json preset's config.json is on, from its address.
_HUB_ADDRESS: Final = re.compile(r"^https://huggingface\.co/([^/]+/[^/]+)/")
SHOWN_IN_ERRORS: Final = 12  # preset ids a refusal names; GET /api/v1/presets lists them all


@dataclass(frozen=True)
class PublishedCount:
    """A parameter count as the model's authors or the Hub state it (e.g. "8.03B", "18,915,328"), and what it
    counts: the total, or the non-embedding parameters (the total less the embedding and an untied output layer)."""

    figure: str
    counts: Literal["total", "non-embedding"]
    source: str


@dataclass(frozen=True)
class ModelPreset:
    id: str
    name: str
    architecture: Architecture
    architecture_source: str
    param_count_source: str
    hub_id: str | None  # the Hugging Face Hub repository whose config.json the architecture is
    published_param_count: int | None = None  # an exact total (models.json)
    published: PublishedCount | None = None  # a stated figure (hub_models.json)
    hf_config: Mapping[str, Any] | None = None  # the stored config.json fields (hub_models.json)

    @property
    def group(self) -> str:
        """The Hub organisation, which the page groups presets by; "Other" without a Hub id."""
        return self.hub_id.split("/", 1)[0] if self.hub_id else "Other"


def _data(name: str) -> dict[str, Any]:
    # pkgutil reads package data from a directory or a zip as importlib.resources does, without
    # importing tempfile, shutil and the compression modules into the command line's start-up.
    raw = pkgutil.get_data("app.core", f"data/{name}")
    assert raw is not None
    return {key: value for key, value in json.loads(raw.decode("utf-8")).items() if not key.startswith("_")}


def _curated(preset_id: str, entry: Mapping[str, Any]) -> ModelPreset:
    match = _HUB_ADDRESS.match(entry["architecture_source"])
    return ModelPreset(id=preset_id, name=entry["name"], architecture=Architecture(**entry["architecture"]),
                       architecture_source=entry["architecture_source"],
                       param_count_source=entry["param_count_source"], hub_id=match.group(1) if match else None,
                       published_param_count=entry["published_param_count"])


def _by_hub_id(hub_id: str, entry: Mapping[str, Any]) -> ModelPreset:
    published = PublishedCount(**entry["published"]) if "published" in entry else None
    stated = (f"{published.figure} ({published.counts}): {published.source}" if published
              else "no published figure is cited: the count is the architecture's")
    return ModelPreset(id=hub_id, name=entry["name"], architecture=architecture_from_hf_config(entry["config"]),
                       architecture_source=entry["config_source"], param_count_source=stated, hub_id=hub_id,
                       published=published, hf_config=entry["config"])


@cache
def model_presets() -> dict[str, ModelPreset]:
    """All presets by id: those of models.json in its order, then those of hub_models.json, whose id is the Hub id."""
    presets = {preset_id: _curated(preset_id, entry) for preset_id, entry in _data("models.json").items()}
    presets.update((hub_id, _by_hub_id(hub_id, entry)) for hub_id, entry in _data("hub_models.json").items())
    return presets


@cache
def _hub_ids() -> dict[str, str]:
    """Each preset's Hub id, lower-cased as the Hub matches them, -> the preset's id."""
    return {preset.hub_id.lower(): preset.id for preset in model_presets().values() if preset.hub_id}


def hub_preset(hub_id: str) -> ModelPreset | None:
    """The preset stored for a Hub id (any case, as the Hub reads ids), or None."""
    preset_id = _hub_ids().get(hub_id.lower())
    return model_presets()[preset_id] if preset_id else None


def preset_aliases() -> dict[str, str]:
    """The Hub ids that name a models.json preset, each -> that preset's id ('meta-llama/Meta-Llama-3-8B' ->
    'llama-3-8b')."""
    return {preset.hub_id: preset.id for preset in model_presets().values() if preset.hub_id and preset.hub_id != preset.id}


def get_preset(preset_id: str) -> ModelPreset:
    """A preset by its id, or by the Hub id of the model it stores."""
    presets = model_presets()
    found = presets.get(preset_id) or hub_preset(preset_id)
    if found is None:
        shown = ", ".join(list(presets)[:SHOWN_IN_ERRORS])
        raise DomainError("model.preset", f"unknown preset {preset_id!r}: give a preset id or the Hugging Face Hub id "
                                          f"of a stored model ({len(presets)} in all, e.g. {shown})")
    return found
