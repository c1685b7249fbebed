"""API v1's JSON as plain Python: request bodies into the core's job, answers into dicts.

Standard library only, so the command line prints exactly what the API answers without loading the
web framework or pydantic. The API validates bodies with its schema (`app/api/schemas.py`) first and checks
every answer against its response model; the command line relies on the core's own checks, which
name the same fields.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from array import array
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, Final

from app import core, hub
from app.core.finetuning import Finetuning
from app.core.job import Job
from app.core.series import SeriesPoint
from app.core.solver import Fix, Solution

MAX_BODY_BYTES: Final = 1 << 20  # a request body, a pasted config.json included
MAX_JSON_DEPTH: Final = 32  # the deepest request is model.hf_config.rope_scaling...: a handful of levels
MAX_NUMBER_CHARS: Final = 40  # no number the API takes needs more characters than this

ARCHITECTURE_FIELDS: Final = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "tie_word_embeddings", "attention_bias", "qkv_bias", "mlp_bias",
    "max_position_embeddings", "mlp", "norm", "norms_per_layer", "position_embedding", "dropout",
    "attention_dropout", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
    "qk_norm",
)
MODEL_SOURCES: Final = ("preset", "num_params", "hf_config", "hub")
TRAINING_FIELDS: Final = tuple(f.name for f in dataclasses.fields(core.Training) if f.name != "finetuning")
FINETUNING_FIELDS: Final = tuple(f.name for f in dataclasses.fields(Finetuning))
PARALLELISM_FIELDS: Final = tuple(f.name for f in dataclasses.fields(core.Parallelism))


# --- requests ---------------------------------------------------------------------------------------

# What only the checked parse can bound: a run of number characters longer than any number may be, an exponent
# (1e999 is infinite), a non-finite constant. Found inside strings too, which only costs the checked parse. Looked
# for in the text's bytes mapped through a table (digits to 0; number characters to NUL, which JSON text cannot
# hold raw), so that a megabyte takes milliseconds: a regular expression over it took 80 ms.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NUMBER_CHARS_AS_NUL = bytes(0 if byte in b"-+0123456789.eE" else byte for byte in range(256))
_LONG_NUMBER = b"\0" * (MAX_NUMBER_CHARS + 1)


def _needs_checks(text: str) -> bool:
    if "NaN" in text or "Infinity" in text:
        return True
    data = text.encode("utf-8", "surrogatepass")
    zeroed = data.translate(_DIGITS_AS_ZERO)
    return b"0e" in zeroed or b"0E" in zeroed or _LONG_NUMBER in data.translate(_NUMBER_CHARS_AS_NUL)


# A string, or up to where a broken one stops (a backslash before a line break, the end of the text), in one pass
# that never starts again inside it: starting again at each escaped quote of a broken string made the scan quadratic
# (16 KB of them took 1.3 s of CPU).
_STRINGS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?')
# The brackets as signed bytes, +1 where one opens and -1 (0xff) where one closes; every other byte deleted.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in a JSON text (strings skipped): the most brackets open at once, counted
    at C speed (a loop over a megabyte of brackets took 350 ms)."""
    steps = _STRINGS.sub("", text).encode("utf-8", "surrogatepass").translate(_STEPS, _NOT_BRACKETS)
    return max(accumulate(array("b", steps), initial=0))


def _number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of more than {MAX_NUMBER_CHARS} characters")
    return text


