"""The whole estimate: the ledger of the most-loaded GPU, its timeline through two steps, and the peak.

Per-GPU figures are those of the most-loaded GPU: the stage kind whose peak is highest, tensor and
data-parallel rank 0. `per_gpu` is the sum of every buffer of its ledger by category (an upper bound:
not everything is alive at once); `peak` is the most that is alive at once, and the fit check
follows the peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final, NamedTuple

from app.core import activations as act
from app.core import reserve, states
from app.core.architecture import Architecture, active_param_count, param_count
from app.core.categories import CATEGORIES, MODEL_STATE_CATEGORIES, Breakdown
from app.core.communicators import Communicator, communicators
from app.core.errors import DomainError
from app.core.families import stand_in_warnings
from app.core.gpus import Gpu, GpuFit, fit
from app.core.ledger import (
    ACTS,
    DS_ZERO2,
    FORWARDED,
    GRADS,
    GRADS_DONE,
    Buffer,
    finetunes,
    fp8_layer_saved,
    moe_backward_modelled,
    stage_ledger,
    stage_plan,
)
from app.core.optimizers import FP32_BITS, OPTIMIZER_INFO, optimizer_formula, optimizer_label
from app.core.rules import validate_setup
from app.core.setup import MAX_PARAM_COUNT, OFFLOADS, Parallelism, Training, activation_setup, check_int
from app.core.stages import StageKind, stage_kinds
from app.core.timeline import (
    OPTIMIZER_STEP,
    START,
    STEP_PHASE_NAMES,
    Life,
    Peak,
    Phase,
    Plan,
    Point,
    live_bytes,
    plan,
    sweep,
    timeline_points,
)
from app.core.units import ceil_div, tensor_bytes
from app.core.warnings import count_warnings, estimate_warnings, folded_warnings, paged_warnings

COUNT_FORWARD: Final = "fwd.model"
COUNT_BACKWARD: Final = "bwd.model"


@dataclass(frozen=True)
class Estimate:
    param_count: int
    per_gpu: Breakdown  # the sum of the ledger by category
    cluster: Breakdown
    gpu: GpuFit | None  # follows the peak
    warnings: tuple[str, ...]
    pipeline_stage: int
    ledger: tuple[Buffer, ...]
    bytes_per_param: dict[str, float]
    peak: Peak
    timeline: tuple[Point, ...]
    attention_kernel: str | None = None
    layer_activations: tuple[act.SavedTensor, ...] = ()  # what one layer keeps per micro-batch on one rank
    trainable_param_count: int = 0  # parameters that train (all of them unless fine-tuning freezes some)
    host: Host | None = None  # host memory, when offloading
    active_param_count: int = 0  # parameters one token uses (fewer than param_count for mixtures of experts)
    reserved_timeline: tuple[int, ...] = ()  # the allocator's reserved bytes, the most within each event
    outside_allocator_bytes: int = 0  # per GPU: the CUDA context and the user's extra


@dataclass(frozen=True)
class Host:
    """Host memory that offloading uses: each GPU's share by category, its buffers, and a node's total."""

    per_gpu: Breakdown
    ledger: tuple[Buffer, ...]
    gpus_per_node: int
    per_node_bytes: int


def _host(buffers: tuple[Buffer, ...], parallelism: Parallelism) -> Host | None:
    if not buffers:
        return None
    per_gpu = _sum_by_category(buffers)
    gpus = min(parallelism.gpus_per_node, parallelism.world_size)
    return Host(per_gpu, buffers, gpus, per_gpu.total_bytes * gpus)


def estimate(
    *,
    architecture: Architecture | None = None,
    num_params: int | None = None,
    training: Training | None = None,
    parallelism: Parallelism | None = None,
    gpu: Gpu | None = None,
    device: act.Device = "cuda",
    reserve: bool = True,
    verdict_only: bool = False,
) -> Estimate:
    """Memory for training, per GPU (most-loaded rank) and for the whole cluster, with its timeline and peak.

    Give either `architecture` (everything is computed) or `num_params` (model states only:
    activations and temporaries need the shapes and are reported as None). `device` chooses whose
    kernels decide what is saved: ``cuda`` (the product) or ``cpu`` (to compare with CPU runs). Without `reserve`
    the allocator's replay is skipped: the tensors' timeline and peak only, with no reserved bytes and no verdict
    (for charts of the tensors, and to rule out a setup whose tensors alone pass the capacity). With
    `verdict_only` only its verdict is to be read: where the allocator runs out of room the estimate holds the
    replay up to there, not how far past the room the step would go, and where the tensors alone pass the room, no
    replay (a search for a boundary replays a value that does not fit once at most, not twice).
    """
    training = training or Training()
    parallelism = parallelism or Parallelism()
    if (architecture is None) == (num_params is None):
        raise DomainError("model", "give either an architecture or num_params")
    validate_setup(training, parallelism, architecture)
    if architecture is None:
        assert num_params is not None  # one of the two, checked above
        return _from_count(num_params, training, parallelism, gpu)
    return _from_architecture(architecture, training, parallelism, gpu, device, reserve, verdict_only)


class _Stage(NamedTuple):
    """The most-loaded pipeline stage: its ledger (cluster bytes summed over every stage), host buffers and plan."""

    kind: StageKind
    ledger: tuple[Buffer, ...]
    host: tuple[Buffer, ...]
    steps: Plan
    live: list[tuple[int, ...]]
    live_totals: list[int]
    cluster: dict[str, int]


def _most_loaded_stage(arch: Architecture, training: Training, parallelism: Parallelism, setup: act.ActivationSetup,
                       layer_saved: tuple[act.SavedTensor, ...]) -> _Stage:
    """Every stage's ledger for the cluster's sums; the stage whose live bytes peak highest for the rest."""
    m = training.gradient_accumulation_steps
    best = None
    cluster = dict.fromkeys(CATEGORIES, 0)
    cluster_by_key: dict[str, int] = {}
    kinds = stage_kinds(arch, pipeline=parallelism.pipeline, micro_batches=m, virtual_stages=parallelism.virtual_stages,
                        stage_layers=parallelism.stage_layers(arch.num_hidden_layers) if parallelism.uneven_stages
                        else None)
    for kind in kinds:
        # A middle stage holds what the first holds, less the embedding and no more micro-batches
        # in flight, at every event they share: with no more layers than the first it is never the
        # most loaded, so only its cluster share is needed, and its formulas are not written out.
        skipped = not (kind.first or kind.last) and kind.layers <= kinds[0].layers
        ledger, _, host = stage_ledger(arch, training, parallelism, kind, setup, layer_saved=layer_saved,
                                       texts=not skipped)
        for buffer in ledger:
            cluster[buffer.category] += buffer.cluster_bytes
            cluster_by_key[buffer.key] = cluster_by_key.get(buffer.key, 0) + buffer.cluster_bytes
        if skipped:
            continue
        totals = {ACTS: kind.layers, FORWARDED: kind.layers, GRADS: kind.layers, GRADS_DONE: kind.layers}
        steps = stage_plan(kind, micro_batches=m)
        live, live_totals = live_bytes([(b.category, b.bytes, b.life) for b in ledger], steps, totals)
        # The points of the timeline are made for the stage that is reported only.
        top = max(live_totals)
        if best is None or top > best[0]:
            best = (top, kind, ledger, host, steps, live, live_totals)
    assert best is not None
    _, kind, ledger, host, steps, live, live_totals = best
    ledger = tuple(buffer if buffer.cluster_bytes == cluster_by_key[buffer.key] else
                   _with_cluster(buffer, cluster_by_key[buffer.key]) for buffer in ledger)
    return _Stage(kind, ledger, host, steps, live, live_totals, cluster)


def _stage_reserve(arch: Architecture, training: Training, parallelism: Parallelism, gpu: Gpu | None, stage: _Stage,
                   full_layer: list[int], kept_bytes: list[int], peak_bytes: int,
                   groups: tuple[Communicator, ...], verdict_only: bool) -> reserve.StageReserve:
    """The allocator's replay of the stage, several layers at a time where one by one would take too long."""
    kind, ledger, steps = stage.kind, stage.ledger, stage.steps
    ramps = {ACTS: kind.layers, FORWARDED: kind.layers, GRADS: kind.layers, GRADS_DONE: kind.layers}
    templates = reserve.stage_templates(arch, parallelism, kind, ledger, full_layer, kept_bytes)
    fold = reserve.fold_for(ledger, steps, ramps, templates)
    if fold > 1:
        templates = reserve.stage_templates(arch, parallelism, kind, ledger, full_layer, kept_bytes, fold)
    return reserve.stage_reserve(
        ledger, steps, ramps, templates=templates,
        forward_transient=full_layer if training.activation_checkpointing in ("full", "op") else (),
        kind=training.allocator, gpu=gpu, extra_bytes=training.framework_overhead_bytes,  # type: ignore[arg-type]
        ledger_peak_bytes=peak_bytes, communicator_bytes=sum(c.bytes for c in groups), fold=fold,
        verdict_only=verdict_only)


