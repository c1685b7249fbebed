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
from app.core import architecture as arch_limits
from app.core import finetuning as finetuning_limits
from app.core import gpus as core_gpus
from app.core import setup as limits
from app.core.allocator import ALLOCATORS
from app.core.finetuning import METHODS as FINETUNING_METHODS
from app.core.finetuning import QUANTIZATIONS
from app.core.job import JOB_FIELDS, Job
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

    preset: str | None = Field(default=None, description="A preset id from GET /api/v1/presets, e.g. 'llama-3-8b'.",
                               json_schema_extra={"enum": [*core.model_presets(), None]})
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
        "as hf_config is (a gated model needs the server's token). The server fetches only where its operator "
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


class TrainingIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"allOf": clauses(TRAINING_RULES)})

    micro_batch_size: int = Field(default=1, ge=1, le=limits.MAX_MICRO_BATCH, description="Sequences per micro-batch per GPU (b).")
    seq_len: int = Field(default=2048, ge=1, le=limits.MAX_SEQ_LEN, description="Tokens per sequence (s).")
    precision: PrecisionPresetName | PrecisionIn = Field(
        default="bf16-fp32-master",
        description="A precision preset id (see GET /api/v1/presets) or an explicit dtype per tensor class.",
    )
    optimizer: OptimizerName = Field(default="adamw", description="Optimizer whose state is counted.")
    optimizer_implementation: OptimizerImplementationName = Field(
        default="foreach",
        description="How optimizer.step() runs, which decides its scratch: foreach (torch's default on CUDA: a "
        "state-dtype copy of every parameter for Adam), fused (none), for-loop (two copies of the largest tensor).",
    )
    adafactor_momentum: bool = Field(default=False, description="Adafactor keeps a first moment (beta1) as well.")
    activation_checkpointing: CheckpointingName = Field(
        default="none", description="none; selective: recompute the attention core; full: keep only each layer's input "
        "(of every layer, or of those recompute_every or recompute_first_layers choose)."
    )
    recompute_every: int = Field(
        default=1, ge=1, le=arch_limits.MAX_LAYERS,
        description="With full recomputation, recompute every k-th layer of each stage (counted from 1: layer i when "
        "i % k == 0) and keep everything of the others, as torchtitan's selective_ac_option \"k\" does (its default "
        "is 2). 1: every layer.")
    recompute_first_layers: int | None = Field(
        default=None, ge=1, le=arch_limits.MAX_LAYERS,
        description="With full recomputation, recompute only the first N layers of each pipeline stage and keep "
        "everything of the rest, as Megatron-LM's --recompute-method block --recompute-num-layers N does. null: every "
        "layer. Not with recompute_every.")
    compile: Literal[tuple(core.COMPILE_CHOICES)] = Field(  # type: ignore[valid-type]
        default="none", description="torch.compile of each decoder layer: "
        + "; ".join(f"{item.id}: {item.about}" for item in core.COMPILE_CHOICES.values())
        + ". Measured for Llama, Mistral, Qwen2 and Gemma trained in full in one precision under sdpa or flash "
        "attention, without recomputation or with full recomputation of every layer, and refused elsewhere.")
    attention: AttentionName = Field(
        default="sdpa",
        description="eager stores the s × s score matrix; flash is a fused kernel that does not; sdpa is the kernel "
        "PyTorch's scaled_dot_product_attention picks on CUDA (flash for fp16/bf16 and head size ≤ 256, else "
        "memory-efficient unless K/V heads are grouped, else math). The answer's attention_kernel says which.",
    )
    implementation: ImplementationName = Field(
        default="transformers",
        description="Whose code runs the model: Hugging Face transformers modules, or Megatron-LM's fused kernels. "
        "liger is modelled for the Llama family's gated MLPs, megatron for dense models.",
    )
    loop: LoopName = Field(
        default="plain",
        description="plain: the loop keeps the model's output (and so the logits) until the next forward replaces "
        "it; hf-trainer: only the loss is kept, the logits are freed before backward.",
    )
    loss: Literal[tuple(limits.LOSSES)] = Field(  # type: ignore[valid-type]
        default="standard", description="standard: the model returns the logits and the loss upcasts them to fp32; "
        "chunked: the output layer and loss run loss_chunks chunks of tokens at a time (torchtune); fused-linear: "
        "Liger Kernel's fused linear cross entropy, which never materialises the logits.")
    loss_chunks: int = Field(default=8, ge=1, le=limits.MAX_LOSS_CHUNKS,
                             description="Chunks of tokens for the chunked loss (torchtune's num_output_chunks).")
    framework: Literal[tuple(limits.FRAMEWORKS)] = Field(  # type: ignore[valid-type]
        default="pytorch", description="Whose memory convention the model states and their buffers follow: "
        + "; ".join(f"{item.id}: {item.about}" for item in limits.FRAMEWORKS.values())
        + ". The fsdp2 convention (or torchtitan at ZeRO stage 3) is what float8 all-gather (torchao-fsdp-fp8) needs.")
    fp8: Literal[tuple(limits.FP8_RECIPES)] = Field(  # type: ignore[valid-type]
        default="none", description="FP8 training: "
        + "; ".join(f"{item.id}: {item.about}" for item in limits.FP8_RECIPES.values())
        + ". Not with fine-tuning or a mixture of experts; Transformer Engine's recipes need the token count on a GPU "
        "divisible by 8 and the linear layers' widths by 16 (8 for outputs), and standard attention.")
    gradient_accumulation_steps: int = Field(
        default=1, ge=1, le=limits.MAX_ACCUMULATION_STEPS,
        description="Micro-batches per optimizer step. From the second on, the gradients are alive through forward "
        "and backward; with pipeline parallelism it is also the number of micro-batches in flight (1F1B).",
    )
    framework_overhead_bytes: int = Field(
        default=limits.DEFAULT_FRAMEWORK_OVERHEAD_BYTES, ge=0, le=limits.MAX_OVERHEAD_BYTES,
        description="An extra per GPU outside what is modelled (e.g. communication buffers), in bytes (default 0; the "
        "CUDA context, the workspaces and the allocator's cache are counted).",
    )
    allocator: Literal[ALLOCATORS] = Field(  # type: ignore[valid-type]
        default="default", description="PyTorch's CUDA caching allocator: default (as shipped) or "
        "expandable-segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one segment per pool grown by pages, "
        "so freed blocks and new requests fragment less).",
    )


class ParallelismIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"allOf": clauses(PARALLELISM_RULES)})

    data: int = Field(default=1, ge=1, le=limits.MAX_DEGREE, description="Data-parallel degree.")
    tensor: int = Field(default=1, ge=1, le=limits.MAX_DEGREE, description="Tensor-parallel degree; it must divide "
                        "num_attention_heads and num_key_value_heads.")
    pipeline: int = Field(default=1, ge=1, le=limits.MAX_DEGREE, description="Pipeline-parallel degree (stages); it "
                          "must divide num_hidden_layers unless first_stage_layers or last_stage_layers are given.")
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism over the tensor-parallel group.")
    zero_stage: int = Field(default=0, ge=0, le=3, description="ZeRO stage: 1 shards optimizer state and master "
                            "weights, 2 adds gradients, 3 weights. At most 1 with the megatron convention or a "
                            "Transformer Engine fp8 recipe.")
    offload: Literal[tuple(limits.OFFLOADS)] = Field(  # type: ignore[valid-type]
        default="none", description="none; optimizer: optimizer state, master copy and an fp32 gradient partition in "
        "host memory, the update on the CPU (ZeRO-Offload; needs ZeRO 1-3); optimizer+parameters: the parameter "
        "partitions too (ZeRO-Infinity, FSDP CPU offload; needs ZeRO-3).")
    gpus_per_node: int = Field(default=8, ge=1, le=limits.MAX_GPUS_PER_NODE,
                               description="GPUs sharing one host, for host memory per node.")
    context: int = Field(default=1, ge=1, le=limits.MAX_DEGREE,
                         description="Context parallelism: each sequence split over this many GPUs (ring attention); "
                         "activations shrink with it, ZeRO shards over data × context. 2 × context must divide "
                         "training.seq_len; gpt-oss (attention with sinks) needs training.attention flash.")
    expert: int = Field(default=1, ge=1, le=limits.MAX_DEGREE,
                        description="Expert parallelism: a mixture of experts' routed experts split over this many "
                        "GPUs (it divides the experts; with expert_tensor unset it divides data × context, in "
                        "general expert_tensor × expert divides tensor × data × context); each expert's ZeRO shards "
                        "spread over the rest of the stage's GPUs.")
    expert_load: float = Field(default=1.0, ge=1, le=limits.MAX_DEGREE,
                               description="Token copies the most-loaded expert-parallel GPU's experts take, as a "
                               "multiple of balanced routing (1): a capacity factor bounds it (Megatron-LM's "
                               "--moe-expert-capacity-factor, DeepSpeed-MoE's capacity_factor; exactly that with "
                               "padding), a dropless run's imbalance raises it. At most expert × min(k, experts ÷ "
                               "expert) ÷ k; 1 without expert parallelism and for a dense model.")
    expert_tensor: int | None = Field(default=None, ge=1, le=limits.MAX_DEGREE,
                                      description="Expert tensor parallelism (Megatron-LM's --expert-tensor-parallel-"
                                      "size): each routed expert's matrices split over this many GPUs instead of the "
                                      "tensor-parallel degree; absent or null: the tensor-parallel degree. expert_tensor "
                                      "× expert must divide tensor × data × context; with fewer expert-tensor than "
                                      "tensor-parallel GPUs the tensor-parallel ranks share the routed tokens out. A dense model takes only the "
                                      "tensor-parallel degree.")
    reduce_bucket_size: int = Field(default=limits.DEEPSPEED_REDUCE_BUCKET_SIZE, ge=1, le=limits.MAX_REDUCE_BUCKET_SIZE,
                                    description="DeepSpeed's zero_optimization.reduce_bucket_size, in elements (its "
                                    "default 500,000,000): the contiguous gradient bucket it reduces from, counted "
                                    "in the gradients' dtype under training.framework deepspeed.")
    virtual_stages: int = Field(default=1, ge=1, le=limits.MAX_DEGREE,
                                description="Interleaved pipeline schedule (Megatron's virtual stages): model chunks "
                                "per device; the first device then holds (p - 1) chunks of activations more. Needs "
                                "pipeline ≥ 2, pipeline × virtual_stages dividing num_hidden_layers, and "
                                "gradient_accumulation_steps a multiple of pipeline.")
    first_stage_layers: int | None = Field(default=None, ge=1, le=arch_limits.MAX_LAYERS,
                                           description="Uneven pipeline stages: decoder layers on the first stage "
                                           "(Megatron-LM's --decoder-first-pipeline-num-layers); the layers left "
                                           "split evenly over the other stages, at least one each (with two stages, first and last add up to "
                                           "num_hidden_layers). Absent or null: an even split.")
    last_stage_layers: int | None = Field(default=None, ge=1, le=arch_limits.MAX_LAYERS,
                                          description="Uneven pipeline stages: decoder layers on the last stage "
                                          "(--decoder-last-pipeline-num-layers). Absent or null: an even split.")


