"""The whole estimate: model states, activations and temporaries per GPU and for the cluster.

Model states follow Rajbhandari et al. 2019 (ZeRO, arXiv:1910.02054, section 3.1 and Figure 1):
weights, gradients, an optional master copy and optimizer state, each derived from the precision
and optimizer (never a fixed 16 bytes per parameter). ZeRO stage 1 shards optimizer state and
master weights over the data-parallel group, stage 2 adds gradients and stage 3 the weights
(section 5, P_os, P_os+g, P_os+g+p). Sharding moves bytes between ranks: the cluster total of a
sharded category is the unsharded total, and a replicated one counts once per replica.

Pipeline parallelism splits the layers evenly over stages; under the 1F1B schedule stage k keeps
p - k micro-batches in flight, so the first stage holds p micro-batches of activations
(Narayanan et al. 2021, arXiv:2104.04473, section 2.2.1; Korthikanti et al. 2022, section 4.2).
Per-GPU figures are those of the most-loaded rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Final

from app.core import activations as act
from app.core.architecture import Architecture, ParamTensor, embedding_tensors, head_tensors, layer_tensors, param_count
from app.core.errors import DomainError
from app.core.gpus import Gpu, GpuFit, fit
from app.core.optimizers import check_optimizer, optimizer_state_bytes, optimizer_state_bytes_from_count
from app.core.precision import DEFAULT_PRECISION_PRESET, Precision, precision_preset
from app.core.units import ceil_div, tensor_bytes

GIB: Final = 1 << 30

# CUDA context plus the caching allocator's reserve beyond live tensors. An empty PyTorch process
# holds about 0.5 GiB on recent data-centre GPUs (CUDA context and kernels, as nvidia-smi shows for
# a process that has only called torch.cuda.init()); fragmentation in the caching allocator adds a
# few hundred MiB more in a training loop. 1 GiB is a round default; set it to your measurement.
DEFAULT_FRAMEWORK_OVERHEAD_BYTES: Final = 1 * GIB

MAX_MICRO_BATCH: Final = 1 << 16
MAX_SEQ_LEN: Final = 1 << 24
MAX_DEGREE: Final = 1 << 20
MAX_OVERHEAD_BYTES: Final = 1 << 40
MAX_PARAM_COUNT: Final = 10**15
# Beyond these a batch shape is accepted but called out: published long-context training stops at
# about 1M tokens per sequence, and micro-batches beyond a few thousand sequences per GPU do not fit
# any model worth estimating.
UNUSUAL_SEQ_LEN: Final = 1 << 20
UNUSUAL_MICRO_BATCH: Final = 4096

CATEGORIES: Final = ("weights", "gradients", "master_weights", "optimizer_states", "activations", "temporary")


@dataclass(frozen=True)
class Training:
    micro_batch_size: int = 1
    seq_len: int = 2048
    precision: Precision = field(default_factory=lambda: precision_preset(DEFAULT_PRECISION_PRESET))
    optimizer: str = "adamw"
    adafactor_momentum: bool = False
    activation_checkpointing: act.Checkpointing = "none"
    attention: act.Attention = "flash"
    implementation: act.Implementation = "transformers"
    framework_overhead_bytes: int = DEFAULT_FRAMEWORK_OVERHEAD_BYTES


@dataclass(frozen=True)
class Parallelism:
    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline


@dataclass(frozen=True)
class Breakdown:
    """Bytes per category. Activations and temporary are None when the architecture is unknown."""

    weights_bytes: int
    gradients_bytes: int
    master_weights_bytes: int
    optimizer_states_bytes: int
    activations_bytes: int | None
    temporary_bytes: int | None

    @property
    def total_bytes(self) -> int:
        return sum(getattr(self, f.name) or 0 for f in fields(self))

    def as_dict(self) -> dict[str, int | None]:
        values = {category: getattr(self, f"{category}_bytes") for category in CATEGORIES}
        return values | {"total": self.total_bytes}

    def __add__(self, other: Breakdown) -> Breakdown:
        def plus(x: int | None, y: int | None) -> int | None:
            return None if x is None or y is None else x + y

        return Breakdown(*(plus(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)))


@dataclass(frozen=True)
class Term:
    """One line of explanation: which category, what it is, its formula with the numbers in it, and its bytes."""

    category: str
    label: str
    formula: str
    bytes: int


@dataclass(frozen=True)
class Estimate:
    param_count: int
    per_gpu: Breakdown
    cluster: Breakdown
    gpu: GpuFit | None
    warnings: tuple[str, ...]
    pipeline_stage: int
    terms: tuple[Term, ...]
    bytes_per_param: dict[str, float]
    layer_activations: tuple[act.SavedTensor, ...] = ()  # what one layer keeps per micro-batch on one rank


@dataclass(frozen=True)
class _Stage:
    """One pipeline stage: its tensors, its layer count, and whether it holds the embedding or the head."""

    index: int
    tensors: tuple[tuple[ParamTensor, int], ...]  # (tensor, repetitions)
    layers: int
    first: bool
    last: bool


# --- validation ------------------------------------------------------------------------------------


def _check_int(field_name: str, value: int, *, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(field_name, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise DomainError(field_name, f"must be between {low:,} and {high:,}, got {value:,}")


def _check_choice(field_name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DomainError(field_name, f"must be one of {', '.join(choices)}, got {value!r}")


def validate_setup(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Cross-field rules the schema cannot see, each naming the field to change."""
    _check_int("training.micro_batch_size", training.micro_batch_size, low=1, high=MAX_MICRO_BATCH)
    _check_int("training.seq_len", training.seq_len, low=1, high=MAX_SEQ_LEN)
    _check_int("training.framework_overhead_bytes", training.framework_overhead_bytes, low=0, high=MAX_OVERHEAD_BYTES)
    check_optimizer(training.optimizer)
    _check_choice("training.activation_checkpointing", training.activation_checkpointing, act.CHECKPOINTING)
    _check_choice("training.attention", training.attention, act.ATTENTIONS)
    _check_choice("training.implementation", training.implementation, act.IMPLEMENTATIONS)
    for name in ("data", "tensor", "pipeline"):
        _check_int(f"parallelism.{name}", getattr(parallelism, name), low=1, high=MAX_DEGREE)
    _check_int("parallelism.zero_stage", parallelism.zero_stage, low=0, high=3)
    if arch is None:
        return
    t, p = parallelism.tensor, parallelism.pipeline
    if arch.num_attention_heads % t:
        raise DomainError(
            "parallelism.tensor",
            f"num_attention_heads ({arch.num_attention_heads}) must be divisible by the tensor-parallel degree ({t})",
        )
    if arch.kv_heads % t:
        raise DomainError(
            "parallelism.tensor",
            f"num_key_value_heads ({arch.kv_heads}) must be divisible by the tensor-parallel degree ({t})",
        )
    if arch.num_hidden_layers % p:
        raise DomainError(
            "parallelism.pipeline",
            f"num_hidden_layers ({arch.num_hidden_layers}) must be divisible by the pipeline degree ({p})",
        )


