"""A pasted training config on the page: read by `app.configs`, then set into the form's controls.

``POST /import`` (app/web/pages.py) takes the pasted text, its kind (``auto``: detected from the text)
and the page's state; it answers the page with the form filled and a report of what the config said.
The URL it leaves behind holds the resulting state, never the pasted text.

What the config says wins; what it does not say keeps the value the page had: a DeepSpeed file names
no model and no GPU, so the person's own model and GPU stay. "Says" means a key was read into the field
(``understood``) or the field was worked out from the file (``assumed`` with a file); trainmem's own
defaults for fields the file is silent on (``assumed`` without one) do not count.

A Hugging Face ``config.json`` (a model, not a run) is recognised too and sets the model from it.
Nothing here raises for bad input: `read_paste` answers a `PasteError` naming the key at fault.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

from app import configs, core, wire
from app.api.schemas import ARCHITECTURE_FIELDS, to_job
from app.core.job import JOB_FIELDS, with_field
from app.web import controls, links
from app.web.form import (
    ALL_CONTROLS,
    CUSTOM_GPU,
    CUSTOM_PRECISION,
    DTYPE_FIELDS,
    GPU_FIELDS,
    NO_MASTER,
    SAVABLE,
    TRUE,
    architecture_values,
    parse_form,
)
from app.web.view import format_size_input

TEXT: Final = "config_text"  # the paste form's fields; none is a control of the calculator
KIND: Final = "config_kind"
STATE: Final = "state"  # the page's query when the paste form was drawn (without JavaScript)
NAMES: Final = frozenset({TEXT, KIND, STATE})

AUTO: Final = "auto"
HF_CONFIG: Final = "hf-config"
KIND_LABELS: Final[dict[str, str]] = {
    AUTO: "Detect from the text",
    "deepspeed": "DeepSpeed (JSON)",
    "training-arguments": "Trainer arguments (TrainingArguments JSON)",
    "accelerate": "accelerate (YAML)",
    "axolotl": "axolotl (YAML)",
    "torchtitan": "torchtitan (TOML)",
    "megatron": "Megatron-LM (command-line flags)",
    HF_CONFIG: "Hugging Face config.json (the model)",
}
KINDS: Final = tuple(KIND_LABELS)
# The keys that make a JSON object a model's config.json rather than a run's.
HF_KEYS: Final = ("model_type", "architectures")
MODEL_CONTROLS: Final = ("source", "preset", "num_params", "hf_config", "hub", *ARCHITECTURE_FIELDS)
SECTIONS: Final = ("training", "parallelism", "finetuning")
MAX_SHOWN_VALUE: Final = 80  # characters of a value the report shows


@dataclass(frozen=True)
class Understood:
    key: str
    value: str
    field: str  # the control's label
    path: str  # the API field, e.g. parallelism.zero_stage
    note: str


@dataclass(frozen=True)
class Ignored:
    key: str
    why: str


@dataclass(frozen=True)
class Assumed:
    field: str
    path: str
    value: str
    why: str


@dataclass(frozen=True)
class Imported:
    """A config read into the page's state, and what it said, for the report beside the result."""

    kind: str
    kind_label: str
    state: links.State
    understood: tuple[Understood, ...]
    assumed: tuple[Assumed, ...]
    ignored: tuple[Ignored, ...]
    kept: tuple[str, ...]  # labels of what the config does not say, kept as the page had it
    not_carried: tuple[str, ...]  # what the config says that the page's form cannot hold, in words

    @property
    def href(self) -> str:
        return links.href(self.state)


@dataclass(frozen=True)
class PasteError:
    """Why the pasted text was not read: `control` is the paste form's field to show it at."""

    control: str
    message: str


def page_state(fields: Mapping[str, str]) -> links.State:
    """The page's state as the paste form sent it: the calculator's controls (htmx includes them), else the
    query the form was drawn with."""
    names = ALL_CONTROLS | {links.PIN}
    if "source" in fields:
        return links.state_of(fields, names=names)
    raw = str(fields.get(STATE, ""))[: configs.MAX_TEXT_BYTES]
    return links.state_of(dict(parse_qsl(raw, keep_blank_values=True)), names=names)


def read_paste(kind: str, text: str, state: Mapping[str, str]) -> Imported | PasteError:
    """The pasted `text` of `kind` (or auto) set over the page's `state`; never raises for bad input."""
    if kind not in KIND_LABELS:
        return PasteError(KIND, f"Choose one of the kinds listed (got {kind[:40]!r}).")
    if not text.strip():
        return PasteError(TEXT, "Paste a config first.")
    try:
        if kind == HF_CONFIG or (kind == AUTO and _is_hf_config(text)):
            return _hf_config(text, state)
        answer = configs.import_config(kind, text)
    except core.DomainError as error:
        return _error(error)
    return _imported(answer, state)


