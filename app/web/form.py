"""The calculator form: flat query parameters (named like the API's fields) in, an EstimateRequest out.

The page's URL is its state, so every control is a query parameter named after the API field it
feeds (``seq_len``, ``zero_stage``, ``hidden_size``...), with the API's values. Three parameters
are the page's own: ``source`` (which kind of model description is active), ``unit`` (GB or GiB)
and ``fill`` (refill the architecture fields from the preset).

Nothing here raises for bad input: every problem becomes a message keyed by the name of the
control at fault, so the page can show it next to that control.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ValidationError

from app import core
from app.api.schemas import (
    ARCHITECTURE_FIELDS,
    EstimateRequest,
    FinetuningIn,
    ModelIn,
    PrecisionIn,
    TrainingIn,
    to_job,
)
from app.core.gpus import CUSTOM_ID, DEFAULT_LIKE
from app.core.inputs import Input
from app.core.job import Job
from app.core.lora_targets import targets_from_text
from app.web.labels import DECLARED_CONTROLS, LABELS, SECTIONS
from app.web.parse import (  # noqa: F401  (read from here by the page's other rooms and the tests)
    _SEPARATORS,
    BYTE_UNITS,
    COUNT_SUFFIXES,
    MAX_DIGITS,
    TOKEN_SUFFIXES,
    FormError,
    Waiting,
    parse_bytes,
    parse_count,
    parse_factor,
    parse_gpu_capacity,
    parse_int,
    parse_probability,
    parse_tokens,
    parse_version,
)

Source = Literal["preset", "custom", "params", "config", "hub"]
Unit = Literal["GB", "GiB"]

SOURCES: Final[tuple[Source, ...]] = ("preset", "custom", "params", "config", "hub")
UNITS: Final[tuple[Unit, ...]] = ("GiB", "GB")
DEFAULT_SOURCE: Final[Source] = "preset"
DEFAULT_UNIT: Final[Unit] = "GiB"
DEFAULT_PRESET: Final = "llama-3-8b"
DEFAULT_GPU: Final = "h100-80gb"
NO_GPU: Final = ""
CUSTOM_GPU: Final = CUSTOM_ID  # the GPU select's choice that reads the two controls below
GPU_CAPACITY: Final = "gpu_capacity"  # a custom GPU's memory, with a unit ("24 GiB")
GPU_LIKE: Final = "gpu_like"  # the catalogue GPU whose CUDA context and interconnect a custom one takes
GPU_FIELDS: Final = {"capacity_bytes": GPU_CAPACITY, "like": GPU_LIKE}  # the API's custom GPU fields -> controls
CUSTOM_PRECISION: Final = "custom"
NO_MASTER: Final = "none"
TRUE: Final = "true"

# The run's declared inputs are controls of their own names (app/web/labels.py, DECLARED_CONTROLS). Each counts
# only while the page shows it: the conditions of the fieldsets around it in templates/page.html, all of them (a
# value left in the URL from before never errs on a hidden control, and the API's default stands). Those with none
# always count. tests/web/test_declared_controls.py keeps this table and the template in step.
LOOP_SHOWN: Final = "framework=" + ",".join(key for key, item in core.FRAMEWORKS.items() if item.loop is None)
ADAPTERS: Final = "method=lora,qlora"
SHOWN_WHEN: Final[dict[str, tuple[str, ...]]] = {
    "adafactor_momentum": ("optimizer=adafactor",),
    "recompute_every": ("activation_checkpointing=full",),
    "recompute_first_layers": ("activation_checkpointing=full",),
    "use_reentrant": ("activation_checkpointing=full",),
    "activation_offload_layers": ("activation_offload=megatron",),
    "loss_chunks": ("loss=chunked",),
    "loop": (LOOP_SHOWN,),
    "sequence_parallel": ("tensor>1",),
    "expert_tensor": ("tensor>1",),
    "virtual_stages": ("pipeline>1",),
    "first_stage_layers": ("pipeline>1",),
    "last_stage_layers": ("pipeline>1",),
    "expert": ("data>1",),
    "expert_load": ("data>1", "expert>1"),
    "reduce_bucket_size": ("framework=deepspeed",),
    "gpus_per_node": ("offload=optimizer,optimizer+parameters",),
    "rank": (ADAPTERS,),
    "lora_dropout": (ADAPTERS,),
    "quantization": ("method=qlora",),
    "freeze_embeddings": ("method=full",),
    "frozen_layers": ("method=full",),
}
# The declared controls templates/page.html does not place (a setting added since): shown under its Advanced
# settings, each as its kind asks, so that a new input reaches the page with its declaration alone.
_PAGE: Final = Path(__file__).resolve().parents[2] / "templates" / "page.html"
PLACED: Final = frozenset(re.findall(r'm\.(?:text|select|checkbox|radios)\("(\w+)"', _PAGE.read_text(encoding="utf-8")))
EXTRA_CONTROLS: Final = tuple((control, spec.kind) for control, (_, _, spec) in DECLARED_CONTROLS.items()
                              if control not in PLACED)
# How a control's text is read where it is not a plain whole number (int) or factor (float).
PARSERS: Final = {"seq_len": parse_tokens, "framework_overhead_bytes": parse_bytes, "lora_dropout": parse_probability}
# Fine-tuning's fields of other shapes: the page's names where one would clash with an architecture field.
FINETUNING_METHOD: Final = "method"
FINETUNING_ALIASES: Final = {"dropout": "lora_dropout", "modules_to_save": "save_embed_tokens"}
SAVABLE: Final = {"save_embed_tokens": "embed_tokens", "save_lm_head": "lm_head"}
HOST_RAM: Final = "host_ram"  # the page's own: host memory per node, for the offloading bar
DEFAULT_HOST_RAM: Final = "512 GiB"
DTYPE_FIELDS: Final = core.precision.TENSOR_CLASSES
ARCH_INTS: Final = tuple(
    name for name in ARCHITECTURE_FIELDS if ModelIn.model_fields[name].annotation in (int | None,)
)
ARCH_FLOATS: Final = ("dropout", "attention_dropout")
ARCH_CHECKBOXES: Final = ("tie_word_embeddings", "attention_bias", "mlp_bias", "norm_topk_prob", "qk_norm")
ARCH_CHOICES: Final = ("mlp", "norm", "position_embedding", "qkv_bias")

# Which controls each model source submits; the others are in disabled fieldsets.
SOURCE_CONTROLS: Final[dict[str, tuple[str, ...]]] = {
    "preset": ("preset",),
    "custom": ("preset", *ARCHITECTURE_FIELDS),
    "params": ("num_params",),
    "config": ("hf_config",),
    "hub": ("hub",),
}
MAIN_CONTROL: Final[dict[str, str]] = {"preset": "preset", "custom": "num_hidden_layers", "params": "num_params",
                                       "config": "hf_config", "hub": "hub"}
# Controls whose messages quote a config.json's own keys, which stay as the file writes them.
FILE_CONTROLS: Final = ("hf_config", "hub")

COMMON_CONTROLS: Final = (
    "source", "unit", "gpu", GPU_CAPACITY, GPU_LIKE, "precision", *DTYPE_FIELDS, *DECLARED_CONTROLS, HOST_RAM,
    "target_modules", *SAVABLE, "bitsandbytes_version",
)
ALL_CONTROLS: Final = frozenset(COMMON_CONTROLS) | {c for controls in SOURCE_CONTROLS.values() for c in controls}

@dataclass(frozen=True)
class ParsedForm:
    """What the form says: the values to show in its controls, and either an estimate or the errors."""

    source: Source
    unit: Unit
    values: dict[str, str]
    request: EstimateRequest | None = None
    job: Job | None = None  # the request's job, built once (a model by Hub id is fetched for it)
    estimate: core.Estimate | None = None
    errors: dict[str, str] = field(default_factory=dict)
    waiting: frozenset[str] = frozenset()  # controls among `errors` whose message asks for input, not an error
    refilled: bool = False
    host_ram_bytes: int | None = None  # host memory per node, for the offloading bar (the page's own field)

    @property
    def ok(self) -> bool:
        return self.estimate is not None and not self.errors


# --- reading single values ---------------------------------------------------------------------------


def _gpu(values: Mapping[str, str], read: Any) -> str | dict[str, Any] | None:
    """The body's `gpu`: a catalogue id, a custom GPU read from its two controls, or none."""
    if values["gpu"] != CUSTOM_GPU:
        return values["gpu"] or None
    like = values[GPU_LIKE] if values[GPU_LIKE] in core.gpu_catalogue() else None
    if like is None:
        read(GPU_LIKE, lambda control, raw: _refuse(control, "Choose one of the GPUs listed."))
    capacity = read(GPU_CAPACITY, parse_gpu_capacity)
    return {"capacity_bytes": capacity, "like": like} if capacity is not None and like is not None else None