# --- model states ----------------------------------------------------------------------------------


def _stages(arch: Architecture, pipeline: int) -> tuple[_Stage, ...]:
    """Layers split evenly; the embedding on the first stage; final norm and head on the last.

    With tied embeddings and more than one stage the last stage keeps its own copy of the
    embedding matrix for the output layer (Megatron-LM keeps and all-reduces the two copies).
    """
    per_stage = arch.num_hidden_layers // pipeline
    stages = []
    for index in range(pipeline):
        first, last = index == 0, index == pipeline - 1
        tensors: list[tuple[ParamTensor, int]] = [(tensor, per_stage) for tensor in layer_tensors(arch)]
        if first:
            tensors += [(tensor, 1) for tensor in embedding_tensors(arch)]
        if last:
            tensors += [(tensor, 1) for tensor in head_tensors(arch)]
            if arch.tie_word_embeddings and not first:
                tensors.append((embedding_tensors(arch)[0], 1))
        stages.append(_Stage(index, tuple(tensors), per_stage, first, last))
    return tuple(stages)


@dataclass(frozen=True)
class _ModelStates:
    weights_bytes: int
    gradients_bytes: int
    master_weights_bytes: int
    optimizer_states_bytes: int


def _model_states(shapes: list[tuple[tuple[int, ...], int]], training: Training) -> _ModelStates:
    """Unsharded model states for parameters of the given shapes, each with a repetition count."""
    precision = training.precision
    elements = sum(math.prod(shape) * count for shape, count in shapes)
    optimizer_bytes = sum(
        count
        * optimizer_state_bytes(
            training.optimizer,
            shapes=[shape],
            state_bits=precision.bits("optimizer_states"),
            adafactor_momentum=training.adafactor_momentum,
        )
        for shape, count in shapes
    )
    return _ModelStates(
        weights_bytes=tensor_bytes(elements, precision.bits("weights")),
        gradients_bytes=tensor_bytes(elements, precision.bits("gradients")),
        master_weights_bytes=tensor_bytes(elements, precision.bits("master_weights")),
        optimizer_states_bytes=optimizer_bytes,
    )


