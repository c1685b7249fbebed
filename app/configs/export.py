"""An estimate body written as a framework's config: DeepSpeed's JSON, TrainingArguments' JSON, accelerate's and
axolotl's YAML.

Each writer puts what the framework can say about the setup in the keys that framework reads (the same
sources as the readers). What the file cannot carry (a sequence length in a DeepSpeed config, pure bf16 in
DeepSpeed, which always keeps an fp32 master copy) is listed in ``unexpressed`` with the reason: the answer
reads its own file back with the importer and lists every field that does not come back as it went in, so
the list is exactly what the file loses. Things every run needs that trainmem does not model (the data, the
learning rate, the model's path) are comments in YAML and ``notes`` beside JSON, which has no comments.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from app import core, wire
from app.configs.common import json_safe
from app.configs.export_json import LR_NOTE as LR_NOTE
from app.configs.export_json import write_deepspeed, write_trainer
from app.configs.export_reasons import why
from app.configs.export_yaml import write_accelerate, write_axolotl
from app.configs.merge import PARALLELISM_FIELDS, TRAINING_FIELDS, defaults
from app.core import DomainError
from app.core.finetuning import Finetuning
from app.core.optimizers import OPTIMIZER_INFO

EXPORT_KINDS: Final = ("deepspeed", "training-arguments", "accelerate", "axolotl")
FILENAMES: Final = {"deepspeed": "ds_config.json", "training-arguments": "training_args.json",
                    "accelerate": "accelerate_config.yaml", "axolotl": "axolotl.yaml"}


def export_config(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """`body` as a `kind` config: ``{"kind", "filename", "text", "notes", "unexpressed"}``."""
    if kind not in EXPORT_KINDS:
        raise DomainError("kind", f"must be one of {', '.join(EXPORT_KINDS)}, got {kind!r}")
    setup = complete(body)
    notes: list[str] = []
    text = {"deepspeed": write_deepspeed, "training-arguments": write_trainer, "accelerate": write_accelerate,
            "axolotl": write_axolotl}[kind](setup, notes)
    from app.configs import import_config

    back = import_config(kind, text)["request"]
    unexpressed = [{"field": field, "value": json_safe(value), "why": why(kind, field)}
                   for field, value in differences(setup, back)]
    return {"kind": kind, "filename": FILENAMES[kind], "text": text, "notes": notes, "unexpressed": unexpressed}


def complete(body: dict[str, Any]) -> dict[str, Any]:
    """The body with every training and parallelism field, precision as a preset id where its dtypes are one's;
    checked as /estimate checks it."""
    if not isinstance(body, dict):
        raise DomainError("body", "must be an estimate body (an object)")
    model, training = _given(body.get("model")), _given(body.get("training"))
    parallelism = _given(body.get("parallelism"))
    wire.job_from({"model": model, "training": training, "parallelism": parallelism,
                   "finetuning": body.get("finetuning"), "gpu": body.get("gpu")}).estimate(reserve=False)
    values = defaults()
    out_training = {name: training.get(name, values[f"training.{name}"]) for name in TRAINING_FIELDS}
    out_training["framework_overhead_bytes"] = training.get("framework_overhead_bytes",
                                                            core.DEFAULT_FRAMEWORK_OVERHEAD_BYTES)
    out_training["allocator"] = training.get("allocator", "default")
    out_training["precision"] = _preset_or_dtypes(out_training["precision"])
    return {"model": model, "training": out_training,
            "parallelism": {name: parallelism.get(name, values[f"parallelism.{name}"]) for name in PARALLELISM_FIELDS},
            "finetuning": finetuning_of(body.get("finetuning")), "gpu": body.get("gpu")}


def _given(section: dict[str, Any] | None) -> dict[str, Any]:
    """A body section's fields that are set (not None)."""
    return {k: v for k, v in (section or {}).items() if v is not None}


def _preset_or_dtypes(precision: Any) -> Any:
    """A precision given as dtypes, as the preset id with those dtypes when there is one."""
    if not isinstance(precision, dict):
        return precision
    dtypes = {k: precision.get(k) for k in ("weights", "gradients", "master_weights", "optimizer_states",
                                             "activations")}
    return next((p.id for p in core.PRECISION_PRESETS.values() if _dtypes(p.precision) == dtypes), dtypes)