def _pasted(control: str, raw: str) -> str:
    if not raw.strip():
        raise Waiting(control, "Paste a model's config.json to estimate it.")
    return raw


def _hub_id(control: str, raw: str) -> str:
    """A Hub id once it is whole (org/name): each update sent while it is typed would ask the Hub for a part of it."""
    if "/" not in raw.strip("/ "):
        raise Waiting(control, "Enter a model's Hub id as org/name, e.g. Qwen/Qwen2.5-7B-Instruct.")
    return raw.strip()


def _refuse(control: str, message: str) -> None:
    raise FormError(control, message)


# --- defaults and the values the controls show ----------------------------------------------------------


def _field_default(model: type[BaseModel], name: str) -> Any:
    return model.model_fields[name].get_default(call_default_factory=True)


def default_values() -> dict[str, str]:
    """The form's first view: the API's own defaults, plus a preset and a GPU so it says something."""
    values = {
        "source": DEFAULT_SOURCE,
        "unit": DEFAULT_UNIT,
        "preset": DEFAULT_PRESET,
        "gpu": DEFAULT_GPU,
        GPU_CAPACITY: "",
        GPU_LIKE: DEFAULT_LIKE,
        "num_params": "",
        "hf_config": "",
        "hub": "",
        "precision": str(_field_default(TrainingIn, "precision")),
        HOST_RAM: DEFAULT_HOST_RAM,
        "target_modules": ",".join(_field_default(FinetuningIn, "target_modules")),
        "bitsandbytes_version": "",  # blank: 0.43.2 or later (the API's null)
        **{name: "" for name in SAVABLE},
    }
    for control, (section, name, spec) in DECLARED_CONTROLS.items():
        values[control] = _shown_default(spec, getattr(SECTIONS[section](), name))
    return values


