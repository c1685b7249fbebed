"""Architectures from a Hugging Face ``config.json``, with each model type's own field names and defaults.

Defaults are those of the model type's configuration class in transformers (e.g.
``LlamaConfig.num_key_value_heads`` falls back to ``num_attention_heads``; ``GPT2Config.n_inner``
to ``4 * n_embd``; ``GemmaConfig.tie_word_embeddings`` is True). Which reader reads a model type, and with what
traits, is its record in `hf_records`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.hf_reader import FIELD_PREFIX, ConfigReader, short_value
from app.core.hf_records import RECORDS, ConfigRecord
from app.core.model_kinds import MAX_MODEL_TYPE_CHARS, STANDARD_FIELDS, not_a_decoder

SUPPORTED_MODEL_TYPES: Final = tuple(RECORDS)


def architecture_from_hf_config(config: Mapping[str, Any]) -> Architecture:
    """Build an Architecture from a parsed ``config.json``; unsupported types and missing fields raise DomainError."""
    if not isinstance(config, Mapping):
        raise DomainError(FIELD_PREFIX, "must be a JSON object (the contents of config.json)")
    model_type = config.get("model_type")
    if model_type is None:
        raise DomainError(f"{FIELD_PREFIX}.model_type", "config.json has no 'model_type'")
    record = RECORDS.get(model_type) if isinstance(model_type, str) else None
    if record is None:
        return _unknown_decoder(config, model_type)
    reader = ConfigReader(config)
    if record.text_config_as is not None:
        reader, record = _text_config(config), RECORDS[record.text_config_as]
    try:
        return record.read(reader)
    except DomainError as error:
        if error.field.startswith(FIELD_PREFIX):
            raise
        # Architecture validation names fields as model.<name>; point it at the config instead.
        raise DomainError(error.field.replace("model.", f"{reader.prefix}.", 1), error.message) from None


def _unknown_decoder(config: Mapping[str, Any], model_type: Any) -> Architecture:
    """A model type with no record: estimated as a Llama-style decoder from its config's standard sizes, where it is
    a decoder-only language model and carries them (`families.stand_in_warnings` says so in the answer); otherwise
    refused with what is missing or why it is not one."""
    field = f"{FIELD_PREFIX}.model_type"
    supported = f"the model types with a record: {', '.join(SUPPORTED_MODEL_TYPES)}"
    if not isinstance(model_type, str) or not 0 < len(model_type) <= MAX_MODEL_TYPE_CHARS:
        raise DomainError(field, f"must be the model type's name, a string of 1 to {MAX_MODEL_TYPE_CHARS} characters, "
                                 f"got {short_value(model_type)}")
    why = not_a_decoder(config)
    if why:
        raise DomainError(field, f"model_type {model_type!r} is {why}: with no record of its own it cannot be "
                                 f"estimated as a Llama-style decoder; {supported}")
    missing = [name for name in STANDARD_FIELDS if config.get(name) is None]
    if missing:
        raise DomainError(f"{FIELD_PREFIX}.{missing[0]}",
                          f"model_type {model_type!r} has no record here, so it is estimated as a Llama-style "
                          f"decoder from {', '.join(STANDARD_FIELDS)}; config.json lacks {', '.join(missing)}. "
                          f"Give them, or use {supported}")
    try:
        return ConfigRecord(model_type).read(ConfigReader(config))
    except DomainError as error:
        if error.field.startswith(FIELD_PREFIX):
            raise
        raise DomainError(error.field.replace("model.", f"{FIELD_PREFIX}.", 1), error.message) from None


def _text_config(config: Mapping[str, Any]) -> ConfigReader:
    """The language model of a Gemma 3 or Llama 4 ``config.json`` (model_type ``gemma3``, ``llama4``): its
    ``text_config``.

    What is counted is what Gemma3ForCausalLM (Llama4ForCausalLM) counts for that text_config: the language model
    that transformers builds inside Gemma3ForConditionalGeneration (Llama4ForConditionalGeneration). The vision tower
    and the multimodal projector are not counted (419,816,304 parameters for google/gemma-3-4b-pt; 455,178,240 for
    Llama4Config's defaults, Llama 4 Scout's: measured as the multimodal class minus the causal LM on the meta
    device, transformers 5.24), nor are the image tokens' activations: a text-only fine-tune (vision tower frozen or
    dropped) is what is modelled.
    """
    text = config.get("text_config")
    prefix = f"{FIELD_PREFIX}.text_config"
    if text is None:  # Gemma3Config(text_config=None) builds Gemma3TextConfig() with every default
        text = {}
    if not isinstance(text, Mapping):
        raise DomainError(prefix, "must be a JSON object (the language model's configuration)")
    return ConfigReader(text, prefix)