def _rank_model_states(tensors: tuple[tuple[ParamTensor, int], ...], training: Training, tensor_parallel: int) -> _ModelStates:
    """Model states of the most-loaded tensor-parallel rank (rank 0) of one stage, before ZeRO."""
    return _model_states([(tensor.shape_on_rank(tensor_parallel, 0), reps) for tensor, reps in tensors], training)


def _all_ranks_model_states(tensors: tuple[tuple[ParamTensor, int], ...], training: Training, tensor_parallel: int) -> _ModelStates:
    """Model states summed over every tensor-parallel rank of one stage, before ZeRO."""
    return _model_states(
        [(shape, reps * ranks) for tensor, reps in tensors for shape, ranks in tensor.rank_shapes(tensor_parallel)],
        training,
    )


def _sharded_categories(zero_stage: int) -> frozenset[str]:
    """ZeRO stage 1: optimizer states and master weights; 2: + gradients; 3: + weights (P_os, P_os+g, P_os+g+p)."""
    categories = set()
    if zero_stage >= 1:
        categories |= {"optimizer_states", "master_weights"}
    if zero_stage >= 2:
        categories.add("gradients")
    if zero_stage >= 3:
        categories.add("weights")
    return frozenset(categories)


def _shard(states: _ModelStates, parallelism: Parallelism) -> tuple[_ModelStates, _ModelStates]:
    """(most-loaded data-parallel rank, sum over the data-parallel group) for one tensor-parallel rank.

    A sharded category splits its bytes over the group, ceiling for the most-loaded rank; the sum
    over the group is the unsharded amount. A replicated one is held whole by every rank.
    """
    sharded = _sharded_categories(parallelism.zero_stage)
    dp = parallelism.data
    per_rank, group = {}, {}
    for category in ("weights", "gradients", "master_weights", "optimizer_states"):
        value = getattr(states, f"{category}_bytes")
        if category in sharded:
            per_rank[category] = ceil_div(value, dp)
            group[category] = value
        else:
            per_rank[category] = value
            group[category] = value * dp
    return (
        _ModelStates(**{f"{k}_bytes": v for k, v in per_rank.items()}),
        _ModelStates(**{f"{k}_bytes": v for k, v in group.items()}),
    )


# --- activations and temporaries ---------------------------------------------------------------------


def activation_setup(training: Training, parallelism: Parallelism, *, device: act.Device = "cuda") -> act.ActivationSetup:
    return act.ActivationSetup(
        micro_batch_size=training.micro_batch_size,
        seq_len=training.seq_len,
        precision=training.precision,
        attention=training.attention,
        implementation=training.implementation,
        tensor_parallel=parallelism.tensor,
        sequence_parallel=parallelism.sequence_parallel,
        device=device,
    )


@dataclass(frozen=True)
class _ActivationParts:
    """Bytes for one micro-batch: one layer, the embedding (with what recomputation keeps), the head."""

    layer: int
    embedding: int
    head: int

    @classmethod
    def of(cls, arch: Architecture, setup: act.ActivationSetup, checkpointing: act.Checkpointing) -> _ActivationParts:
        held = act.checkpoint_held_activations(arch, setup, checkpointing)
        return cls(
            layer=act.total_bytes(act.checkpointed_layer_activations(arch, setup, checkpointing)),
            embedding=act.total_bytes(act.embedding_activations(arch, setup) + held),
            head=act.total_bytes(act.head_activations(arch, setup)),
        )


def _stage_activations(parts: _ActivationParts, stage: _Stage, pipeline: int) -> int:
    """Stage k keeps p - k micro-batches of its layers' activations in flight (1F1B); the head works on one."""
    in_flight = pipeline - stage.index
    total = in_flight * stage.layers * parts.layer
    if stage.first:
        total += in_flight * parts.embedding
    if stage.last:
        total += parts.head
    return total