def _float(text: str) -> float:
    value = float(_number(text))
    if math.isinf(value):
        raise ValueError(f"{text} is beyond a 64-bit float")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def loads_bounded(text: str | bytes, field: str) -> Any:
    """JSON parsed only within bounds (size, nesting, number length, no NaN/Infinity), else DomainError at `field`.

    Bounded before any expensive work: a million-digit number or a 100,000-deep nesting is refused
    from the text, not discovered by the parser.
    """
    if len(text) > MAX_BODY_BYTES:
        raise core.DomainError(field, f"is larger than {MAX_BODY_BYTES:,} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise core.DomainError(field, "is not UTF-8 text") from None
    plain = (text.count("{") + text.count("[") <= MAX_JSON_DEPTH  # cannot nest deeper than that
             and not _needs_checks(text))
    if not plain and json_depth(text) > MAX_JSON_DEPTH:
        raise core.DomainError(field, f"nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        if plain:  # no number could break a bound: the parser's C path, without a call per number
            return json.loads(text)
        return json.loads(text, parse_int=lambda s: int(_number(s)), parse_float=_float,
                          parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise core.DomainError(field, f"is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}") from None
    except (ValueError, RecursionError) as error:
        raise core.DomainError(field, f"is not acceptable JSON: {error}") from None



def architecture_from(model: Mapping[str, Any],
                      hub_config: Mapping[str, Any] | None = None) -> core.Architecture | None:
    """The Architecture a request's `model` describes (`hub_config`: the config.json fetched for its `hub`), or None
    for a bare parameter count."""
    overrides = {name: model[name] for name in ARCHITECTURE_FIELDS if model.get(name) is not None}
    _check_sources(model, overrides)
    if model.get("hub") is not None:
        stored = _stored(model)
        return stored.architecture if stored else _from_hub(model["hub"], hub_config)
    if model.get("num_params") is not None:
        return None
    if model.get("hf_config") is not None:
        return _from_hf_config(model["hf_config"])
    if model.get("preset") is not None:
        preset = core.get_preset(model["preset"]).architecture
        return dataclasses.replace(preset, **overrides) if overrides else preset
    return _custom(overrides)


def _custom(fields: Mapping[str, Any]) -> core.Architecture:
    """An architecture from its fields alone: the four that have no default are needed."""
    missing = [name for name in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
               if name not in fields]
    if missing:
        raise core.DomainError(f"model.{missing[0]}",
                               f"is required for a custom architecture (missing: {', '.join(missing)})")
    return core.Architecture(**fields)


def _check_sources(model: Mapping[str, Any], overrides: Mapping[str, Any]) -> None:
    """One model source at most (preset, num_params, hf_config, hub), or the architecture fields; a revision only
    with hub; fields beside a preset only."""
    sources = [name for name in MODEL_SOURCES if model.get(name) is not None]
    if len(sources) > 1:
        raise core.DomainError("model", f"give only one of preset, num_params, hf_config and hub "
                                        f"(got {', '.join(sources)})")
    if not sources and not overrides:
        raise core.DomainError("model", "give a preset, num_params, hf_config, hub or the architecture fields")
    _check_revision(model)
    if overrides and sources and sources[0] != "preset":
        raise core.DomainError("model", f"{sources[0]} cannot be combined with architecture fields")


def _check_revision(model: Mapping[str, Any]) -> None:
    if model.get("revision") is not None and model.get("hub") is None:
        raise core.DomainError(hub.REVISION_FIELD, "is a revision of a Hub model: give it with hub")


def _stored(model: Mapping[str, Any]) -> core.ModelPreset | None:
    """The preset stored for a `model` given by Hub id at no revision: answered from its stored config.json, with
    nothing fetched."""
    if model.get("revision") is not None or not isinstance(model.get("hub"), str):
        return None
    return core.hub_preset(model["hub"])


def _from_hub(repo_id: Any, config: Mapping[str, Any] | None) -> core.Architecture:
    """A model by Hub id, from the config.json fetched for it; refused where nothing fetches it."""
    if config is None:
        raise core.DomainError(hub.FIELD, "is not fetched here: give the model as a preset, a config.json or its "
                                          "architecture", kind="hub_unsupported")
    return hub.checked(repo_id, config, core.architecture_from_hf_config)


def _from_hf_config(config: Any) -> core.Architecture:
    """A config.json, given as its text or as the object it holds."""
    if isinstance(config, str):
        config = loads_bounded(config, "model.hf_config")
    if not isinstance(config, dict):
        raise core.DomainError("model.hf_config", "must be a JSON object (the contents of config.json)")
    return core.architecture_from_hf_config(config)


def _fetched(model: Mapping[str, Any], fetch: hub.Fetch | None) -> hub.HubModel | None:
    """The Hub's model for a `model` given by Hub id alone; otherwise None, and architecture_from says what is
    wrong with it before anything is fetched."""
    given = [name for name in (*MODEL_SOURCES, *ARCHITECTURE_FIELDS) if model.get(name) is not None]
    if fetch is None or given != ["hub"] or _stored(model):
        return None
    return fetch(model["hub"], model.get("revision"))


def hub_config(found: hub.HubModel) -> dict[str, Any]:
    """The config.json fetched from the Hub, read within the bounds of a pasted one."""
    try:
        config = loads_bounded(found.config_text, hub.FIELD)
    except core.DomainError as error:
        raise core.DomainError(hub.FIELD, f"{found.repo_id}'s {hub.CONFIG_FILE} {error.message}",
                               kind="hub_not_a_model") from None
    if not isinstance(config, dict):
        raise core.DomainError(hub.FIELD, f"{found.repo_id}'s {hub.CONFIG_FILE} is not a JSON object",
                               kind="hub_not_a_model")
    return config


def finetuning_from(finetuning: Mapping[str, Any]) -> Finetuning:
    values = {name: finetuning[name] for name in FINETUNING_FIELDS if finetuning.get(name) is not None}
    for name in ("target_modules", "modules_to_save"):
        if name == "target_modules" and isinstance(values.get(name), str):
            continue  # all-linear or a regular expression, as peft takes a string
        if name in values:
            if not isinstance(values[name], list | tuple) or not all(isinstance(x, str) for x in values[name]):
                raise core.DomainError(f"finetuning.{name}", "must be a list of module names")
            values[name] = tuple(values[name])
    return Finetuning(**values)


def training_from(training: Mapping[str, Any], finetuning: Mapping[str, Any] | None = None) -> core.Training:
    values: dict[str, Any] = {name: training[name] for name in TRAINING_FIELDS if training.get(name) is not None}
    values["finetuning"] = finetuning_from(finetuning or {})
    precision = values.get("precision")
    if isinstance(precision, str):
        values["precision"] = core.precision_preset(precision)
    elif isinstance(precision, Mapping):
        dtypes: dict[str, Any] = {key: precision.get(key) for key in
                                  ("weights", "gradients", "master_weights", "optimizer_states", "activations")}
        values["precision"] = core.Precision(**dtypes)
    return core.Training(**values)


def parallelism_from(parallelism: Mapping[str, Any]) -> core.Parallelism:
    return core.Parallelism(**{name: parallelism[name] for name in PARALLELISM_FIELDS
                               if parallelism.get(name) is not None})


def job_from(body: Mapping[str, Any], *, fetch: hub.Fetch | None = None) -> Job:
    """The job an estimate body describes (`model`, `training`, `parallelism`, `gpu`); a model by Hub id is fetched
    with `fetch` (the command line's `hub.fetch`, the server's `hub.server_fetch`), and refused without it."""
    model = body.get("model") or {}
    found = _fetched(model, fetch)
    config = hub_config(found) if found else None
    architecture = architecture_from(model, config)
    warning = None
    if found and config and architecture:
        warning = hub.weights_warning(found, config, core.param_count(architecture))
    stored = _stored(model) if model.get("hub") is not None else None
    if stored:
        warning = (f"{model['hub']}: the architecture stored as the preset {stored.id} "
                   f"({stored.architecture_source}); nothing was fetched from the Hub")
    return Job(
        architecture=architecture,
        num_params=model.get("num_params") if architecture is None else None,
        training=training_from(body.get("training") or {}, body.get("finetuning")),
        parallelism=parallelism_from(body.get("parallelism") or {}),
        gpu=gpu_from(body.get("gpu")),
        notes=(warning,) if warning else (),
    )


def gpu_from(gpu: Any) -> core.Gpu | None:
    """A body's `gpu`: a catalogue id, a custom GPU ({"capacity_bytes", "name", "like"}), or none."""
    if isinstance(gpu, Mapping):
        return core.custom_gpu(gpu.get("capacity_bytes"), name=gpu.get("name"), like=gpu.get("like"))  # type: ignore[arg-type]
    return core.get_gpu(gpu) if gpu else None


# --- answers ----------------------------------------------------------------------------------------


def breakdown_json(breakdown: core.Breakdown) -> dict[str, int | None]:
    return breakdown.as_dict()


def peak_json(peak: core.Peak) -> dict[str, Any]:
    return {"bytes": peak.bytes, "event": peak.event, "step": peak.step, "breakdown": peak.breakdown.categories(),
            "reserved_bytes": peak.reserved_bytes}


def estimate_json(result: core.Estimate) -> dict[str, Any]:
    """The answer of POST /api/v1/estimate."""
    gpu = None
    if result.gpu is not None:
        gpu = {"id": result.gpu.gpu.id, "name": result.gpu.gpu.name, "capacity": result.gpu.gpu.capacity_bytes,
               "fits": result.gpu.fits, "headroom": result.gpu.headroom_bytes,
               "reserved_bytes": result.gpu.reserved_bytes, "outside_allocator_bytes": result.gpu.outside_bytes,
               "communicator_bytes": result.gpu.communicator_bytes,
               "communicators": [{"group": c.group, "ranks": c.ranks, "pattern": c.pattern, "bytes": c.bytes,
                                  "formula": c.formula} for c in result.gpu.communicators]}
    return {
        "param_count": result.param_count,
        "trainable_param_count": result.trainable_param_count,
        "active_param_count": result.active_param_count,
        "per_gpu": breakdown_json(result.per_gpu),
        "cluster": breakdown_json(result.cluster),
        "gpu": gpu,
        "warnings": list(result.warnings),
        "bytes_per_param": dict(result.bytes_per_param),
        "pipeline_stage": result.pipeline_stage,
        "explanation": [{"category": b.category, "label": b.label, "formula": b.formula, "bytes": b.bytes}
                        for b in result.ledger],
        "peak": peak_json(result.peak),
        "timeline": [{"event": p.event, "step": p.step, "bytes": p.bytes, "breakdown": p.breakdown.categories(),
                      "reserved_bytes": reserved}
                     for p, reserved in zip(result.timeline, result.reserved_timeline or [None] * len(result.timeline),
                                            strict=True)],
        "ledger": [_buffer_json(b) for b in result.ledger],
        "attention_kernel": result.attention_kernel,
        "host": None if result.host is None else {
            "per_gpu": breakdown_json(result.host.per_gpu), "gpus_per_node": result.host.gpus_per_node,
            "per_node_bytes": result.host.per_node_bytes, "ledger": [_buffer_json(b) for b in result.host.ledger]},
        "layer_activations": [{"name": t.name, "bytes": t.bytes} for t in result.layer_activations],
    }


def _buffer_json(buffer: core.Buffer) -> dict[str, Any]:
    allocated, freed = buffer.when
    return {"category": buffer.category, "label": buffer.label, "formula": buffer.formula, "bytes": buffer.bytes,
            "cluster_bytes": buffer.cluster_bytes, "allocated": allocated, "freed": freed}


def fix_json(fix: Fix) -> dict[str, Any]:
    cost = fix.cost
    result = fix.estimate
    return {
        "change": dict(fix.change),
        "summary": fix.summary,
        "peak": peak_json(result.peak),
        "headroom": result.gpu.headroom_bytes if result.gpu else None,
        "cost": {"kind": cost.kind, "text": cost.text, "extra_compute": cost.extra_compute,
                 "extra_communication": cost.extra_communication, "extra_gpus": cost.extra_gpus},
    }


def solution_json(solution: Solution) -> dict[str, Any]:
    """The answer of POST /api/v1/solve."""
    return {
        "target": solution.target,
        "value": solution.value,
        "note": solution.note,
        "estimate": estimate_json(solution.estimate),
        "fixes": [fix_json(fix) for fix in solution.fixes],
    }


def series_json(field: str, points: tuple[SeriesPoint, ...]) -> dict[str, Any]:
    """The answer of POST /api/v1/sweep."""
    return {
        "field": field,
        "points": [{"value": point.value, "peak": peak_json(point.peak) | {"reserved_bytes": point.reserved_bytes},
                    "per_gpu": breakdown_json(point.per_gpu), "fits": point.fits} for point in points],
    }