def _error(error: core.DomainError) -> PasteError:
    field = error.field
    if field == "kind":
        return PasteError(KIND, _sentence(error.message.replace("give kind", "choose its kind")))
    key = field.removeprefix("model.hf_config").removeprefix("text").lstrip(".")
    return PasteError(TEXT, f"{key}: {error.message}" if key else f"The config {error.message}")


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:]


def _is_hf_config(text: str) -> bool:
    if not text.lstrip("\ufeff \t\r\n").startswith("{"):
        return False
    try:
        data = wire.loads_bounded(text, "text")
    except core.DomainError:
        return False  # detection proper reports the syntax error
    return isinstance(data, dict) and any(key in data for key in HF_KEYS)


def _hf_config(text: str, state: Mapping[str, str]) -> Imported | PasteError:
    configs.check_text(text, "text")
    data = wire.loads_bounded(text, "text")
    if not isinstance(data, dict):
        return PasteError(TEXT, "A config.json must hold a JSON object.")
    core.architecture_from_hf_config(data)  # a DomainError names the key at fault
    compact = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    new = {name: value for name, value in state.items() if name not in MODEL_CONTROLS}
    new = {"source": "config", "hf_config": compact, **new}
    key = next(key for key in (*HF_KEYS, "") if key in data or not key)
    understood = (Understood(key or "(the file)", _shown(data.get(key)), controls.LABELS["hf_config"],
                             "model.hf_config", "the whole file describes the model"),)
    kept = tuple(label for label in _kept_labels(set(), {}) if label != controls.LABELS["preset"])
    return Imported(HF_CONFIG, KIND_LABELS[HF_CONFIG], new, understood, (), (), kept, ())


def _imported(answer: dict[str, Any], state: Mapping[str, str]) -> Imported:
    request = answer["request"]
    said = said_fields(answer)
    new, not_carried = config_state(request, said, state)
    not_carried += _dropped(request, said, new)
    understood = tuple(Understood(entry["key"], _shown(entry["value"]), _label(entry["field"]), entry["field"],
                                  entry.get("note") or "") for entry in answer["understood"])
    assumed = tuple(Assumed(_label(entry["field"]), entry["field"], _shown(entry["value"]), entry["why"])
                    for entry in answer["assumed"] if entry.get("file") is not None)
    ignored = tuple(Ignored(entry["key"], entry["why"] or "") for entry in answer["ignored"])
    kind = answer["kind"]
    return Imported(kind, KIND_LABELS.get(kind, kind), new, understood, assumed, ignored,
                    _kept_labels(said, request), tuple(dict.fromkeys(not_carried)))


def said_fields(answer: Mapping[str, Any]) -> set[str]:
    """The body's fields the config speaks to: all but those the import reports as trainmem's defaults (assumed,
    from no file) and read from no key."""
    request = answer["request"]
    read = {entry["field"] for entry in answer["understood"]}
    read |= {entry["field"] for entry in answer["assumed"] if entry.get("file") is not None}
    defaults = {entry["field"] for entry in answer["assumed"] if entry.get("file") is None} - read
    fields = set(_flat(request)) | {f"model.{name}" for name in request.get("model") or {}}
    return (fields - defaults) | read


def config_state(request: Mapping[str, Any], said: set[str], state: Mapping[str, str]) -> tuple[links.State, list[str]]:
    """`state` with each field in `said` set from the estimate body `request`; what the page has no control for,
    in words."""
    new = dict(state)
    not_carried: list[str] = []
    if any(path.startswith("model.") for path in said):
        new = model_state(request) | {name: value for name, value in new.items() if name not in MODEL_CONTROLS}
    change: dict[str, object] = {}
    for path, value in _flat(request).items():
        if _is_said(path, said):
            _carry(path, value, change, not_carried)
    return _with(new, change), not_carried


def _carry(path: str, value: Any, change: dict[str, object], not_carried: list[str]) -> None:
    """A field into `change` as its control's value (the modules to save as one box each), or into `not_carried`
    when the page has no control for it."""
    if path == "finetuning.modules_to_save":
        for name, module in SAVABLE.items():
            change[f"finetuning.{name}"] = module in (value or ())
        return
    try:
        links.control_for(path)
    except ValueError:
        not_carried.append(f"{path} = {_shown(value)}: the page has no control for it (the JSON API reads it)")
        return
    change[path] = _control_value(path, value)


def _is_said(path: str, said: set[str]) -> bool:
    """Whether the config speaks to a field: itself, or a custom precision's dtype through the precision."""
    return path in said or (path.startswith("training.precision.") and "training.precision" in said)


