"""Request and response shapes of JSON API v1. Field names here are a promise: change them only in a new version.

The schema checks shapes and ranges, and states the cross-field rules JSON Schema can (if/then clauses); the core
decides every rule (heads divisible by the tensor degree, layers by the pipeline degree), raised as DomainError and
answered as 422 too, and the fields' descriptions name the rules the schema cannot state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictInt, Tag, model_validator

from app import core, wire
from app import hub as hf_hub
from app.api.answers import (
    BreakdownOut,
    EstimateResponse,
    GpuOut,
    ModelPresetOut,
    PeakOut,
    PrecisionPresetOut,
    PresetsResponse,
)
from app.api.contract import (
    _MODEL_FIELDS,
    _NUM_PARAMS,
    ARCHITECTURE_FIELDS,
    FINETUNING_RULES,
    PARALLELISM_RULES,
    REQUEST_RULES,
    TRAINING_RULES,
    Clauses,
    _at,
    _model_rules,
    clauses,
    request_rules,
)
from app.api.declared import Section, declared_model
from app.core import architecture as arch_limits
from app.core import finetuning as finetuning_limits
from app.core import gpus as core_gpus
from app.core import setup as limits
from app.core.finetuning import BNB_VERSION_HELP, Finetuning
from app.core.job import JOB_FIELDS, Job
from app.core.lora_targets import MAX_PATTERN_CHARS
from app.core.series import MAX_VALUES
from app.core.solver import COST_ORDER, TARGETS
from app.core.units import DTYPE_BITS

# Allowed values come from the core's registries (tests/api/test_registries.py checks they stay in step).
# Literals built at run time, which pydantic validates against; to the type checker they are strings.
if TYPE_CHECKING:
    DtypeName: TypeAlias = str
    OptimizerName: TypeAlias = str
    OptimizerImplementationName: TypeAlias = str
    PrecisionPresetName: TypeAlias = str
    CheckpointingName: TypeAlias = str
    AttentionName: TypeAlias = str
    ImplementationName: TypeAlias = str
    LoopName: TypeAlias = str
else:
    DtypeName = Literal[tuple(DTYPE_BITS)]
    OptimizerName = Literal[core.OPTIMIZERS]
    OptimizerImplementationName = Literal[tuple(core.OPTIMIZER_IMPLEMENTATIONS)]
    PrecisionPresetName = Literal[tuple(core.PRECISION_PRESETS)]
    CheckpointingName = Literal[tuple(core.CHECKPOINTING_CHOICES)]
    AttentionName = Literal[tuple(core.ATTENTION_CHOICES)]
    ImplementationName = Literal[tuple(core.IMPLEMENTATION_CHOICES)]
    LoopName = Literal[tuple(core.LOOPS)]

def _count(description: str, high: int, low: int = 1) -> Any:
    return Field(default=None, ge=low, le=high, description=description)



class ModelIn(BaseModel):
    """The model: a preset id (optionally with architecture fields overriding it), a parameter count,
    the architecture fields alone, a Hugging Face config.json, or a Hub id whose config.json is fetched."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"preset": "llama-3-8b"}], "allOf": _model_rules()})

    preset: str | None = Field(default=None, description="A preset id from GET /api/v1/presets, e.g. 'llama-3-8b', or "
                               "the Hugging Face Hub id of a preset's model, e.g. 'meta-llama/Llama-3.1-8B'.",
                               json_schema_extra={"enum": [*core.model_presets(), *core.preset_aliases(), None]})
    num_params: int | None = Field(
        default=None, ge=1, le=limits.MAX_PARAM_COUNT,
        description="Parameter count only (model states are computed; activations and temporary are null).",
    )
    hf_config: dict[str, Any] | str | None = Field(
        default=None,
        description="The contents of a Hugging Face config.json (an object, or its text). Supported model_type: "
        + ", ".join(core.SUPPORTED_MODEL_TYPES) + ".",
    )
    hub: str | None = Field(
        default=None, min_length=1, max_length=hf_hub.MAX_ID_CHARS, pattern=hf_hub.ID_PATTERN,
        description="A Hugging Face Hub model id, e.g. 'Qwen/Qwen2.5-7B-Instruct': its config.json is fetched and read "
        "as hf_config is (a gated model needs the server's token). The Hub id of a preset (GET /api/v1/presets, "
        "hub_id) is answered from its stored config.json, with no revision and nothing fetched. Otherwise the "
        "server fetches only where its operator "
        f"allows it ({hf_hub.SETTING}=1), within {hf_hub.SERVER_TIMEOUT_S:g} s; otherwise a 422 whose type says why "
        "(hub_disabled, hub_not_found, hub_gated, hub_token_refused, hub_offline, hub_unreachable, hub_timeout, "
        "hub_too_large, hub_not_a_model, hub_invalid_id).",
        json_schema_extra={"examples": ["Qwen/Qwen2.5-7B-Instruct"]})
    revision: str | None = Field(
        default=None, min_length=1, max_length=hf_hub.MAX_REVISION_CHARS, pattern=hf_hub.REVISION_PATTERN,
        description="With hub: a branch, tag or commit of the repository; absent or null: main.")
    num_hidden_layers: int | None = _count("Number of decoder layers (L).", arch_limits.MAX_LAYERS)
    hidden_size: int | None = _count("Hidden size h, in elements.", arch_limits.MAX_HIDDEN_SIZE)
    num_attention_heads: int | None = _count("Query heads a.", arch_limits.MAX_HEADS)
    num_key_value_heads: int | None = _count("Key/value heads g (grouped-query attention); defaults to a. It must "
                                             "divide num_attention_heads.", arch_limits.MAX_HEADS)
    head_dim: int | None = _count("Head size d, in elements; defaults to h / a, which then must be whole.",
                                  arch_limits.MAX_HIDDEN_SIZE)
    intermediate_size: int | None = _count("MLP inner size I, in elements; defaults to 4h.", 64 * arch_limits.MAX_HIDDEN_SIZE)
    vocab_size: int | None = _count("Vocabulary size V.", arch_limits.MAX_VOCAB_SIZE)
    max_position_embeddings: int | None = _count("Longest sequence the model supports, in tokens.", arch_limits.MAX_POSITIONS)
    tie_word_embeddings: bool | None = Field(default=None, description="Output layer shares the embedding matrix.")
    attention_bias: bool | None = Field(default=None, description="Biases on the query, key, value and output projections.")
    qkv_bias: bool | None = Field(default=None, description="Biases on query, key and value only (Qwen2); overrides attention_bias there.")
    mlp_bias: bool | None = Field(default=None, description="Biases on the MLP matrices.")
    mlp: Literal["gelu", "relu", "swiglu", "geglu"] | None = Field(
        default=None, description="gelu/relu: two matrices; swiglu/geglu: three (gate, up, down)."
    )
    norm: Literal["layernorm", "rmsnorm"] | None = Field(default=None, description="LayerNorm (weight and bias) or RMSNorm (weight).")
    norms_per_layer: int | None = Field(default=None, ge=0, le=16, description="Norms in each layer (2 for most models, 4 for Gemma 2).")
    position_embedding: Literal["learned", "rope"] | None = Field(
        default=None, description="learned: a max_position_embeddings × h table; rope: no parameters."
    )
    dropout: float | None = Field(default=None, ge=0, lt=1, description="Residual/embedding dropout probability; masks are stored when > 0.")
    attention_dropout: float | None = Field(default=None, ge=0, lt=1, description="Dropout on attention probabilities; defaults to dropout.")
    num_local_experts: int | None = _count("Experts per mixture-of-experts layer (E); 0 or absent for a dense MLP.",
                                           arch_limits.MAX_EXPERTS, low=0)
    num_experts_per_tok: int | None = _count("Experts each token is routed to (k), at most num_local_experts.",
                                             arch_limits.MAX_EXPERTS)
    moe_intermediate_size: int | None = _count("Each expert's MLP width; defaults to intermediate_size.",
                                               64 * arch_limits.MAX_HIDDEN_SIZE)
    norm_topk_prob: bool | None = Field(default=None, description="The k routing weights renormalised to sum to 1 "
                                        "(Mixtral: always; Qwen3-MoE: its config's norm_topk_prob).")
    qk_norm: bool | None = Field(default=None, description="An RMSNorm over each head of the query and key (Qwen3).")

    def architecture_overrides(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ARCHITECTURE_FIELDS if getattr(self, name) is not None}

    def _alone(self, overrides: dict[str, Any]) -> None:
        """The sources that describe the whole model take no architecture fields beside them."""
        for source in ("num_params", "hf_config", "hub"):
            if getattr(self, source) is not None and overrides:
                raise ValueError(f"{source} cannot be combined with architecture fields")

    @model_validator(mode="after")
    def _one_source(self) -> ModelIn:
        sources = [name for name in wire.MODEL_SOURCES if getattr(self, name) is not None]
        if len(sources) > 1:
            raise ValueError(f"give only one of preset, num_params, hf_config and hub (got {', '.join(sources)})")
        overrides = self.architecture_overrides()
        self._alone(overrides)
        if not sources and not overrides:
            raise ValueError("give a preset, num_params, hf_config, hub or the architecture fields")
        if self.revision is not None and self.hub is None:
            raise ValueError("revision is a revision of a Hub model: give it with hub")
        return self