def _shown_default(spec: Input, default: Any) -> str:
    """A declared field's default as its control shows it: blank for the API's null (e.g. an even split)."""
    if default is None:
        return ""
    if spec.kind == "bool":
        return _flag(default)
    return format(default, "g") if spec.kind == "float" else str(default)


def _flag(value: bool | None) -> str:
    return TRUE if value else ""


def architecture_values(architecture: core.Architecture) -> dict[str, str]:
    """The architecture fields as the custom-architecture controls show them (exact, resolved values)."""
    resolved = {
        "num_key_value_heads": architecture.kv_heads,
        "head_dim": architecture.head_size,
        "intermediate_size": architecture.ffn_size,
        "attention_dropout": architecture.attn_dropout,
        "moe_intermediate_size": architecture.expert_size,
    }
    values = {}
    for name in ARCHITECTURE_FIELDS:
        value = resolved.get(name, getattr(architecture, name))
        if name == "qkv_bias":
            values[name] = "" if value is None else _flag(value) or "false"
        elif isinstance(value, bool):
            values[name] = _flag(value)
        else:
            values[name] = str(value)
    return values


def precision_values(preset_id: str) -> dict[str, str]:
    precision = core.PRECISION_PRESETS[preset_id].precision
    return {name: getattr(precision, name) or NO_MASTER for name in DTYPE_FIELDS}


# --- the whole form ---------------------------------------------------------------------------------------