def _counts(arch: Architecture, training: Training) -> tuple[int, int, states.StageShapes]:
    """The model's parameters (with adapters), those that train, and the whole model's shapes."""
    whole = states.stage_shapes(arch, 1, layers=arch.num_hidden_layers, first=True, last=True,
                                dense=states.dense_layers_on(arch, first_layer=0, layers=arch.num_hidden_layers, count=1))
    count = trainable = whole.rank_total
    if finetunes(training):
        tuned = states.finetuned_stage(arch, training.finetuning, training.precision.bits("weights"), 1,
                                       layers=arch.num_hidden_layers, first=True, last=True, first_layer=0,
                                       quantized_head=training.quantizes_output_layer)
        count += tuned.added_elements
        trainable = tuned.trainable_rank
    return count, trainable, whole


def _from_architecture(arch: Architecture, training: Training, parallelism: Parallelism, gpu: Gpu | None,
                       device: act.Device, with_reserve: bool = True, verdict_only: bool = False) -> Estimate:
    setup = activation_setup(training, parallelism, device=device)
    layer_saved = fp8_layer_saved(arch, training, setup, act.layer_activations(arch, setup))
    stage = _most_loaded_stage(arch, training, parallelism, setup, layer_saved)
    kind, ledger = stage.kind, stage.ledger
    points, peak = timeline_points(stage.steps, stage.live, stage.live_totals)
    kept_layer = act.checkpointed_layer_activations(arch, setup, training.activation_checkpointing, full=layer_saved)
    groups = communicators(parallelism, gpu.interconnect) if gpu else ()
    stage_reserve = None
    if with_reserve:
        stage_reserve = _stage_reserve(arch, training, parallelism, gpu, stage, [saved.bytes for saved in layer_saved],
                                       [t.bytes for t in kept_layer], peak.bytes, groups, verdict_only)
        peak = peak._replace(reserved_bytes=stage_reserve.reserved.max_bytes)
    per_gpu = _sum_by_category(ledger)
    count, trainable, whole = _counts(arch, training)
    kernel = act.attention_kernel(arch, setup)
    return Estimate(
        param_count=count,
        per_gpu=per_gpu,
        cluster=Breakdown(stage.cluster),
        gpu=fit(gpu, total_bytes=peak.reserved_bytes + stage_reserve.outside_bytes, reserved_bytes=peak.reserved_bytes,
                outside_bytes=stage_reserve.outside_bytes, out_of_memory=stage_reserve.out_of_memory,
                communicators=groups)
        if gpu and stage_reserve else None,
        # What this answer stands on first (an unknown model type, a folded replay), then the rest by weight.
        warnings=(*stand_in_warnings(arch),
                  *paged_warnings(sum(b.bytes for b in stage.host if b.key == "optimizer_states.paged"),
                                  free_bytes=_free_bytes(gpu, stage_reserve)),
                  *folded_warnings(stage_reserve.reserved.fold if stage_reserve else 1, kind.layers,
                                   _headroom_share(gpu, stage_reserve)),
                  *estimate_warnings(arch, training, parallelism, kernel=kernel, peak=peak, per_gpu=per_gpu,
                                     experts_backward_known=moe_backward_modelled(arch, training, parallelism,
                                                                                  setup))),
        pipeline_stage=kind.index,
        ledger=ledger,
        bytes_per_param=_bytes_per_param(count, states.states_bytes(list(whole.rank_shapes), training, count=count)),
        peak=peak,
        timeline=points,
        attention_kernel=kernel,
        layer_activations=kept_layer,
        trainable_param_count=trainable,
        host=_host(stage.host, parallelism),
        active_param_count=count - _inactive_params(arch),
        reserved_timeline=stage_reserve.reserved.per_event if stage_reserve else (),
        outside_allocator_bytes=stage_reserve.outside_bytes if stage_reserve else 0,
    )


