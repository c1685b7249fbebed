"""Training configs in and out: a framework's config file read into an estimate body, and written back.

The standard library, PyYAML and the core only, so the command line can read a config without the web framework.

* `import_config(kind, text)` and `import_files([(kind, text), ...])` answer
  ``{"kind", "kinds", "request", "understood", "ignored", "assumed"}``: `request` is an estimate body for
  POST /api/v1/estimate, /solve and /sweep; `understood` lists each key read with the body field it set,
  `ignored` each key left aside with the reason, `assumed` each value the config did not say and why it was
  chosen. Bad input raises `app.core.DomainError` naming the key, e.g. ``text.zero_optimization.stage``.
* `export_config(body, kind)` answers ``{"kind", "filename", "text", "notes", "unexpressed"}``.

Kinds read: deepspeed (JSON), training-arguments (TrainingArguments' JSON), accelerate and axolotl (YAML, read
by `app.configs.yaml`), torchtitan (TOML) and megatron (command-line flags), or auto. Nothing in a config is run,
opened or fetched: paths and model ids are reported.
"""

from __future__ import annotations

import re
from typing import Any, Final

from app import wire
from app.configs import accelerate, axolotl, deepspeed, megatron, torchtitan, trainer, yaml
from app.configs.common import Reading
from app.configs.merge import merge
from app.core import DomainError

KINDS: Final = ("deepspeed", "training-arguments", "accelerate", "axolotl", "torchtitan", "megatron")
IMPORT_KINDS: Final = ("auto", *KINDS)
EXPORT_KINDS: Final = ("deepspeed", "training-arguments", "accelerate", "axolotl")
MAX_TEXT_BYTES: Final = wire.MAX_BODY_BYTES
MAX_DEPTH: Final = wire.MAX_JSON_DEPTH
MAX_FILES: Final = 8
STANDALONE: Final = ("torchtitan", "megatron")
FORMATS: Final = {"deepspeed": "JSON", "training-arguments": "JSON", "accelerate": "YAML", "axolotl": "YAML",
                  "torchtitan": "TOML", "megatron": "command-line flags"}

_READERS: Final = {"deepspeed": deepspeed.read, "training-arguments": trainer.read, "accelerate": accelerate.read,
                   "axolotl": axolotl.read, "torchtitan": torchtitan.read}

_DS_KEYS: Final = ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size", "zero_allow_untested_optimizer",
                   "steps_per_print", "wall_clock_breakdown", "gradient_clipping", "torch_autocast")
_TRAINER_KEYS: Final = ("per_device_train_batch_size", "output_dir", "optim", "learning_rate", "num_train_epochs",
                        "per_device_eval_batch_size", "logging_steps", "save_strategy", "eval_strategy",
                        "lr_scheduler_type", "warmup_steps", "report_to")
_ACCELERATE_KEYS: Final = ("distributed_type", "compute_environment", "num_processes", "mixed_precision",
                           "main_training_function", "machine_rank", "num_machines")
_AXOLOTL_KEYS: Final = ("base_model", "datasets", "sequence_len", "micro_batch_size", "adapter", "lora_r",
                        "output_dir", "num_epochs", "sample_packing", "optimizer", "gradient_accumulation_steps")
_TOML_TABLE: Final = re.compile(r"^[ \t]*\[{1,2}[A-Za-z0-9_.\- \"]+\]{1,2}[ \t]*(#.*)?$", re.M)
_TOML_KEY: Final = re.compile(r"^[ \t]*[A-Za-z0-9_\-\"]+[ \t]*=", re.M)


def check_text(text: Any, where: str) -> str:
    if not isinstance(text, str):
        raise DomainError(where, "must be the config's text, a string")
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise DomainError(where, f"is larger than {MAX_TEXT_BYTES:,} bytes")
    if "\x00" in text:
        raise DomainError(where, "contains a NUL character: not a text config")
    return text


def depth(value: Any) -> int:
    """How deeply lists and mappings nest, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


def parse(kind: str, text: str, where: str) -> Any:
    """A config's text as data (the text itself for megatron), bounded like the API's JSON."""
    check_text(text, where)
    if kind in ("deepspeed", "training-arguments"):
        data = wire.loads_bounded(text, where)
    elif kind in ("accelerate", "axolotl"):
        data = yaml.loads(text, where)
    elif kind == "torchtitan":
        data = torchtitan.loads(text, where)
        if depth(data) > MAX_DEPTH:
            raise DomainError(where, f"nests deeper than {MAX_DEPTH} levels")
    elif kind == "megatron":
        return text
    else:
        raise DomainError("kind", f"must be one of {', '.join(IMPORT_KINDS)}, got {kind!r}")
    if kind != "megatron" and not isinstance(data, dict):
        raise DomainError(where, f"must hold a {FORMATS[kind]} mapping of keys to values (a {kind} config)")
    return data


def detect(text: str, where: str = "text") -> str:
    """The kind a config's text is, from its syntax and its keys."""
    check_text(text, where)
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        return _detect_json(text, where)
    if megatron.looks_like(text):
        return "megatron"
    if _TOML_TABLE.search(text) and _TOML_KEY.search(text):
        return _detect_toml(text, where)
    return _detect_yaml(text, where)