class _Reader:
    """Reads controls; keeps the first message per control, and which of them wait for input rather than err."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values
        self.errors: dict[str, str] = {}
        self.waiting: set[str] = set()

    def __call__(self, control: str, reader: Any) -> Any:
        try:
            return reader(control, self.values[control])
        except FormError as error:
            if error.control not in self.errors and isinstance(error, Waiting):
                self.waiting.add(error.control)
            self.errors.setdefault(error.control, error.message)
            return None


def parse_form(params: Mapping[str, str]) -> ParsedForm:
    """Read the query parameters, build the request and run the estimate; never raises for bad input."""
    values = default_values()
    submitted = {name: str(params[name]) for name in ALL_CONTROLS if name in params}
    values.update(submitted)
    source: Source = values["source"] if values["source"] in SOURCES else DEFAULT_SOURCE
    unit: Unit = values["unit"] if values["unit"] in UNITS else DEFAULT_UNIT
    values["source"], values["unit"] = source, unit
    stored = core.hub_preset(values["preset"])  # a preset's Hub id selects the preset
    values["preset"] = stored.id if stored else values["preset"]

    refill = params.get("fill") == "preset"
    _fill_architecture(values, submitted, source, refill=refill)
    _fill_precision(values, submitted)

    read = _Reader(values)
    model = _model_dict(values, source, read)
    training = _training_dict(values, read)
    parallelism = _declared("parallelism", values, read)
    host_ram = read(HOST_RAM, parse_bytes) if parallelism.get("offload", "none") != "none" else None
    finetuning = _finetuning_dict(values, read)
    gpu = _gpu(values, read)
    parsed = partial(ParsedForm, source, unit, values, refilled=refill)
    if read.errors:
        return parsed(errors=read.errors, waiting=frozenset(read.waiting))

    body = {"model": model, "training": training, "parallelism": parallelism, "finetuning": finetuning,
            "gpu": gpu}
    try:
        request = EstimateRequest.model_validate(body)
    except ValidationError as error:
        custom_precision = values["precision"] == CUSTOM_PRECISION
        return parsed(errors=validation_errors(error, source, precision_is_custom=custom_precision))
    job = None
    try:
        job = to_job(request)
        result = job.estimate()
    except core.DomainError as error:
        control, message = control_for(error.field.split("."), error.message, source)
        return parsed(request=request, job=job, errors={control: message})
    return parsed(request=request, job=job, estimate=result, host_ram_bytes=host_ram)


def condition_holds(expression: str, values: Mapping[str, str]) -> bool:
    """When a control is shown: ``name=a,b`` (value is one of) or ``name>n`` (a number above n).

    static/app.js evaluates the same expressions in the browser as the person changes the form.
    """
    if ">" in expression:
        name, threshold = expression.split(">", 1)
        text = "".join(values.get(name, "").replace(",", "").replace("_", "").split())
        return text.isdigit() and int(text) > int(threshold)
    name, choices = expression.split("=", 1)
    return values.get(name, "") in choices.split(",")


def _declared(section: str, values: Mapping[str, str], read: _Reader) -> dict[str, Any]:
    """A section's declared fields, each from its control while the page shows it; a blank one that may be null
    (e.g. the layers on the first stage) is left to the API's default."""
    fields: dict[str, Any] = {}
    for control, (where, name, spec) in DECLARED_CONTROLS.items():
        if where != section or not all(condition_holds(when, values) for when in SHOWN_WHEN.get(control, ())):
            continue
        raw = values[control]
        if spec.kind == "choice":
            fields[name] = raw
        elif spec.kind == "bool":
            fields[name] = raw == TRUE
        elif raw.strip() or not spec.nullable:
            fields[name] = read(control, PARSERS.get(control, parse_int if spec.kind == "int" else parse_factor))
    return fields


def _training_dict(values: Mapping[str, str], read: _Reader) -> dict[str, Any]:
    training = _declared("training", values, read)
    if values["precision"] == CUSTOM_PRECISION:
        training["precision"] = {name: None if values[name] == NO_MASTER else values[name] for name in DTYPE_FIELDS}
    else:
        training["precision"] = values["precision"]
    return training


def parse_modules(control: str, raw: str) -> list[str] | str:
    """Module names separated by commas or spaces (``q_proj, v_proj``), ``all-linear``, or else a regular
    expression (``.*\\.(q_proj|v_proj)``), as peft takes a string."""
    if not raw.strip():
        raise FormError(control, "Name at least one module, e.g. q_proj, v_proj, or all-linear.")
    return targets_from_text(raw)