class FinetuningIn(BaseModel):
    """What trains: everything (full, optionally freezing the embeddings or the first layers), or LoRA/QLoRA adapters
    beside a frozen base, counted as peft counts them."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"allOf": clauses(FINETUNING_RULES),
                                                 "examples": [{"method": "qlora", "rank": 16,
                                                               "target_modules": ["all-linear"]}]})

    method: Literal[FINETUNING_METHODS] = Field(  # type: ignore[valid-type]
        default="full", description="full: every parameter trains; lora: rank-r adapters beside the frozen base "
        "(peft); qlora: the same beside a base quantized by bitsandbytes. Anything but the default fine-tuning needs "
        "an architecture (not num_params), the transformers or liger implementation, no fp8, and outside the fsdp2 "
        "convention; adapters need a precision without autocast. Of mixtures of experts, which parts may be frozen "
        "or adapted depends on the family.")
    rank: int = Field(default=16, ge=1, le=finetuning_limits.MAX_RANK, description="LoRA rank r.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"], min_length=1, max_length=64,
        description="Module names as the model family spells them (q_proj, v_proj, ... for Llama-style models; "
        "c_attn, c_proj, c_fc for GPT-2), or ['all-linear'] for every linear layer but the output layer, as peft "
        "means it.")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="LoRA dropout (lora_dropout); above 0 each adapter "
                           "keeps its own dropped copy of its input.")
    modules_to_save: list[Literal["embed_tokens", "lm_head"]] = Field(
        default_factory=list, max_length=2, description="Modules trained in full beside the adapters (peft keeps a "
        "trainable copy beside the frozen original).")
    quantization: Literal[QUANTIZATIONS] = Field(  # type: ignore[valid-type]
        default="nf4-double", description="QLoRA's base storage: nf4 (4 bits + an fp32 scale per 64), nf4-double "
        "(scales quantized again: ~4.127 bits), int8 (LLM.int8(): a byte and a scale per row).")
    freeze_embeddings: bool = Field(default=False, description="Full fine-tuning: keep the embeddings frozen.")
    frozen_layers: int = Field(default=0, ge=0, le=arch_limits.MAX_LAYERS,
                               description="Full fine-tuning: keep the first k decoder layers frozen; fewer than "
                               "num_hidden_layers, and with pipeline stages at most the first stage's layers.")
    bitsandbytes_version: str | None = Field(
        default=None, min_length=1, max_length=finetuning_limits.MAX_VERSION_CHARS, examples=["0.41.1"],
        description="QLoRA: the bitsandbytes version the run uses, as pip shows it. Before 0.43.2 the 4-bit matmul "
        "keeps each 4-bit layer's input until the backward ends (fixed in bitsandbytes commit 9e75374), which "
        "recomputation does not drop. Absent or null: 0.43.2 or later.")


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
        "true/false for switches, each within the field's own range and choices. Each value is checked with the rest "
        "of the body as an estimate would check it.",
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
