"""One training job as a question is asked about it, and the fields a question may change.

A `Job` holds the estimate's inputs together. The solver, the sweeps and the fixes all ask "what
if this one field had that value": `with_field` answers with a new job, field names as the JSON API
spells them (``training.seq_len``, ``parallelism.zero_stage``, ``model.hidden_size``, ``gpu``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from app.core import finetuning as ft
from app.core.architecture import Architecture
from app.core.communicators import communicator_bytes
from app.core.errors import DomainError
from app.core.estimate import Estimate, estimate
from app.core.gpus import Gpu, get_gpu, gpu_catalogue
from app.core.inputs import Input
from app.core.precision import PRECISION_PRESETS, precision_preset
from app.core.presets import get_preset, model_presets
from app.core.reserve import tensors_pass
from app.core.setup import (
    MAX_PARAM_COUNT,
    PARALLELISM_INPUTS,
    TRAINING_INPUTS,
    Parallelism,
    Training,
    check_int,
)


@dataclass(frozen=True)
class Job:
    """Everything an estimate needs: the model (an architecture or a bare count), the run, the GPU."""

    architecture: Architecture | None = None
    num_params: int | None = None
    training: Training = field(default_factory=Training)
    parallelism: Parallelism = field(default_factory=Parallelism)
    gpu: Gpu | None = None
    notes: tuple[str, ...] = ()  # caveats about where the model came from, first among the estimate's warnings

    def estimate(self, *, reserve: bool = True, verdict_only: bool = False) -> Estimate:
        result = estimate(architecture=self.architecture, num_params=self.num_params, training=self.training,
                          parallelism=self.parallelism, gpu=self.gpu, reserve=reserve, verdict_only=verdict_only)
        return dataclasses.replace(result, warnings=(*self.notes, *result.warnings)) if self.notes else result

    def fitting_estimate(self) -> Estimate | None:
        """The estimate where the job fits its GPU, None where it does not: where its tensors alone pass the capacity
        (`surely_over`) without a replay, and where the replay runs out of room without a second one to say by how
        much."""
        result = self.estimate(verdict_only=True)
        return result if result.gpu is not None and result.gpu.fits else None

    def surely_over(self) -> bool:
        """Whether the tensors alone, with what lives outside the allocator, pass the GPU's capacity: the job does
        not fit whatever the allocator does (its reserved memory holds at least its tensors), so no replay is
        needed to say so."""
        if self.gpu is None:
            return False
        return tensors_pass(self.gpu, self.estimate(reserve=False).peak.bytes, self.training.framework_overhead_bytes,
                            communicator_bytes(self.parallelism, self.gpu.interconnect))


Kind = Literal["int", "choice", "bool", "version"]


@dataclass(frozen=True)
class JobField:
    """A field a question may vary: its API path, kind, and its range or allowed values."""

    path: str
    kind: Kind
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    nullable: bool = False  # None stands for "not set" (e.g. recompute_first_layers: every layer)


def _declared(section: str, specs: dict[str, Input]) -> list[JobField]:
    """A section's declared inputs a question may vary: its integers, choices and switches (not its fractions)."""
    return [JobField(f"{section}.{name}", spec.kind, int(spec.low), int(spec.high), spec.choices, spec.nullable)
            for name, spec in specs.items() if spec.kind != "float"]


# Architecture integers are range-checked by the Architecture itself (architecture.validate_architecture).
_ARCH_INTS: Final = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                     "intermediate_size", "vocab_size", "max_position_embeddings", "norms_per_layer",
                     "num_local_experts", "num_experts_per_tok", "moe_intermediate_size")
_ARCH_CHOICES: Final = {"mlp": ("gelu", "relu", "swiglu", "geglu"), "norm": ("layernorm", "rmsnorm"),
                        "position_embedding": ("learned", "rope")}
_ARCH_BOOLS: Final = ("tie_word_embeddings", "attention_bias", "qkv_bias", "mlp_bias", "norm_topk_prob", "qk_norm")