def _finetuning_dict(values: Mapping[str, str], read: Any) -> dict[str, Any]:
    """The finetuning fields the chosen method shows: adapters' for LoRA/QLoRA, freezing for full."""
    finetuning = _declared("finetuning", values, read)
    method = values[FINETUNING_METHOD]
    if method in ("lora", "qlora"):
        finetuning["target_modules"] = read("target_modules", parse_modules)
        finetuning["modules_to_save"] = [module for name, module in SAVABLE.items() if values[name] == TRUE]
        if method == "qlora" and values["bitsandbytes_version"].strip():
            finetuning["bitsandbytes_version"] = read("bitsandbytes_version", parse_version)
    return finetuning


def _fill_architecture(values: dict[str, str], submitted: Mapping[str, str], source: Source, *, refill: bool) -> None:
    """Give the architecture controls the preset's exact values unless the person is editing them.

    In custom mode the submitted fields win; when none were submitted (the person has just switched
    to custom, or asked to refill) they start from the chosen preset.
    """
    preset_id = values["preset"] if values["preset"] in core.model_presets() else DEFAULT_PRESET
    from_preset = architecture_values(core.get_preset(preset_id).architecture)
    editing = source == "custom" and not refill and any(
        name in submitted for name in ARCHITECTURE_FIELDS if name not in ARCH_CHECKBOXES)
    if not editing:
        values.update(from_preset)
        return
    # A field left out of the URL keeps the preset's value; an unticked box is not sent, so it is off.
    for name in ARCHITECTURE_FIELDS:
        if name in ARCH_CHECKBOXES:
            values[name] = submitted.get(name, "")
        else:
            values.setdefault(name, from_preset[name])


def _fill_precision(values: dict[str, str], submitted: Mapping[str, str]) -> None:
    """The per-tensor dtype controls show the preset's dtypes, or the submitted ones in custom mode."""
    preset_id = values["precision"]
    shown = preset_id if preset_id in core.PRECISION_PRESETS else str(_field_default(TrainingIn, "precision"))
    for name, dtype in precision_values(shown).items():
        if preset_id != CUSTOM_PRECISION or name not in submitted:
            values[name] = dtype


def _model_dict(values: Mapping[str, str], source: Source, read: Any) -> dict[str, Any]:
    if source == "preset":
        return {"preset": values["preset"]}
    if source == "params":
        return {"num_params": read("num_params", parse_count)}
    if source == "config":
        return {"hf_config": read("hf_config", _pasted)}
    if source == "hub":
        return {"hub": read("hub", _hub_id)}
    model: dict[str, Any] = {}
    if values["preset"] in core.model_presets():
        model["preset"] = values["preset"]
    # Every field is explicit: the controls show resolved values, so an emptied one is an error
    # rather than a silent fallback to the preset's value.
    for name in ARCHITECTURE_FIELDS:
        model[name] = _architecture_field(name, values, read)
    return {name: value for name, value in model.items() if value is not None}


def _architecture_field(name: str, values: Mapping[str, str], read: Any) -> Any:
    raw = values.get(name, "").strip()
    if name in ARCH_CHECKBOXES:
        return raw == TRUE
    if name == "qkv_bias":
        return raw == TRUE if raw else values.get("attention_bias") == TRUE
    if name in ARCH_INTS:
        return read(name, parse_int)
    if name in ARCH_FLOATS:
        return read(name, parse_probability)
    return raw


# --- errors to controls -----------------------------------------------------------------------------------


def control_for(path: Sequence[str | int], message: str, source: Source) -> tuple[str, str]:
    """The control to show `message` next to, for an error at `path` (API field path or pydantic loc).

    The last path element that names a control active under `source` wins; a model error on a
    control that is not on screen (a config.json key, say) goes to the source's main control, with
    the key named in the message. Field names in the message become the page's labels, except in a
    config.json's messages, whose keys are the file's own words.
    """
    control, text = _control_for(path, message, source)
    return control, text if control in FILE_CONTROLS else in_page_words(text)


def _control_for(path: Sequence[str | int], message: str, source: Source) -> tuple[str, str]:
    parts = _error_parts(path)
    if parts and parts[0] == "gpu" and parts[-1] in GPU_FIELDS:
        return GPU_FIELDS[parts[-1]], _prefixed([], message)
    index = _last_active(parts, set(COMMON_CONTROLS) | set(SOURCE_CONTROLS[source]))
    if index is not None:
        return parts[index], _prefixed(_keys(parts[index + 1:], ALL_CONTROLS), message)
    if parts and parts[0] == "model":
        return MAIN_CONTROL[source], _prefixed(_keys(parts[1:], {*SOURCE_CONTROLS[source], "hf_config"}), message)
    return "form", _prefixed(parts, message)