def finetuning_of(section: dict[str, Any] | None) -> dict[str, Any] | None:
    """A finetuning section with its defaults (None for plain full fine-tuning), lists as lists."""
    values = _given(section)
    full = Finetuning()
    out = {field.name: _listed(values.get(field.name, getattr(full, field.name)))
           for field in dataclasses.fields(Finetuning)}
    if out["method"] == "full" and not out["freeze_embeddings"] and not out["frozen_layers"]:
        return None
    if out["method"] != "qlora":
        out["quantization"] = full.quantization
    if out["method"] == "full":
        for name in ("rank", "target_modules", "dropout", "modules_to_save", "quantization"):
            out[name] = _listed(getattr(full, name))
    return out


def _listed(value: Any) -> Any:
    """A tuple as a list (as JSON reads it back); anything else as it is."""
    return list(value) if isinstance(value, tuple) else value


def _without_version(finetuning: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if finetuning is None else finetuning | {"bitsandbytes_version": None}


def _dtypes(precision: core.Precision) -> dict[str, str | None]:
    return {"weights": precision.weights, "gradients": precision.gradients,
            "master_weights": precision.master_weights, "optimizer_states": precision.optimizer_states,
            "activations": precision.activations}


def same_implementation(optimizer: str, a: str, b: str) -> bool:
    """Two optimizer implementations that allocate the same during the step (e.g. every one of Lion's)."""
    scratch = OPTIMIZER_INFO[optimizer].scratch
    return (scratch[a].copies, scratch[a].of) == (scratch[b].copies, scratch[b].of) or (
        scratch[a].copies == 0 and scratch[b].copies == 0)


def differences(setup: dict[str, Any], back: dict[str, Any]) -> list[tuple[str, Any]]:
    """The fields of `setup` that `back` (what its file imports as) does not reproduce."""
    out: list[tuple[str, Any]] = []
    if setup["model"] != back["model"]:
        out.append(("model", setup["model"]))
    out += _training_differences(setup["training"], back["training"])
    for name in PARALLELISM_FIELDS:
        mine, theirs = setup["parallelism"][name], back["parallelism"][name]
        if name == "gpus_per_node":  # at most the job's GPUs count (the core caps it)
            mine, theirs = min(mine, _world(setup)), min(theirs, _world(back))
        if mine != theirs:
            out.append((f"parallelism.{name}", setup["parallelism"][name]))
    version = (setup["finetuning"] or {}).get("bitsandbytes_version")
    if version is not None:  # the environment's, which no config file states
        out.append(("finetuning.bitsandbytes_version", version))
    if _without_version(setup["finetuning"]) != _without_version(finetuning_of(back.get("finetuning"))):
        out.append(("finetuning", setup["finetuning"]))
    if setup.get("gpu"):
        out.append(("gpu", setup["gpu"]))
    return out


def _training_differences(training: dict[str, Any], returned: dict[str, Any]) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    fallback = defaults()
    for name in TRAINING_FIELDS:
        mine, theirs = (values.get(name, fallback[f"training.{name}"]) for values in (training, returned))
        if mine != theirs and not _moot(name, training, returned, mine, theirs):
            out.append((f"training.{name}", mine))
    if training["framework_overhead_bytes"] != core.DEFAULT_FRAMEWORK_OVERHEAD_BYTES:
        out.append(("training.framework_overhead_bytes", training["framework_overhead_bytes"]))
    if training["allocator"] != "default":
        out.append(("training.allocator", training["allocator"]))
    return out


def _moot(name: str, training: dict[str, Any], returned: dict[str, Any], mine: Any, theirs: Any) -> bool:
    """A difference that does not count: the implementation with another optimizer (listed itself) or the same
    step either way; Adafactor's momentum for another optimizer."""
    if name == "optimizer_implementation":
        return training["optimizer"] != returned["optimizer"] or same_implementation(training["optimizer"], mine,
                                                                                        theirs)
    return name == "adafactor_momentum" and training["optimizer"] != "adafactor"


def _world(body: dict[str, Any]) -> int:
    p = body["parallelism"]
    return p["data"] * p["tensor"] * p["pipeline"]