def autocast_weight_copies_bytes(
    tensors: tuple[tuple[ParamTensor, int], ...],
    arch: Architecture,
    setup: act.ActivationSetup,
    *,
    checkpointing: act.Checkpointing = "none",
) -> int:
    """Half-precision copies autocast makes of each matmul weight and keeps from forward to backward.

    torch.autocast caches the cast of every leaf fp32 weight that feeds a matmul for the length of
    the autocast region, and the matmul keeps that copy for its backward. With tied embeddings the
    output layer casts the embedding matrix.

    Under full recomputation the layers' matmuls keep nothing, so their copies die with autocast's
    cache when the forward's autocast region ends; only the copies made outside the layers (the
    output layer's) are kept. In backward each layer's recomputation casts its weights again, one
    layer at a time, so one layer's copies are added for that peak.
    """
    if not setup.autocast:
        return 0
    in_layer = {tensor.name for tensor in layer_tensors(arch)}
    elements = 0
    for tensor, reps in tensors:
        if not tensor.matmul:
            continue
        if checkpointing == "full" and tensor.name in in_layer:
            reps = min(reps, 1)
        elements += math.prod(tensor.shape_on_rank(setup.tensor_parallel, 0)) * reps
    has_head = any(t.name == "final_norm.weight" for t, _ in tensors)
    if has_head and arch.tie_word_embeddings:
        elements += math.prod(embedding_tensors(arch)[0].shape_on_rank(setup.tensor_parallel, 0))
    return tensor_bytes(elements, setup.precision.bits("activations"))


def _stage_temporary(arch: Architecture, stage: _Stage, setup: act.ActivationSetup, training: Training) -> int:
    total = training.framework_overhead_bytes
    total += act.total_bytes(act.recompute_workspace(arch, setup, training.activation_checkpointing))
    total += autocast_weight_copies_bytes(stage.tensors, arch, setup, checkpointing=training.activation_checkpointing)
    if stage.last:
        total += act.total_bytes(act.logits_workspace(arch, setup))
    return total


# --- the estimate -------------------------------------------------------------------------------------


def estimate(
    *,
    architecture: Architecture | None = None,
    num_params: int | None = None,
    training: Training | None = None,
    parallelism: Parallelism | None = None,
    gpu: Gpu | None = None,
) -> Estimate:
    """Memory for one training step, per GPU (most-loaded rank) and for the whole cluster.

    Give either `architecture` (everything is computed) or `num_params` (model states only:
    activations and temporaries need the shapes and are reported as None).
    """
    training = training or Training()
    parallelism = parallelism or Parallelism()
    if (architecture is None) == (num_params is None):
        raise DomainError("model", "give either an architecture or num_params")
    validate_setup(training, parallelism, architecture)
    if architecture is None:
        return _estimate_from_count(num_params, training, parallelism, gpu)
    return _estimate_from_architecture(architecture, training, parallelism, gpu)


def _estimate_from_architecture(arch: Architecture, training: Training, parallelism: Parallelism, gpu: Gpu | None) -> Estimate:
    setup = activation_setup(training, parallelism)
    t, dp = parallelism.tensor, parallelism.data
    per_stage: list[Breakdown] = []
    cluster = Breakdown(0, 0, 0, 0, 0, 0)
    stages = _stages(arch, parallelism.pipeline)
    parts = _ActivationParts.of(arch, setup, training.activation_checkpointing)
    # Stages differ only in holding the embedding or the head, so their states and temporaries are
    # worked out once per kind.
    by_kind: dict[tuple[bool, bool], tuple[_ModelStates, _ModelStates, int]] = {}
    for stage in stages:
        kind = (stage.first, stage.last)
        if kind not in by_kind:
            rank0, _ = _shard(_rank_model_states(stage.tensors, training, t), parallelism)
            _, cluster_states = _shard(_all_ranks_model_states(stage.tensors, training, t), parallelism)
            by_kind[kind] = (rank0, cluster_states, _stage_temporary(arch, stage, setup, training))
        rank0, cluster_states, temporary_bytes = by_kind[kind]
        activations_bytes = _stage_activations(parts, stage, parallelism.pipeline)
        per_stage.append(Breakdown(*_states_tuple(rank0), activations_bytes, temporary_bytes))
        # Activations and temporaries: every rank of the stage holds the most-loaded share (a slight
        # overcount when a split dimension is not divisible by t).
        ranks = t * dp
        cluster = cluster + Breakdown(*_states_tuple(cluster_states), activations_bytes * ranks, temporary_bytes * ranks)
    heaviest = max(range(len(per_stage)), key=lambda index: per_stage[index].total_bytes)
    per_gpu = per_stage[heaviest]
    count = param_count(arch)
    return Estimate(
        param_count=count,
        per_gpu=per_gpu,
        cluster=cluster,
        gpu=fit(gpu, total_bytes=per_gpu.total_bytes) if gpu else None,
        warnings=tuple(_warnings(arch, training, parallelism, per_gpu)),
        pipeline_stage=heaviest,
        terms=tuple(_terms(arch, count, training, parallelism, setup, per_gpu, stages[heaviest])),
        bytes_per_param=_bytes_per_param(count, training, _unsharded_states(arch, training)),
        layer_activations=act.checkpointed_layer_activations(arch, setup, training.activation_checkpointing),
    )


