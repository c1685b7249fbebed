"""The API's shapes for configs in and out: the files an import reads, what it understood, ignored and assumed, and
an export's file with what it cannot carry."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app import configs
from app.api.contract import _given, request_rules
from app.api.schemas import EstimateRequest

ConfigKindName = Literal[configs.IMPORT_KINDS]  # type: ignore[valid-type]
ExportKindName = Literal[configs.EXPORT_KINDS]  # type: ignore[valid-type]
_KINDS_TEXT = ("deepspeed (its JSON), training-arguments (the JSON TrainingArguments.to_json_string() writes), "
               "accelerate (its YAML), axolotl (its YAML), torchtitan (its TOML job config), megatron (Megatron-LM's "
               "command line as text), or auto (told from the text; the answer's kind says which)")


class ConfigFileIn(BaseModel):
    """One file of a run's configuration."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: ConfigKindName = Field(default="auto", description="What the text is: " + _KINDS_TEXT + ".")
    text: str = Field(max_length=configs.MAX_TEXT_BYTES, description="The file's contents. Nothing in it is run, "
                      "opened or fetched: paths and model ids are reported.")


class ImportRequest(BaseModel):
    """A config file (kind and text), or several files of one run (files)."""

    model_config = ConfigDict(
        extra="forbid", strict=True,
        json_schema_extra={"if": _given("files"), "then": {"properties": {"text": {"type": "null"},
                                                                          "kind": {"type": "null"}}},
                           "else": _given("text"),
                           "examples": [
            {"kind": "deepspeed", "text": '{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8, '
                                          '"train_batch_size": 256, "zero_optimization": {"stage": 2}, '
                                          '"bf16": {"enabled": true}}'},
            {"files": [{"kind": "training-arguments", "text": '{"per_device_train_batch_size": 4, "bf16": true, '
                                                              '"deepspeed": "ds_config.json"}'},
                       {"kind": "deepspeed", "text": '{"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}, '
                                                     '"train_micro_batch_size_per_gpu": "auto"}'}]},
        ]},
    )

    kind: ConfigKindName | None = Field(default=None, description="What text is (with text; default auto): "
                                        + _KINDS_TEXT + ".")
    text: str | None = Field(default=None, max_length=configs.MAX_TEXT_BYTES,
                             description="One config file's contents (instead of files).")
    files: list[ConfigFileIn] | None = Field(
        default=None, min_length=1, max_length=configs.MAX_FILES,
        description="Several files of one run, e.g. the Trainer's arguments and the DeepSpeed file they name. They "
        "merge launcher (accelerate) < the script's arguments (Trainer, axolotl) < DeepSpeed: a later one wins where "
        "two differ (the loser is listed in ignored), the Trainer fills DeepSpeed's \"auto\" values, and where "
        "the Trainer and DeepSpeed both state a batch or precision value that differs, the answer is a 422 naming "
        "both keys, as transformers refuses such a pair.",
    )

    @model_validator(mode="after")
    def _one_form(self) -> ImportRequest:
        if self.files is not None and (self.text is not None or self.kind is not None):
            raise ValueError("give text (with kind) or files, not both")
        if self.files is None and self.text is None:
            raise ValueError("give text (with kind), or files")
        return self


class UnderstoodOut(BaseModel):
    key: str = Field(description="The key path in the file (a flag for megatron), e.g. 'zero_optimization.stage'.")
    value: Any = Field(description="The value as the file has it.")
    field: str = Field(description="The estimate-body field it sets, e.g. 'parallelism.zero_stage'.")
    file: int | None = Field(description="Which file (its index in files; 0 for text).")
    note: str | None = Field(description="How the value was read, where that needs saying.")


class IgnoredOut(BaseModel):
    key: str = Field(description="The key path in the file.")
    why: str = Field(description="Why the estimate leaves it aside.")
    file: int | None = Field(description="Which file (its index in files; 0 for text).")


class AssumedOut(BaseModel):
    field: str = Field(description="The estimate-body field.")
    value: Any = Field(description="The value used.")
    why: str = Field(description="Why: a default, a value worked out from others, or a reading that needed a choice.")
    file: int | None = Field(description="The file it comes from, or null for trainmem's own default.")


class ImportResponse(BaseModel):
    kind: str = Field(description="The kind read (detected for auto); for several files, their kinds joined by '+'.")
    kinds: list[str] = Field(description="The kind of each file, in the order given.")
    request: EstimateRequest = Field(description="An estimate body: post it to /estimate, /solve (with target) or "
                                     "/sweep (with vary).")
    understood: list[UnderstoodOut] = Field(description="Each key read, with the field it set.")
    ignored: list[IgnoredOut] = Field(description="Each key left aside, with the reason (nothing is dropped "
                                      "silently).")
    assumed: list[AssumedOut] = Field(description="Each value the files do not state, and why it was chosen.")


class ExportRequest(EstimateRequest):
    model_config = ConfigDict(
        extra="forbid", strict=True,
        json_schema_extra={"allOf": request_rules(),
                           "examples": [{"kind": "deepspeed", "model": {"preset": "llama-3-8b"},
                                         "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 8},
                                         "parallelism": {"data": 8, "zero_stage": 3}}]},
    )

    kind: ExportKindName = Field(description="The config to write: deepspeed (ds_config.json), training-arguments "
                                 "(TrainingArguments as JSON), accelerate or axolotl (YAML).")


class UnexpressedOut(BaseModel):
    field: str = Field(description="A field of the request the file does not carry.")
    value: Any = Field(description="The request's value for it.")
    why: str = Field(description="Why the framework's config cannot say it, and where it is set instead.")


class ExportResponse(BaseModel):
    kind: str = Field(description="The kind written.")
    filename: str = Field(description="The file name the framework usually reads it from.")
    text: str = Field(description="The config. Imported back, it gives the request again, except the unexpressed "
                      "fields.")
    notes: list[str] = Field(description="What the file needs that trainmem does not model (learning rate, data, the "
                             "model's path); YAML carries these as comments too.")
    unexpressed: list[UnexpressedOut] = Field(description="The request's fields the file does not carry, with why.")