def _detect_json(text: str, where: str) -> str:
    """DeepSpeed's config or the Trainer's arguments, by which of their keys the object has more of."""
    data = wire.loads_bounded(text, where)
    if not isinstance(data, dict):
        raise DomainError(where, "is JSON but not an object: not a config")
    ds = sum(key in data for key in _DS_KEYS) + sum(isinstance(data.get(k), dict) for k in ("fp16", "bf16"))
    hf = sum(key in data for key in _TRAINER_KEYS)
    if ds or hf:
        return "deepspeed" if ds > hf else "training-arguments"
    raise DomainError("kind", "could not tell which config this JSON is (neither DeepSpeed's keys such as "
                              "zero_optimization nor TrainingArguments' such as per_device_train_batch_size): "
                              "give kind")


def _detect_yaml(text: str, where: str) -> str:
    """accelerate's launch config or axolotl's, by their keys."""
    data = yaml.loads(text, where)
    if isinstance(data, dict):
        if sum(key in data for key in _ACCELERATE_KEYS) >= 2 or "distributed_type" in data:
            return "accelerate"
        if any(key in data for key in _AXOLOTL_KEYS):
            return "axolotl"
    raise DomainError("kind", "could not tell which config this is: give kind (deepspeed, training-arguments, "
                              "accelerate, axolotl, torchtitan or megatron)")


def _detect_toml(text: str, where: str) -> str:
    data = torchtitan.loads(text, where)
    if {"model", "training", "parallelism", "job"} & set(data):
        return "torchtitan"
    raise DomainError("kind", "is TOML but not a torchtitan job config (no [model], [training] or "
                              "[parallelism] table): give kind")


def read(kind: str, text: str, file: int, where: str) -> Reading:
    """One file's facts (kind already resolved)."""
    data = parse(kind, text, where)
    reading = Reading(kind, file, where)
    if kind == "megatron":
        megatron.read(data, reading)
    else:
        _READERS[kind](data, reading)
        _sweep(data, reading)
    return reading


def _sweep(data: dict[str, Any], reading: Reading) -> None:
    """Nothing dropped silently: a key no reader reported (an empty or switched-off setting) is listed as ignored."""
    seen = _reported(reading)
    above = _sections(seen)
    stack: list[tuple[str, Any]] = [(str(key), value) for key, value in data.items()]
    while stack:
        key, value = stack.pop()
        if isinstance(value, dict) and value and key not in seen:
            stack.extend((f"{key}.{k}", v) for k, v in value.items())
        elif not _accounted(key, seen, above):
            reading.ignore(key, _unset_reason(value))


def _unset_reason(value: Any) -> str | None:
    """Why a key no reader reported is left aside: empty, switched off, or (None) the reason its name gives."""
    return "empty: not set" if value in (None, "", [], {}) else "off" if value is False else None


def _sections(keys: set[str]) -> set[str]:
    """The sections that hold any of `keys` (``a`` and ``a.b`` for ``a.b.c``)."""
    return {key[:i] for key in keys for i, c in enumerate(key) if c == "."}


def _reported(reading: Reading) -> set[str]:
    """The keys a reading (and the readings nested in it) reported: facts, understood, ignored, "auto"."""
    readings = (reading, *reading.children)
    seen = {fact.key for r in readings for fact in r.facts}
    seen |= {entry["key"] for r in readings for entry in (*r.understood, *r.ignored)}
    seen |= {key for r in readings for key in r.autos.values()}  # the merge says what fills them
    seen.discard("")
    return seen


def _accounted(key: str, seen: set[str], above: set[str]) -> bool:
    """Whether a key was reported, itself, through a section above it or through a key below it."""
    return key in seen or key in above or any(key[:i] in seen for i, c in enumerate(key) if c == ".")


def import_config(kind: str, text: Any) -> dict[str, Any]:
    """One config file as an estimate body (see the module's docstring)."""
    return import_files([{"kind": kind, "text": text}], single=True)