def _with(state: Mapping[str, str], change: Mapping[str, object]) -> links.State:
    """`links.changed`, with the savable modules (a control each, not an API field) set by name."""
    out = links.changed(state, {path: value for path, value in change.items()
                                if path.rpartition(".")[2] not in SAVABLE})
    for path, value in change.items():
        name = path.rpartition(".")[2]
        if name in SAVABLE:
            out.pop(name, None)
            if value:
                out[name] = TRUE
    return out


def model_state(request: Mapping[str, Any]) -> links.State:
    """The model controls for the body's `model`: a preset, a parameter count, a config.json or an architecture."""
    model = request.get("model") or {}
    if model.get("hf_config") is not None:
        config = model["hf_config"]
        text = config if isinstance(config, str) else json.dumps(config, separators=(",", ":"), ensure_ascii=False)
        return {"source": "config", "hf_config": text}
    if model.get("num_params") is not None:
        return {"source": "params", "num_params": str(model["num_params"])}
    if any(model.get(name) is not None for name in ARCHITECTURE_FIELDS):
        return _custom_state(request, model)
    return {"source": "preset", "preset": str(model.get("preset"))}


def _custom_state(request: Mapping[str, Any], model: Mapping[str, Any]) -> links.State:
    """A custom architecture's controls, each with its resolved value, and the preset it started from."""
    architecture = wire.job_from(request).architecture
    assert architecture is not None
    out = {"source": "custom"} | ({"preset": str(model["preset"])} if model.get("preset") else {})
    return out | {name: value for name, value in architecture_values(architecture).items() if value != ""}


def _flat(request: Mapping[str, Any]) -> dict[str, Any]:
    """The body's training, parallelism and finetuning fields by path; a custom precision by tensor."""
    out: dict[str, Any] = {}
    for section in SECTIONS:
        for name, value in (request.get(section) or {}).items():
            if section == "training" and name == "precision" and isinstance(value, dict):
                out["training.precision"] = CUSTOM_PRECISION
                out |= {f"training.{dtype}": value.get(dtype) for dtype in DTYPE_FIELDS}
                continue
            out[f"{section}.{name}"] = value
    return out | _gpu_fields(request.get("gpu"))


def _gpu_fields(gpu: Any) -> dict[str, Any]:
    """A catalogue GPU's id; a custom GPU as the select's custom choice and its fields' controls; none."""
    if isinstance(gpu, Mapping):
        return {"gpu": CUSTOM_GPU} | {f"gpu.{name}": value for name, value in gpu.items()
                                      if name in GPU_FIELDS and value is not None}
    return {"gpu": gpu} if gpu else {}


def _control_value(path: str, value: Any) -> object:
    name = path.rpartition(".")[2]
    if name in DTYPE_FIELDS and value is None:
        return NO_MASTER
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    if name in ("framework_overhead_bytes", "capacity_bytes") and isinstance(value, int):
        return format_size_input(value)
    return value


def _dropped(request: Mapping[str, Any], said: set[str], state: Mapping[str, str]) -> list[str]:
    """What the config says that the form, reading `state`, does not carry where it would change the estimate (a
    control the page reads only when another setting calls for it, such as offloading with one data-parallel GPU)."""
    form = parse_form(state)
    if form.request is None or form.estimate is None:
        return []  # the form's own messages say what is wrong
    job = to_job(form.request)
    shown = _flat(form.request.model_dump(include={"training", "parallelism", "finetuning", "gpu"}))
    out = []
    for path, value in _flat(request).items():
        if path not in said or path not in shown or shown[path] == value or path not in JOB_FIELDS:
            continue
        try:
            peak = with_field(job, path, value).estimate(reserve=False).peak.bytes
        except core.DomainError:
            peak = None
        if peak != form.estimate.peak.bytes:
            out.append(f"{_label(path)} = {_shown(value)}: the page keeps {_shown(shown[path])}, as it reads this "
                       "setting only when another calls for it")
    return out


def _label(path: str) -> str:
    name = path.rpartition(".")[2]
    try:
        name = links.control_for(path)
    except ValueError:
        pass
    return controls.LABELS.get(name, path)


def _kept_labels(said: set[str], request: Mapping[str, Any]) -> tuple[str, ...]:
    """The page's settings the config does not speak to, by label: the model, the GPU, and each field of the
    body that is trainmem's default rather than the config's."""
    out = [] if any(path.startswith("model.") for path in said) else [controls.LABELS["preset"]]
    if "gpu" not in said:
        out.append(controls.LABELS["gpu"])
    silent = [path for path in _flat(request) if path not in said and not path.startswith("training.precision.")]
    out += [_label(path) for path in silent if path != "training.precision" or "training.precision" not in said]
    return tuple(dict.fromkeys(out))


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN_VALUE else text[: MAX_SHOWN_VALUE - 1] + "…"