def _states_tuple(states: _ModelStates) -> tuple[int, int, int, int]:
    return (states.weights_bytes, states.gradients_bytes, states.master_weights_bytes, states.optimizer_states_bytes)


def _unsharded_states(arch: Architecture, training: Training) -> _ModelStates:
    tensors = tuple((tensor, 1) for tensor in embedding_tensors(arch) + head_tensors(arch))
    tensors += tuple((tensor, arch.num_hidden_layers) for tensor in layer_tensors(arch))
    return _rank_model_states(tensors, training, 1)


def _count_states(params: int, training: Training) -> _ModelStates:
    """Unsharded model states of `params` parameters whose shapes are unknown."""
    precision = training.precision
    return _ModelStates(
        weights_bytes=tensor_bytes(params, precision.bits("weights")),
        gradients_bytes=tensor_bytes(params, precision.bits("gradients")),
        master_weights_bytes=tensor_bytes(params, precision.bits("master_weights")),
        optimizer_states_bytes=optimizer_state_bytes_from_count(
            training.optimizer, param_count=params, state_bits=precision.bits("optimizer_states")
        ),
    )


def _estimate_from_count(num_params: int, training: Training, parallelism: Parallelism, gpu: Gpu | None) -> Estimate:
    _check_int("model.num_params", num_params, low=1, high=MAX_PARAM_COUNT)
    # Without shapes, tensor and pipeline parallelism are taken to split the parameters evenly.
    model_parallel = parallelism.tensor * parallelism.pipeline
    per_rank, _ = _shard(_count_states(ceil_div(num_params, model_parallel), training), parallelism)
    whole = _count_states(num_params, training)
    _, group = _shard(whole, parallelism)
    per_gpu = Breakdown(*_states_tuple(per_rank), None, None)
    cluster = Breakdown(*_states_tuple(group), None, None)
    warnings = [
        "Activations and temporary buffers depend on the architecture (layers, hidden size, heads, vocabulary); "
        "with only a parameter count the totals cover model states alone. Choose a preset, give the architecture "
        "or paste a config.json to include them."
    ]
    warnings += _state_warnings(training, parallelism)
    terms = _state_terms(num_params, training, parallelism, per_gpu)
    return Estimate(
        param_count=num_params,
        per_gpu=per_gpu,
        cluster=cluster,
        gpu=fit(gpu, total_bytes=per_gpu.total_bytes) if gpu else None,
        warnings=tuple(warnings),
        pipeline_stage=0,
        terms=tuple(terms),
        bytes_per_param=_bytes_per_param(num_params, training, whole),
    )


def _bytes_per_param(count: int, training: Training, whole: _ModelStates) -> dict[str, float]:
    """Unsharded bytes per parameter for each model-state category (the 2 + 2 + 4 + 8 of the classic rule)."""
    return {
        "weights": whole.weights_bytes / count,
        "gradients": whole.gradients_bytes / count,
        "master_weights": whole.master_weights_bytes / count,
        "optimizer_states": whole.optimizer_states_bytes / count,
    }


# --- explanations and warnings ---------------------------------------------------------------------------


def _shard_note(category: str, parallelism: Parallelism) -> str:
    if category in _sharded_categories(parallelism.zero_stage) and parallelism.data > 1:
        return f" ÷ {parallelism.data} (ZeRO-{parallelism.zero_stage} shards it over the data-parallel group)"
    return ""