def _free_bytes(gpu: Gpu | None, stage_reserve: reserve.StageReserve | None) -> int | None:
    """What the GPU has left beside the allocator's reserve and what lies outside it, where there is a replay."""
    if gpu is None or stage_reserve is None:
        return None
    return gpu.capacity_bytes - stage_reserve.reserved.max_bytes - stage_reserve.outside_bytes


def _headroom_share(gpu: Gpu | None, stage_reserve: reserve.StageReserve | None) -> float | None:
    """The headroom as a share of the allocator's reserve, where there is a GPU and a replay."""
    if gpu is None or stage_reserve is None or not stage_reserve.reserved.max_bytes:
        return None
    total = stage_reserve.reserved.max_bytes + stage_reserve.outside_bytes
    return (gpu.capacity_bytes - total) / stage_reserve.reserved.max_bytes


def _count_fit(gpu: Gpu | None, peak_bytes: int, parallelism: Parallelism) -> GpuFit | None:
    """A bare count's fit: no shapes to replay, so its tensors stand for the reserve; the context and the
    communicators' buffers lie outside."""
    if gpu is None:
        return None
    groups = communicators(parallelism, gpu.interconnect)
    outside = gpu.context_bytes + sum(c.bytes for c in groups)
    return fit(gpu, total_bytes=peak_bytes + outside, reserved_bytes=peak_bytes, outside_bytes=outside,
               communicators=groups)


