"""Presets by Hugging Face Hub id (app/core/data/hub_models.json): read as a pasted config.json, with their sources,
and their counts against the figures their authors publish."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from decimal import Decimal

import pytest

from app import core, hub, wire
from app.core.presets import ModelPreset

BY_HUB_ID = {preset.id: preset for preset in core.model_presets().values() if preset.hf_config is not None}
PUBLISHED = sorted(hub_id for hub_id, preset in BY_HUB_ID.items() if preset.published)
# A source is a file at a pinned commit of a public repository.
PINNED = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+ \(.+\)$")
SCALE = {"": 1, "M": 10**6, "B": 10**9}

# Figures as published, kept here beside the data file's so that neither can drift alone:
CITED = {
    # Llama 3.1 8B: 8.03B parameters (the Hub's count from the checkpoint, https://huggingface.co/meta-llama/Llama-3.1-8B).
    "meta-llama/Llama-3.1-8B": ("8.03B", "total"),
    # Pythia (Biderman et al. 2023, arXiv:2304.01373), Table 1: non-embedding parameters.
    "EleutherAI/pythia-70m": ("18,915,328", "non-embedding"),
    "EleutherAI/pythia-12b": ("11,327,027,200", "non-embedding"),
    # Gemma (arXiv:2403.08295) and Gemma 2 (arXiv:2408.00118), parameter tables: non-embedding parameters.
    "google/gemma-7b": ("7,751,248,896", "non-embedding"),
    "google/gemma-2-9b": ("8,324,201,984", "non-embedding"),
    # Gemma 3 Technical Report (arXiv:2503.19786), parameter table, in millions: non-embedding parameters.
    "google/gemma-3-27b-it": ("25,600M", "non-embedding"),
    # Qwen2.5-72B-Instruct's model card: Number of Parameters 72.7B.
    "Qwen/Qwen2.5-72B-Instruct": ("72.7B", "total"),
    # https://mistral.ai/news/mixtral-8x22b: 141B parameters.
    "mistralai/Mixtral-8x22B-v0.1": ("141B", "total"),
    # Phi-3 Technical Report (arXiv:2404.14219): phi-3-mini, a 3.8 billion parameter language model.
    "microsoft/Phi-3-mini-4k-instruct": ("3.8B", "total"),
}


def counted(preset: ModelPreset, counts: str) -> int:
    """The estimate's count of what a figure counts: the total, or the total less the embedding and an untied
    output layer (what the Pythia and Gemma reports call non-embedding parameters)."""
    arch = preset.architecture
    total = core.param_count(arch)
    if counts == "total":
        return total
    return total - arch.vocab_size * arch.hidden_size * (1 if arch.tie_word_embeddings else 2)


def within_last_digit(count: int, figure: str) -> bool:
    """Whether `count` is within one unit of the figure's last digit: "7.61B" holds 7.60B to 7.62B (model cards
    round or cut), "18,915,328" only itself."""
    number, suffix = re.fullmatch(r"([\d,.]+)([MB]?)", figure).groups()  # type: ignore[union-attr]
    value = Decimal(number.replace(",", ""))
    unit = Decimal(1).scaleb(value.as_tuple().exponent) * SCALE[suffix]  # type: ignore[arg-type]
    return abs(count - value * SCALE[suffix]) <= unit


def test_sixty_and_more_models_by_hub_id_cover_every_family_listed():
    assert len(BY_HUB_ID) >= 60
    types = {preset.architecture.model_type for preset in BY_HUB_ID.values()}
    assert {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "gemma", "gemma2",
            "gemma3_text", "phi", "phi3", "olmo2", "gpt_neox", "starcoder2"} <= types
    assert {config["model_type"] for config in (p.hf_config for p in BY_HUB_ID.values()) if config} \
        <= set(core.SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("hub_id", sorted(BY_HUB_ID))
def test_a_stored_config_reads_as_the_same_config_json_pasted(hub_id):
    pasted = wire.architecture_from({"hf_config": json.dumps(BY_HUB_ID[hub_id].hf_config)})
    assert wire.architecture_from({"preset": hub_id}) == pasted


@pytest.mark.parametrize("hub_id", PUBLISHED)
def test_the_count_is_the_published_figure(hub_id):
    preset = BY_HUB_ID[hub_id]
    assert preset.published is not None
    assert within_last_digit(counted(preset, preset.published.counts), preset.published.figure)


def test_the_data_states_the_figures_cited_here():
    for hub_id, (figure, counts) in CITED.items():
        published = BY_HUB_ID[hub_id].published
        assert published is not None and (published.figure, published.counts) == (figure, counts)


def test_a_wrong_tie_or_vocabulary_misses_the_figure():
    qwen = BY_HUB_ID["Qwen/Qwen2.5-7B-Instruct"]  # card: 7.61B, untied
    untied = replace(qwen, architecture=replace(qwen.architecture, tie_word_embeddings=True))
    assert within_last_digit(counted(qwen, "total"), "7.61B")
    assert not within_last_digit(counted(untied, "total"), "7.61B")
    gemma = BY_HUB_ID["google/gemma-3-4b-it"]  # non-embedding 3,209M whatever the vocabulary
    assert within_last_digit(counted(gemma, "non-embedding"), "3,209M")
    assert not within_last_digit(counted(gemma, "total"), "3,209M")
    assert within_last_digit(18_915_328, "18,915,328") and not within_last_digit(18_915_330, "18,915,328")


def test_every_preset_names_its_hub_id_and_a_source():
    for preset in core.model_presets().values():
        assert preset.hub_id and re.fullmatch(hub.ID_PATTERN, preset.hub_id), preset.id
        assert preset.architecture_source.startswith("https://") and preset.param_count_source
    for preset in BY_HUB_ID.values():
        assert preset.id == preset.hub_id
        assert PINNED.match(preset.architecture_source), preset.architecture_source


def test_no_hub_id_names_two_presets():
    ids = [preset.hub_id.lower() for preset in core.model_presets().values() if preset.hub_id]
    assert len(ids) == len(set(ids))


def test_the_hub_id_of_a_preset_is_an_alias_for_it():
    assert core.get_preset("meta-llama/Meta-Llama-3-8B").id == "llama-3-8b"
    assert core.get_preset("openai-community/gpt2").id == "gpt2"
    assert core.get_preset("META-LLAMA/llama-3.1-8b").id == "meta-llama/Llama-3.1-8B"  # the Hub ignores case
    assert core.preset_aliases()["Qwen/Qwen3-8B"] == "qwen3-8b"
    assert core.hub_preset("someone/unknown") is None


def test_an_unknown_preset_is_refused_by_name_and_briefly():
    with pytest.raises(core.DomainError) as error:
        core.get_preset("meta-llama/Llama-9-1B")
    assert error.value.field == "model.preset"
    assert "unknown preset 'meta-llama/Llama-9-1B'" in error.value.message and len(error.value.message) < 400