def _state_terms(count: int, training: Training, parallelism: Parallelism, per_gpu: Breakdown) -> list[Term]:
    precision = training.precision
    model_parallel = parallelism.tensor * parallelism.pipeline
    share = f"{count:,} params" + (f" ÷ {model_parallel} (tensor × pipeline)" if model_parallel > 1 else "")
    terms = [
        Term("weights", f"Weights in {precision.weights}",
             f"{share} × {precision.bits('weights')} bit ÷ 8{_shard_note('weights', parallelism)}", per_gpu.weights_bytes),
        Term("gradients", f"Gradients in {precision.gradients}",
             f"{share} × {precision.bits('gradients')} bit ÷ 8{_shard_note('gradients', parallelism)}", per_gpu.gradients_bytes),
    ]
    if precision.master_weights:
        terms.append(Term("master_weights", f"Master copy in {precision.master_weights}",
                          f"{share} × {precision.bits('master_weights')} bit ÷ 8{_shard_note('master_weights', parallelism)}",
                          per_gpu.master_weights_bytes))
    else:
        terms.append(Term("master_weights", "No master copy", "the optimizer updates the weights in place", 0))
    terms.append(Term("optimizer_states", _optimizer_label(training), _optimizer_formula(training, share, parallelism),
                      per_gpu.optimizer_states_bytes))
    return terms


def _optimizer_label(training: Training) -> str:
    labels = {
        "adam": "Adam moments m and v", "adamw": "AdamW moments m and v", "sgd": "SGD keeps no state",
        "sgd-momentum": "Momentum buffer", "lion": "Lion momentum",
        "adafactor": "Adafactor factored second moment" + (" and momentum" if training.adafactor_momentum else ""),
        "adamw-8bit": "8-bit AdamW moments with block scales",
    }
    return labels[training.optimizer]


def _optimizer_formula(training: Training, share: str, parallelism: Parallelism) -> str:
    bits = training.precision.bits("optimizer_states")
    note = _shard_note("optimizer_states", parallelism)
    match training.optimizer:
        case "adam" | "adamw":
            return f"2 × {share} × {bits} bit ÷ 8{note}"
        case "sgd-momentum" | "lion":
            return f"{share} × {bits} bit ÷ 8{note}"
        case "sgd":
            return "0"
        case "adafactor":
            momentum = f" + {share} × {bits} bit ÷ 8" if training.adafactor_momentum else ""
            return f"Σ over matrices (rows + columns) + Σ over vectors (length), × {bits} bit ÷ 8{momentum}{note}"
        case _:
            return f"2 × ({share} × 1 B + ⌈params ÷ 256⌉ × 4 B) for tensors of 4,096+ elements, 2 × 4 B per element below{note}"


def _terms(arch: Architecture, count: int, training: Training, parallelism: Parallelism,
           setup: act.ActivationSetup, per_gpu: Breakdown, stage: _Stage) -> list[Term]:
    """The per-GPU figures of the most-loaded stage, category by category, with their numbers."""
    terms = _state_terms(count, training, parallelism, per_gpu)
    flight = parallelism.pipeline - stage.index
    layers = stage.layers
    stored = act.checkpointed_layer_activations(arch, setup, training.activation_checkpointing)
    in_flight = f" × {flight} micro-batches in flight (1F1B)" if flight > 1 else ""
    b, s, h = training.micro_batch_size, training.seq_len, arch.hidden_size
    policy = {"none": "every tensor saved for backward", "selective": "attention core recomputed",
              "full": "only each layer's input kept"}[training.activation_checkpointing]
    terms.append(Term(
        "activations",
        f"Per layer ({policy}), b={b}, s={s:,}, h={h:,}",
        f"{layers} layers × {act.total_bytes(stored):,} B{in_flight}",
        layers * act.total_bytes(stored) * flight,
    ))
    if stage.first:
        first = act.embedding_activations(arch, setup) + act.checkpoint_held_activations(
            arch, setup, training.activation_checkpointing)
        terms.append(Term("activations", "Embedding (token ids, positions, dropout mask)",
                          f"{act.total_bytes(first):,} B{in_flight}", act.total_bytes(first) * flight))
    if stage.last:
        last = act.head_activations(arch, setup)
        terms.append(Term("activations", "Final norm, output layer input and fp32 loss log-probabilities",
                          f"b·s·V × 4 B = {b} × {s:,} × {arch.vocab_size:,} × 4 B, plus the norm", act.total_bytes(last)))
        workspace = act.logits_workspace(arch, setup)
        terms.append(Term("temporary", "Logits and their gradients around the loss",
                          "b·s·V × (logits width + two fp32 gradients)", act.total_bytes(workspace)))
    recompute = act.recompute_workspace(arch, setup, training.activation_checkpointing)
    if recompute:
        terms.append(Term("temporary", "One layer rebuilt during backward (recomputation)", "one layer's recomputed tensors",
                          act.total_bytes(recompute)))
    if setup.autocast:
        terms.append(Term("temporary", "Half-precision weight copies kept by autocast",
                          f"matmul weights × {training.precision.bits('activations')} bit ÷ 8",
                          autocast_weight_copies_bytes(stage.tensors, arch, setup,
                                                       checkpointing=training.activation_checkpointing)))
    terms.append(Term("temporary", "Framework overhead (CUDA context, allocator reserve)", "set by you",
                      training.framework_overhead_bytes))
    return terms