@lru_cache(maxsize=256)
def _inactive_params(arch: Architecture) -> int:
    """Parameters a token does not use (the experts it is not routed to): a property of the architecture alone,
    worked out once per architecture, which a session of estimates keeps while the training setup changes."""
    return param_count(arch) - active_param_count(arch)


def _with_cluster(buffer: Buffer, cluster_bytes: int) -> Buffer:
    key, category, label, formula, size, _, life, names = buffer
    # A plain tuple of the NamedTuple's class: `buffer._replace(cluster_bytes=...)` without its Python-level cost.
    return tuple.__new__(Buffer, (key, category, label, formula, size, cluster_bytes, life, names))


def _sum_by_category(ledger: tuple[Buffer, ...], *, unknown: tuple[str, ...] = ()) -> Breakdown:
    sums: dict[str, int | None] = dict.fromkeys(CATEGORIES, 0)
    for buffer in ledger:
        sums[buffer.category] = (sums[buffer.category] or 0) + buffer.bytes
    for category in unknown:
        sums[category] = None
    return Breakdown(sums)


class _Count(NamedTuple):
    """A bare parameter count's share on a rank and its text, and the states' bytes on a rank and in all."""

    share: int
    share_text: str
    rank: dict[str, int]
    whole: dict[str, int]
    names: dict[str, str]


def _from_count(num_params: int, training: Training, parallelism: Parallelism, gpu: Gpu | None) -> Estimate:
    """Model states of a bare parameter count; tensor and pipeline parallelism split it evenly."""
    check_int("model.num_params", num_params, low=1, high=MAX_PARAM_COUNT)
    p = parallelism
    share = ceil_div(num_params, p.tensor * p.pipeline)
    model_parallel = p.tensor * p.pipeline
    phases = (Phase(COUNT_FORWARD, "forward"), Phase(COUNT_BACKWARD, "backward"))
    count = _Count(share, f"{num_params:,} params" + (f" ÷ {model_parallel} (tensor × pipeline)" if model_parallel > 1
                                                       else ""),
                   states.count_states_bytes(share, training), states.count_states_bytes(num_params, training),
                   {phase.id: phase.name for phase in phases} | STEP_PHASE_NAMES)
    notes: list[str] = []
    ledger = (*_count_states(count, training, p), *_count_deepspeed(count, training, p, notes),
              *_count_scratch(count, training, p))
    scratch = OPTIMIZER_INFO[training.optimizer].scratch[training.optimizer_implementation]
    steps = plan(phases, micro_batches=training.gradient_accumulation_steps, carried={})
    points, peak = sweep([(b.category, b.bytes, b.life) for b in ledger], steps, {})
    peak = peak._replace(reserved_bytes=peak.bytes)  # no shapes to replay: the tensors' own bytes
    return Estimate(
        param_count=num_params,
        per_gpu=_sum_by_category(ledger, unknown=("activations",)),
        cluster=_sum_cluster(ledger),
        gpu=_count_fit(gpu, peak.bytes, p),
        warnings=tuple(count_warnings(training, parallelism, scratch_known=scratch.of == "all" or not scratch.copies))
        + tuple(notes),
        pipeline_stage=0,
        ledger=ledger,
        bytes_per_param=_bytes_per_param(num_params, count.whole),
        peak=peak,
        timeline=points,
        trainable_param_count=num_params,
        active_param_count=num_params,
    )


