"""The shapes of JSON API v1's answers: an estimate's breakdown, peak, timeline, buffers and fit, and the catalogues.
Field names here are a promise: change them only in a new version. Memory is bytes, as integers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

Bytes = Annotated[int, Field(description="Bytes.")]
MaybeBytes = Annotated[int | None, Field(description="Bytes; activations are null when the architecture is unknown.")]


class BreakdownOut(BaseModel):
    weights: Bytes
    gradients: Bytes
    master_weights: Bytes
    optimizer_states: Bytes
    activations: MaybeBytes
    temporary: MaybeBytes
    total: Bytes = Field(description="Bytes: the sum of the categories above.")


class PeakOut(BaseModel):
    bytes: int = Field(description="The most memory alive at once on the most-loaded GPU, in bytes.")
    event: str = Field(description="The event of the step where it happens, e.g. 'backward: loss gradients'.")
    step: int = Field(description="1: the first step (no optimizer state before its optimizer.step); 2: every later step.")
    breakdown: dict[str, int] = Field(description="Bytes alive at the peak, by category.")
    reserved_bytes: int | None = Field(
        description="The caching allocator's reserved memory at its worst moment of the two steps "
        "(torch.cuda.max_memory_reserved()): the tensors, their rounding and the freed blocks it keeps cached. With a "
        "GPU, near its capacity, the cache as released before the allocator gives up. For a bare parameter count (no "
        "tensor shapes to replay), the allocated peak. null for a sweep point not replayed: worked out from the fitted "
        "polynomial, or, in a sweep of more than 24 values of another field, judged by the replays of the values "
        "around where the fit changes (its fits still follows the reserve).")


class TimelinePointOut(BaseModel):
    event: str = Field(description="What happens: 'forward: layer 1', 'backward: loss gradients', 'optimizer.step'...")
    step: int = Field(description="1 or 2 (2 stands for every later step).")
    bytes: int = Field(description="Bytes alive at this event (the most during it), on the most-loaded GPU.")
    breakdown: dict[str, int] = Field(description="The same bytes by category.")
    reserved_bytes: int | None = Field(description="The allocator's reserved memory, the most during this event; "
                                       "null for a bare parameter count.")


class BufferOut(BaseModel):
    category: str = Field(description="The per_gpu category it counts in.")
    label: str = Field(description="What the buffer is, in words.")
    formula: str = Field(description="Its bytes as a formula with this request's numbers.")
    bytes: int = Field(description="Bytes on the most-loaded GPU.")
    cluster_bytes: int = Field(description="Bytes summed over every GPU that holds it.")
    allocated: str = Field(description="The event at which it is allocated.")
    freed: str = Field(description="The event after which it is freed.")


class CommunicatorOut(BaseModel):
    group: Literal["tensor", "pipeline", "context", "data", "expert", "expert-data"] = Field(
        description="The process group: its parallelism (data: the gradient reduction over data × context; "
                    "expert-data: over the GPUs holding the same experts).")
    ranks: int = Field(description="GPUs in the group.")
    pattern: Literal["collective", "point-to-point"] = Field(
        description="collective: a ring over every channel (and NVLink SHARP's buffers on NVSwitch); "
                    "point-to-point: a connection per peer and channel.")
    bytes: int = Field(description="Its buffers on this GPU, in bytes.")
    formula: str = Field(description="How the bytes add up.")


class GpuFitOut(BaseModel):
    id: str = Field(description="GPU id from GET /api/v1/gpus.")
    name: str = Field(description="Marketing name.")
    capacity: int = Field(description="Usable memory in bytes, as the driver reports it.")
    fits: bool = Field(description="Whether the step runs without CUDA out of memory: the allocator's reserved peak "
                       "plus what lives outside it fits in capacity, and a replay of the step within capacity (the "
                       "allocator releasing its cache before it gives up) never fails.")
    headroom: int = Field(description="capacity - (reserved_bytes + outside_allocator_bytes), in bytes; negative when "
                          "it does not fit.")
    reserved_bytes: int = Field(description="The allocator's reserved peak on this GPU, the libraries' workspaces "
                                "included.")
    outside_allocator_bytes: int = Field(description="Memory outside PyTorch's allocator: the CUDA context and "
                                         "modules (the GPU catalogue's context_bytes), communicator_bytes and "
                                         "training.framework_overhead_bytes.")
    communicator_bytes: int = Field(description="NCCL's buffers for the process groups this setup creates, summed "
                                    "over communicators; derived from NCCL 2.30's defaults and the GPU's interconnect, "
                                    "not measured.")
    communicators: list[CommunicatorOut] = Field(description="Each process group's NCCL buffers on this GPU.")


class HostOut(BaseModel):
    per_gpu: BreakdownOut = Field(description="Host memory each GPU's offloaded states take, by category, in bytes.")
    gpus_per_node: int = Field(description="GPUs counted on one host (gpus_per_node, at most the job's GPUs).")
    per_node_bytes: int = Field(description="Host memory one node needs for them, in bytes.")
    ledger: list[BufferOut] = Field(description="The buffers in host memory.")


class TermOut(BaseModel):
    category: str = Field(description="The per_gpu category this line explains.")
    label: str = Field(description="What the bytes are, in words.")
    formula: str = Field(description="The formula with this request's numbers in it.")
    bytes: int = Field(description="Bytes per GPU.")


class SavedTensorOut(BaseModel):
    name: str = Field(description="Which tensor a layer keeps for the backward pass (e.g. attn.query, mlp.gate).")
    bytes: int = Field(description="Bytes per micro-batch on the most-loaded rank.")


class EstimateResponse(BaseModel):
    param_count: int = Field(description="Exact number of parameters, adapters and saved copies included (as peft "
                             "counts 'all params').")
    trainable_param_count: int = Field(description="Parameters that train (equal to param_count for full training).")
    active_param_count: int = Field(description="Parameters one token uses: all but the experts it is not routed to "
                                    "(equal to param_count for a dense model).")
    per_gpu: BreakdownOut = Field(
        description="Bytes on the most-loaded GPU, every buffer of the ledger summed by category (an upper bound: "
        "not everything is alive at once; see peak)."
    )
    cluster: BreakdownOut = Field(description="Bytes summed over every GPU.")
    gpu: GpuFitOut | None = Field(description="Fit check against the requested GPU; null when none was given.")
    warnings: list[str] = Field(description="Assumptions that bite for this request, in words.")
    bytes_per_param: dict[str, float] = Field(description="Unsharded bytes per parameter for each model-state category.")
    pipeline_stage: int = Field(description="Index of the most-loaded pipeline stage (the per_gpu figures).")
    explanation: list[TermOut] = Field(description="Per-GPU figures, line by line, with their formulas (the ledger's buffers).")
    peak: PeakOut = Field(description="The most alive at once through two training steps; gpu.fits follows it.")
    timeline: list[TimelinePointOut] = Field(description="Live memory at each event of two training steps.")
    ledger: list[BufferOut] = Field(description="Every buffer on the most-loaded GPU, with when it lives.")
    attention_kernel: str | None = Field(
        description="The attention kernel assumed (eager, flash, memory-efficient or math); null without an architecture."
    )
    host: HostOut | None = Field(description="Host memory for offloaded states or activations; null without offloading.")
    layer_activations: list[SavedTensorOut] = Field(
        description="The tensors one decoder layer keeps for backward under the chosen recomputation, for one "
        "micro-batch; empty when the architecture is unknown."
    )


class ModelPresetOut(BaseModel):
    id: str = Field(description="Preset id to use as model.preset.")
    name: str = Field(description="Model name.")
    param_count: int = Field(description="Exact number of parameters.")
    architecture: dict[str, Any] = Field(description="Architecture fields (Hugging Face config names; sizes in elements).")
    architecture_source: str = Field(description="Where the architecture numbers come from.")
    param_count_source: str = Field(description="Where the published parameter total comes from.")
    hub_id: str | None = Field(default=None, description="The Hugging Face Hub id of the model whose config.json the "
                               "architecture is; accepted as model.preset, and as model.hub without fetching.")


class PrecisionPresetOut(BaseModel):
    id: str = Field(description="Preset id to use as training.precision.")
    name: str = Field(description="Short name.")
    description: str = Field(description="What convention it stands for.")
    dtypes: dict[str, str | None] = Field(description="Dtype per tensor class.")


class PresetsResponse(BaseModel):
    models: list[ModelPresetOut] = Field(description="Model presets.")
    precisions: list[PrecisionPresetOut] = Field(description="Precision presets.")
    model_types: list[str] = Field(description="The model types a config.json (model.hf_config) may have, each "
                                   "modelled from its own modules and measured (docs/VALIDATION.md): decoders, and "
                                   "the encoders bert and roberta as sequence classifiers (their "
                                   "...ForSequenceClassification head); another decoder-only type is estimated as a "
                                   "Llama-style decoder, with a warning.")


class GpuOut(BaseModel):
    id: str = Field(description="GPU id to use as gpu.")
    name: str = Field(description="Marketing name.")
    capacity: int = Field(description="Usable memory in bytes, as the driver reports it.")
    source: str = Field(description="Where the capacity figure comes from.")
    context_bytes: int = Field(description="Memory in use before the first tensor (the CUDA context and the kernels' "
                               "modules), outside PyTorch's allocator.")
    workspace_bytes: int = Field(description="The libraries' workspaces (cuBLAS), allocated through the allocator "
                                 "at the first matrix product and kept.")
    context_source: str = Field(description="Where the context and workspace figures come from.")
    interconnect: Literal["nvswitch-hopper", "nvswitch-blackwell", "nvlink", "pcie"] = Field(
        description="How a node's GPUs reach each other; it sets NCCL's channel counts, hence communicator_bytes.")