def import_files(files: list[dict[str, Any]] | list[tuple[str, str]], *, single: bool = False) -> dict[str, Any]:
    """Several files of one run (e.g. the Trainer's arguments and the DeepSpeed file they name), merged in the
    order accelerate < Trainer/axolotl < DeepSpeed (see `app.configs.merge`)."""
    items = [item if isinstance(item, dict) else {"kind": item[0], "text": item[1]} for item in files]
    if not items:
        raise DomainError("files", "give at least one file")
    if len(items) > MAX_FILES:
        raise DomainError("files", f"at most {MAX_FILES} files")
    kinds, texts = _kinds_and_texts(items, single)
    _check_combination(kinds, single)
    readings = [read(kind, text, index, "text" if single else f"files.{index}.text")
                for index, (kind, text) in enumerate(zip(kinds, texts, strict=True))]
    if "deepspeed" in kinds:
        _one_deepspeed(kinds, readings)
    request, lists, sources = merge(readings)
    _check_request(request, sources, {r.file: r.where for r in readings})
    return {"kind": "+".join(kinds), "kinds": kinds, "request": request, **lists}


def _kinds_and_texts(items: list[dict[str, Any]], single: bool) -> tuple[list[str], list[str]]:
    """Each file's kind (detected where it says auto) and its checked text."""
    kinds, texts = [], []
    for index, item in enumerate(items):
        where = "text" if single else f"files.{index}.text"
        kind_where = "kind" if single else f"files.{index}.kind"
        kind = item.get("kind") or "auto"
        if kind not in IMPORT_KINDS:
            raise DomainError(kind_where, f"must be one of {', '.join(IMPORT_KINDS)}, got {kind!r}")
        text = check_text(item.get("text"), where)
        if kind == "auto":
            kind = detect(text, where) if single else _detect_in_files(text, where, kind_where)
        kinds.append(kind)
        texts.append(text)
    return kinds, texts


def _one_deepspeed(kinds: list[str], readings: list[Reading]) -> None:
    """A DeepSpeed file beside the arguments that name it: refused if they hold it inline too, else their path
    is said to be the file read."""
    index = kinds.index("deepspeed")
    if any(r.kind == "deepspeed" for top in readings for r in top.children):
        raise DomainError(f"files.{index}.kind", "the other file already holds its DeepSpeed "
                                                 "config inline: give one of the two")
    for reading in readings:
        for entry in reading.ignored:
            if entry["key"] == "deepspeed" and reading.kind in ("training-arguments", "axolotl"):
                entry["why"] = f"a path, never opened: the DeepSpeed config read is files[{index}]"


def _detect_in_files(text: str, where: str, kind_where: str) -> str:
    try:
        return detect(text, where)
    except DomainError as error:
        if error.field == "kind":
            raise DomainError(kind_where, error.message) from None
        raise


def _check_combination(kinds: list[str], single: bool) -> None:
    if single:
        return
    for index, kind in enumerate(kinds):
        if kind in STANDALONE and len(kinds) > 1:
            raise DomainError(f"files.{index}.kind", f"a {kind} config describes a whole run: import it alone")
        if kinds.index(kind) != index:
            raise DomainError(f"files.{index}.kind", f"files[{kinds.index(kind)}] is a {kind} config too: one of "
                                                     "each kind")
        if kind == "axolotl" and "training-arguments" in kinds:
            raise DomainError(f"files.{index}.kind", "the Trainer's arguments and an axolotl config both set the "
                                                     "run's arguments: give one of the two")


def _check_request(request: dict[str, Any], sources: dict[str, tuple[int, str]], where: dict[int, str]) -> None:
    """The body must be one the estimate accepts; what the core refuses is reported at the config key it came from."""
    try:
        wire.job_from(request).estimate(reserve=False)  # only whether the core accepts it
    except DomainError as error:
        field = error.field
        source = _source_of(field, sources)
        if source is None:
            raise DomainError(next(iter(where.values())), f"makes an estimate trainmem refuses: {error}") from None
        file, key = source
        raise DomainError(f"{where.get(file, 'text')}.{key}", f"{error.message} ({field})") from None


def _source_of(field: str, sources: dict[str, tuple[int, str]]) -> tuple[int, str] | None:
    """The (file, key) a body field came from: its own, the nearest section above it's, or for the model any
    model field's."""
    source = sources.get(field)
    if source is None:
        parts = field.split(".")
        for end in range(len(parts) - 1, 0, -1):
            source = sources.get(".".join(parts[:end]))
            if source:
                break
    if source is None and field.startswith("model"):
        source = sources.get("model.preset") or next((v for k, v in sources.items() if k.startswith("model.")),
                                                     None)
    return source