def _count_states(count: _Count, training: Training, p: Parallelism) -> list[Buffer]:
    """The weights, gradients, master copy and optimizer state of a bare count."""
    precision = training.precision
    lives = {
        "weights": Life("run", START), "master_weights": Life("run", START),
        "gradients": Life("step", COUNT_BACKWARD, OPTIMIZER_STEP), "optimizer_states": Life("run", OPTIMIZER_STEP),
    }
    labels = {
        "weights": f"Weights in {precision.weights}", "gradients": f"Gradients in {precision.gradients}",
        "master_weights": f"Master copy in {precision.master_weights}",
        "optimizer_states": optimizer_label(training.optimizer, adafactor_momentum=training.adafactor_momentum),
    }
    buffers = []
    for category in MODEL_STATE_CATEGORIES:
        if category == "master_weights" and not precision.master_weights:
            continue
        note = ""
        if states.is_sharded(category, p) and p.shard_group > 1:
            note = f" ÷ {p.shard_group} (ZeRO-{p.zero_stage} over the data-parallel group)"
        if category == "optimizer_states":
            formula = optimizer_formula(training.optimizer, share=count.share_text,
                                        bits=precision.bits("optimizer_states"),
                                        adafactor_momentum=training.adafactor_momentum)
        else:
            formula = f"{count.share_text} × {precision.bits(category)} bit ÷ 8"
        buffers.append(Buffer(category, category, labels[category], formula + note,
                              states.on_rank(count.rank[category], category, p),
                              states.over_group(count.whole[category], category, p), lives[category], count.names))
    return buffers


def _count_deepspeed(count: _Count, training: Training, p: Parallelism, notes: list[str]) -> list[Buffer]:
    """DeepSpeed's convention (contributors.model_states): the fp32 copy of the gradient partition; under ZeRO-3 a
    note on the gathered layer, which a bare count does not give."""
    if training.framework != "deepspeed" or p.zero_stage < 1:
        return []
    buffers = []
    if not OFFLOADS[p.offload].optimizer:
        size = tensor_bytes(ceil_div(count.share, p.shard_group), FP32_BITS)
        buffers.append(Buffer("deepspeed.fp32_grad_partition", "gradients", "fp32 copy of this rank's gradient "
                              "partition for the optimizer step (DeepSpeed)",
                              f"{count.share_text} ÷ {p.shard_group} × 32 bit ÷ 8 — DeepSpeed convention, "
                              f"{DS_ZERO2}:3118-3126", size, size * p.world_size,
                              Life("step", OPTIMIZER_STEP, OPTIMIZER_STEP), count.names))
    if p.zero_stage >= 3:
        notes.append("DeepSpeed's ZeRO-3 convention also gathers the largest layer's 16-bit parameters and "
                     "gradients (4 bytes per parameter of it), which a bare parameter count does not give; it is "
                     "left out.")
    return buffers


def _count_scratch(count: _Count, training: Training, p: Parallelism) -> list[Buffer]:
    """The optimizer step's scratch where it is a multiple of every parameter (not of the largest tensor)."""
    scratch = OPTIMIZER_INFO[training.optimizer].scratch[training.optimizer_implementation]
    if scratch.of != "all" or not scratch.copies:
        return []
    params = states.on_rank(count.share, "optimizer_states", p)
    bits = training.precision.bits("optimizer_states")
    size = tensor_bytes(scratch.copies * params, bits)
    return [Buffer("optimizer.scratch", "temporary", f"optimizer.step() scratch, {training.optimizer_implementation}",
                   f"{scratch.formula(param_elements=params, largest_elements=0, bits=bits)}: {scratch.source}",
                   size, size * p.world_size, Life("step", OPTIMIZER_STEP, OPTIMIZER_STEP), count.names)]


def _sum_cluster(ledger: tuple[Buffer, ...]) -> Breakdown:
    sums: dict[str, int | None] = dict.fromkeys(CATEGORIES, 0)
    for buffer in ledger:
        sums[buffer.category] = (sums[buffer.category] or 0) + buffer.cluster_bytes
    sums["activations"] = None
    return Breakdown(sums)


def _bytes_per_param(count: int, whole: dict[str, int]) -> dict[str, float]:
    """Unsharded bytes per parameter for each model-state category (the 2 + 2 + 4 + 8 of the classic rule)."""
    return {category: whole[category] / count for category in MODEL_STATE_CATEGORIES}