def _state_warnings(training: Training, parallelism: Parallelism) -> list[str]:
    precision = training.precision
    warnings = []
    if training.optimizer in ("adam", "adamw"):
        per_param = (precision.bits("weights") + precision.bits("gradients") + precision.bits("master_weights")
                     + 2 * precision.bits("optimizer_states")) // 8
        warnings.append(
            f"The often-quoted 16 bytes per parameter for Adam assume mixed precision with an fp32 master copy "
            f"(2 + 2 + 4 + 8); this precision gives {per_param} bytes per parameter before sharding."
        )
    if parallelism.zero_stage and parallelism.data == 1:
        warnings.append("ZeRO shards over the data-parallel group; with a data-parallel degree of 1 it saves nothing.")
    if parallelism.zero_stage == 0 and parallelism.data > 1:
        warnings.append("Each data-parallel rank holds a full replica of the model states; ZeRO stage 1-3 would shard them.")
    if "fp8" in (precision.weights, precision.activations):
        warnings.append("fp8 training keeps higher-precision copies and scaling factors that vary by recipe; "
                        "treat fp8 figures as a lower bound.")
    return warnings


def _warnings(arch: Architecture, training: Training, parallelism: Parallelism, per_gpu: Breakdown) -> list[str]:
    warnings = _state_warnings(training, parallelism)
    warnings.append("The total adds every category at once, an upper bound on the peak: in practice some "
                    "temporaries are freed before others are allocated, but peak memory, not average, is what runs out.")
    if training.seq_len > arch.max_position_embeddings:
        warnings.append(f"seq_len ({training.seq_len:,}) exceeds the model's max_position_embeddings "
                        f"({arch.max_position_embeddings:,}).")
    if training.activation_checkpointing != "none":
        warnings.append("Recomputation replays the forward pass in backward: it needs deterministic operations "
                        "(dropout restores its RNG state) and costs about one extra forward of compute.")
    if training.activation_checkpointing == "selective" and training.implementation == "transformers":
        warnings.append("Hugging Face transformers has no selective recomputation of its own; this models "
                        "Megatron-style recomputation of the attention core.")
    if training.attention == "eager" and training.seq_len >= 8192:
        warnings.append("Eager attention stores the s × s score matrix per head; at this length it dominates. "
                        "A fused (flash) kernel avoids it.")
    if training.attention == "flash" and training.precision.activations == "fp32":
        warnings.append("Flash attention kernels need fp16 or bf16 activations; in fp32 PyTorch falls back to a "
                        "kernel that may store the score matrix.")
    if parallelism.sequence_parallel and parallelism.tensor == 1:
        warnings.append("Sequence parallelism splits activations over the tensor-parallel group; with tensor=1 it has no effect.")
    if parallelism.tensor > 1 and training.implementation == "transformers":
        warnings.append("Tensor-parallel activations follow Megatron's split of attention heads and MLP columns.")
    if parallelism.pipeline > 1:
        warnings.append(f"Pipeline figures assume 1F1B with at least {parallelism.pipeline} micro-batches per step; "
                        "the first stage then holds that many micro-batches of activations.")
        if arch.tie_word_embeddings:
            warnings.append("Tied embeddings are duplicated on the last pipeline stage for the output layer.")
    if training.seq_len > UNUSUAL_SEQ_LEN or training.micro_batch_size > UNUSUAL_MICRO_BATCH:
        warnings.append("This batch shape is far outside what is trained in practice; check the inputs.")
    return warnings