def _job_fields() -> dict[str, JobField]:
    fields = [
        JobField("training.precision", "choice", choices=tuple(PRECISION_PRESETS)),
        *_declared("training", TRAINING_INPUTS),
        *_declared("parallelism", PARALLELISM_INPUTS),
        *_declared("finetuning", ft.FINETUNING_INPUTS),
        JobField("finetuning.bitsandbytes_version", "version", nullable=True),  # None: 0.43.2 or later
        JobField("gpu", "choice", choices=tuple(gpu_catalogue())),
        JobField("model.preset", "choice", choices=tuple(model_presets())),
        JobField("model.num_params", "int", 1, MAX_PARAM_COUNT),
        *(JobField(f"model.{name}", "int", 1, 0) for name in _ARCH_INTS),
        *(JobField(f"model.{name}", "choice", choices=choices) for name, choices in _ARCH_CHOICES.items()),
        *(JobField(f"model.{name}", "bool") for name in _ARCH_BOOLS),
    ]
    return {item.path: item for item in fields}


JOB_FIELDS: Final = _job_fields()


def job_field(path: str, *, where: str = "vary.field") -> JobField:
    if path not in JOB_FIELDS:
        raise DomainError(where, f"cannot vary {path!r}; one of {', '.join(JOB_FIELDS)}")
    return JOB_FIELDS[path]


def check_value(item: JobField, value: object, *, where: str) -> None:
    """Refuse a value of the wrong kind or out of range, naming `where` (e.g. ``vary.values.3``)."""
    if value is None and item.nullable:
        return
    if item.kind == "bool":
        if not isinstance(value, bool):
            raise DomainError(where, f"{item.path} takes true or false, got {value!r}")
    elif item.kind == "version":
        ft.check_version(where, value)
    elif item.kind == "choice":
        if value not in item.choices:
            raise DomainError(where, f"{item.path} must be one of {', '.join(item.choices)}, got {value!r}")
    elif item.high:
        check_int(where, value, low=item.low, high=item.high)  # type: ignore[arg-type]
    elif isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(where, f"{item.path} takes an integer, got {value!r}")


def with_field(job: Job, path: str, value: object, *, where: str | None = None) -> Job:
    """The same job with one field changed; a value the field cannot take raises DomainError at `where`."""
    item = job_field(path)
    where = where or path
    check_value(item, value, where=where)
    section, _, name = path.partition(".")
    # The value has the field's kind now (check_value), which the type checker cannot follow by name.
    change: dict[str, Any] = {name: value}
    if section == "training":
        if name == "precision":
            change[name] = precision_preset(value)  # type: ignore[arg-type]
        return dataclasses.replace(job, training=dataclasses.replace(job.training, **change))
    if section == "parallelism":
        return dataclasses.replace(job, parallelism=dataclasses.replace(job.parallelism, **change))
    if section == "finetuning":
        tuned = dataclasses.replace(job.training.finetuning, **change)
        return dataclasses.replace(job, training=dataclasses.replace(job.training, finetuning=tuned))
    if section == "gpu":
        return dataclasses.replace(job, gpu=get_gpu(value))  # type: ignore[arg-type]
    # Another model: the notes on where the given one came from no longer hold.
    if name == "preset":
        return dataclasses.replace(job, architecture=get_preset(value).architecture, num_params=None, notes=())  # type: ignore[arg-type]
    if name == "num_params":
        return dataclasses.replace(job, architecture=None, num_params=value, notes=())  # type: ignore[arg-type]
    if job.architecture is None:
        raise DomainError(where, f"{path} needs an architecture (a preset, a config or its fields), not num_params")
    try:
        architecture = dataclasses.replace(job.architecture, **change)
    except DomainError as error:
        raise DomainError(where, error.message) from None
    return dataclasses.replace(job, architecture=architecture, notes=())


def field_value(job: Job, path: str) -> object:
    """The job's current value of a field (a precision is reported by its preset id, or None if it is custom)."""
    section, _, name = path.partition(".")
    if section == "training":
        if name == "precision":
            precision = job.training.precision
            return next((pid for pid, preset in PRECISION_PRESETS.items() if preset.precision == precision), None)
        return getattr(job.training, name)
    if section == "parallelism":
        return getattr(job.parallelism, name)
    if section == "finetuning":
        return getattr(job.training.finetuning, name)
    if section == "gpu":
        return job.gpu.id if job.gpu else None
    if name == "num_params":
        return job.num_params
    if name == "preset" or job.architecture is None:
        return None
    return getattr(job.architecture, name)