class PrecisionIn(BaseModel):
    """An explicit dtype per tensor class."""

    model_config = ConfigDict(extra="forbid", strict=True)

    weights: DtypeName = Field(description="Dtype of the weights the forward pass uses.")
    gradients: DtypeName = Field(description="Dtype of the gradients.")
    master_weights: DtypeName | None = Field(default=None, description="Dtype of the optimizer's master copy, or null for none.")
    optimizer_states: DtypeName = Field(description="Dtype of the optimizer's moments (8-bit AdamW ignores it).")
    activations: DtypeName = Field(description="Dtype of activations.")


# The run's sections: a field for each of the core's declared inputs (app/core/inputs.py), and the fields of other
# shapes given here. For the type checker they are plain models; pydantic builds them at import.
if TYPE_CHECKING:
    TrainingIn: TypeAlias = Section
    ParallelismIn: TypeAlias = Section
    FinetuningIn: TypeAlias = Section
else:
    TrainingIn = declared_model(
        "TrainingIn", core.Training,
        ConfigDict(extra="forbid", strict=True, json_schema_extra={"allOf": clauses(TRAINING_RULES)}),
        leave_out=("finetuning",),
        given={"precision": (PrecisionPresetName | PrecisionIn, Field(
            default="bf16-fp32-master",
            description="A precision preset id (see GET /api/v1/presets) or an explicit dtype per tensor class."))})
    ParallelismIn = declared_model(
        "ParallelismIn", core.Parallelism,
        ConfigDict(extra="forbid", strict=True, json_schema_extra={"allOf": clauses(PARALLELISM_RULES)}), given={})
    FinetuningIn = declared_model(
        "FinetuningIn", Finetuning,
        ConfigDict(extra="forbid", strict=True, json_schema_extra={
            "allOf": clauses(FINETUNING_RULES),
            "examples": [{"method": "qlora", "rank": 16, "target_modules": ["all-linear"]}]}),
        doc="What trains: everything (full, optionally freezing the embeddings or the first layers), or LoRA/QLoRA "
        "adapters beside a frozen base, counted as peft counts them.",
        given={
            "target_modules": (Annotated[list[str], Field(min_length=1, max_length=64)]
                               | Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)],
                               Field(
                default_factory=lambda: ["q_proj", "v_proj"],
                description="Module names as the model family spells them (q_proj, v_proj, ... for Llama-style "
                "models; c_attn, c_proj, c_fc for GPT-2), or ['all-linear'] for every linear layer but the output "
                "layer, as peft means it. A string is taken as peft 0.21 takes it: 'all-linear', or a regular "
                "expression full-matched against each module's qualified name in the model's module tree "
                "(named_modules(), e.g. a layer's self_attn.q_proj under its index), which must select the same "
                "linear modules in every layer (dense decoders only; no back-references or repeated groups holding "
                "repeats or alternatives).",
                examples=[["q_proj", "v_proj"], "all-linear", r".*\.(q_proj|v_proj)"])),
            "modules_to_save": (list[Literal["embed_tokens", "lm_head"]], Field(
                default_factory=list, max_length=2, description="Modules trained in full beside the adapters (peft "
                "keeps a trainable copy beside the frozen original).")),
            "bitsandbytes_version": (str | None, Field(
                default=None, min_length=1, max_length=finetuning_limits.MAX_VERSION_CHARS, examples=["0.41.1"],
                description=f"{BNB_VERSION_HELP} Absent or null: 0.43.2 or later.")),
        })


class CustomGpuIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"capacity_bytes": 25_757_220_864, "name": "My 24 GB card", "like": "rtx-4090-24gb"}]})

    capacity_bytes: int = Field(ge=core_gpus.MIN_CUSTOM_BYTES, le=core_gpus.MAX_CUSTOM_BYTES,
                                description="The GPU's memory as the driver reports it (nvidia-smi's total in MiB "
                                            "× 1,048,576), in bytes.")
    name: str | None = Field(default=None, min_length=1, max_length=core_gpus.MAX_NAME_CHARS,
                             description="What to call it in the answer.")
    like: str | None = Field(default=None, description="A GPU id from GET /api/v1/gpus whose CUDA context, "
                             "library workspace and interconnect it takes (default: the H100 80GB's).",
                             json_schema_extra={"enum": [*core.gpu_catalogue(), None]})


GpuId: TypeAlias = Annotated[str, Field(json_schema_extra={"enum": [*core.gpu_catalogue(), ""]})]
# An object is a custom GPU, anything else an id: errors then name the one the body meant.
GpuIn: TypeAlias = Annotated[Annotated[GpuId, Tag("id")] | Annotated[CustomGpuIn, Tag("custom")],
                             Discriminator(lambda value: "custom" if isinstance(value, dict | CustomGpuIn) else "id")]


class EstimateRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "allOf": request_rules(),
            "examples": [
                {"model": {"preset": "llama-3-8b"}, "training": {"micro_batch_size": 1, "seq_len": 4096, "optimizer": "adamw"},
                 "gpu": "h100-80gb"}
            ]
        },
    )

    model: ModelIn = Field(description="The model: a preset, a parameter count, a config.json or the architecture.")
    training: TrainingIn = Field(default_factory=TrainingIn, description="The run: batch shape, precision, "
                                 "optimizer, recomputation, attention, loop.")
    parallelism: ParallelismIn = Field(default_factory=ParallelismIn, description="How the job is split over GPUs.")
    finetuning: FinetuningIn = Field(default_factory=FinetuningIn, description="What trains: full, LoRA or QLoRA.")
    gpu: GpuIn | None = Field(default=None, description="A GPU id from GET /api/v1/gpus, or a GPU "
                                            "the catalogue lacks by its capacity, for the fit check; null or empty "
                                            "for none.")




# --- solver and sweeps --------------------------------------------------------------------------------

# The solver fits into a GPU, and all but the data-parallel degree need an architecture.
_SOLVE_RULES: Final[Clauses] = [
    {"properties": {"gpu": {"anyOf": [{"enum": list(core.gpu_catalogue())}, {"type": "object"}]}},
     "required": ["gpu"]},
    {"if": _at("target", {"enum": [target for target in TARGETS if target != "data"]}),
     "then": _at("model.num_params", {"type": "null"}, present=False)},
]
# Varying an architecture field needs an architecture to vary.
_SWEEP_RULES: Final[Clauses] = [
    {"if": _NUM_PARAMS, "then": _at("vary.field", {"not": {"enum": [
        path for path in JOB_FIELDS if path.startswith("model.") and path not in _MODEL_FIELDS]}})},
]


class SolveRequest(EstimateRequest):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"allOf": [*request_rules(), *_SOLVE_RULES],
                           "examples": [{"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096},
                                         "parallelism": {"data": 8, "zero_stage": 2}, "gpu": "a100-80gb",
                                         "target": "micro_batch_size"}]},
    )

    target: Literal[tuple(TARGETS)] = Field(  # type: ignore[valid-type]
        description="micro_batch_size: the largest that fits; seq_len: the longest; data: the fewest data-parallel "
        "GPUs (for the chosen ZeRO stage). Everything else stays as given.",
    )


class VaryIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    field: Literal[tuple(JOB_FIELDS)] = Field(  # type: ignore[valid-type]
        description="The field to vary, as a path into the request, e.g. 'training.seq_len' or 'parallelism.zero_stage'.",
    )
    values: list[StrictInt | StrictBool | str] = Field(
        min_length=1, max_length=MAX_VALUES,
        description=f"The values to try, at most {MAX_VALUES:,}: integers for integer fields, ids for choices, "
        "true/false for switches, release strings (e.g. \"0.43.2\") for versions, each within the field's own range "
        "and choices. Each value is checked with the rest of the body as an estimate would check it.",
    )


class SweepRequest(EstimateRequest):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"allOf": [*request_rules(varied=True), *_SWEEP_RULES],
                           "examples": [{"model": {"preset": "llama-3-8b"}, "gpu": "h100-80gb",
                                         "vary": {"field": "training.seq_len", "values": [1024, 2048, 4096, 8192]}}]},
    )

    vary: VaryIn = Field(description="One field and the values to try; everything else stays as given.")


class CostOut(BaseModel):
    kind: Literal[COST_ORDER] = Field(  # type: ignore[valid-type]
        description="What the fix costs besides memory, cheapest kind first: none, throughput, compute, "
        "communication, host (host memory and PCIe traffic each step: offloading), hardware, numerics.")
    text: str = Field(description="The cost in words, with its source.")
    extra_compute: float | None = Field(description="Extra FLOPs per step as a fraction of the step's (recomputation).")
    extra_communication: float | None = Field(description="Extra data-parallel traffic as a fraction (ZeRO).")
    extra_gpus: int | None = Field(description="GPUs added to the job.")


class FixOut(BaseModel):
    change: dict[str, Any] = Field(description="The fields to change (request paths) and their new values.")
    summary: str = Field(description="The change in words.")
    peak: PeakOut = Field(description="The peak after the change.")
    headroom: int | None = Field(description="Capacity minus that peak, in bytes.")
    cost: CostOut = Field(description="What the change costs besides memory.")


class SolveResponse(BaseModel):
    target: str = Field(description="The field solved for.")
    value: int | None = Field(description="The answer; null when no value fits (note says why).")
    note: str | None = Field(description="Why there is no answer, or what to know about it.")
    estimate: EstimateResponse = Field(description="The estimate at the answer (at the request as given when null).")
    fixes: list[FixOut] = Field(description="For a request that does not fit: single changes that make it fit, "
                                "cheapest first. Empty when it fits.")


class SweepPointOut(BaseModel):
    value: int | bool | str = Field(description="The field's value at this point.")
    peak: PeakOut = Field(description="The peak, as POST /api/v1/estimate answers for this value.")
    per_gpu: BreakdownOut = Field(description="The per-GPU sum by category, as /estimate answers for this value.")
    fits: bool | None = Field(description="Whether the peak fits the GPU; null without a GPU.")


class SweepResponse(BaseModel):
    field: str = Field(description="The field varied.")
    points: list[SweepPointOut] = Field(description="One point per value, in the order given.")


# --- conversion to the core ---------------------------------------------------------------------------


def to_job(request: EstimateRequest) -> Job:
    """The core's job for a validated request; raises core.DomainError for what the core rejects. A model by Hub id
    is fetched here, as the server may (hub.server_fetch): blocking, so called from a worker thread only."""
    return wire.job_from(request.model_dump(include={"model", "training", "parallelism", "finetuning", "gpu"}),
                         fetch=hf_hub.server_fetch)


def to_parallelism(parallelism: ParallelismIn) -> core.Parallelism:
    return wire.parallelism_from(parallelism.model_dump())


def run_estimate(request: EstimateRequest) -> core.Estimate:
    return to_job(request).estimate()


def estimate_response(result: core.Estimate) -> EstimateResponse:
    return EstimateResponse.model_validate(wire.estimate_json(result))


# Defined in app/api/answers.py and app/api/contract.py; the routes, the page and the tests read them from here.
__all__ = ["GpuOut", "ModelPresetOut", "PrecisionPresetOut", "PresetsResponse", "REQUEST_RULES"]