def _keys(parts: Sequence[str], controls: Collection[str]) -> list[str]:
    """The parts of an error's path to name in its message: neither controls nor pydantic's type tags."""
    return [part for part in parts if part not in controls and not _is_type_tag(part)]


def _error_parts(path: Sequence[str | int]) -> list[str]:
    """An error's path as words, without pydantic's ``body``/``query`` and with the finetuning aliases resolved."""
    parts = [str(part) for part in path if str(part) not in ("body", "query")]
    if len(parts) > 1 and parts[0] == "finetuning" and parts[1] in FINETUNING_ALIASES:
        parts = [parts[0], FINETUNING_ALIASES[parts[1]], *parts[2:]]
    return parts


def _last_active(parts: Sequence[str], active: set[str]) -> int | None:
    """The index of the last part that names a control on screen."""
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in active:
            return index
    return None


def _other_union_branch(loc: Sequence[str | int], *, precision_is_custom: bool) -> bool:
    """An error from the union member the form did not choose (precision is a preset id or the dtypes)."""
    if tuple(loc[:2]) != ("training", "precision") or len(loc) < 3:
        return False
    tag = str(loc[2])
    return tag.startswith("literal[") if precision_is_custom else tag == PrecisionIn.__name__


def _is_type_tag(part: str) -> bool:
    """pydantic adds the union member tried to a loc (``PrecisionIn``, ``literal['fp32',...]``, ``str``)."""
    return part[:1].isupper() or "[" in part or part in ("str", "int", "dict", "float", "bool")


def _prefixed(keys: Sequence[str], message: str) -> str:
    first_word = message.split(" ", 1)[0]
    if first_word.replace("-", "").isalpha() and first_word.islower():
        message = message[:1].upper() + message[1:]
    return f"{'.'.join(keys)}: {message}" if keys else message


def validation_errors(error: ValidationError, source: Source, *, precision_is_custom: bool = False) -> dict[str, str]:
    """pydantic's errors, one message per control (the first, which is the one to fix first)."""
    errors: dict[str, str] = {}
    for item in error.errors(include_url=False):
        if _other_union_branch(item["loc"], precision_is_custom=precision_is_custom):
            continue
        message = item["msg"].removeprefix("Value error, ")
        control, text = control_for(item["loc"], message, source)
        errors.setdefault(control, _bound(control, item) or text)
    return errors


# pydantic's bounds, as the page says them: the control's label, then the bound.
BOUNDS: Final = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
                 "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than")}


def _bound(control: str, item: Mapping[str, Any]) -> str | None:
    """``Micro-batch size must be at least 1.`` for pydantic's ``Input should be greater than or equal to 1``; a
    choice that is not one of a select's options (a value from an edited URL) asks for one of them."""
    if item["type"] == "literal_error":
        return f"Choose one of the {_mid_sentence(LABELS[control]) + ' ' if control in LABELS else ''}options listed."
    if item["type"] not in BOUNDS or control not in LABELS:
        return None
    key, words = BOUNDS[item["type"]]
    bound = (item.get("ctx") or {}).get(key)
    shown = f"{bound:,}" if isinstance(bound, int) else f"{bound:g}" if isinstance(bound, float) else str(bound)
    return f"{LABELS[control]} must be {words} {shown}."


# Field names the core's messages use, in the page's words (a config.json's own keys stay as written there).
_KEY: Final = re.compile(r"\b(" + "|".join(sorted((re.escape(name) for name in LABELS if "_" in name),
                                                   key=len, reverse=True)) + r")\b")


def in_page_words(message: str) -> str:
    """`message` with each field name it uses (``num_attention_heads``) as the page labels it (attention heads)."""
    def label(match: re.Match[str]) -> str:
        text = LABELS[match.group(1)]
        return text if match.start() == 0 else _mid_sentence(text)
    return _KEY.sub(label, message)


def _mid_sentence(label: str) -> str:
    """A label inside a sentence: ``attention heads``, but ``MLP inner size`` and ``LoRA rank`` as written."""
    return label if label[1:2].isupper() else label[:1].lower() + label[1:]
