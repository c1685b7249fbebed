"""Model states (weights, gradients, master copy, optimizer state) and how ZeRO shards them.

Model states follow Rajbhandari et al. 2019 (ZeRO, arXiv:1910.02054, section 3.1 and Figure 1):
each is derived from the precision and the optimizer, never a fixed 16 bytes per parameter. ZeRO
stage 1 shards optimizer state and master weights over the data-parallel group, stage 2 adds
gradients and stage 3 the weights (section 5, P_os, P_os+g, P_os+g+p). Sharding moves bytes
between ranks: the cluster total of a sharded category is the unsharded total, and a replicated
one counts once per replica. The most-loaded rank holds the ceiling of an even share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Final

from app.core.architecture import Architecture, embedding_tensors, head_tensors, layer_tensors
from app.core.finetuning import Finetuning, adapter_tensors, stored_weight_bytes
from app.core.optimizers import (
    FP32_BITS,
    OPTIMIZER_INFO,
    optimizer_state_bytes,
    optimizer_state_bytes_from_count,
    paged_state_bytes,
)
from app.core.param_tensors import ParamTensor
from app.core.units import ceil_div, tensor_bytes

if TYPE_CHECKING:
    from app.core.setup import Parallelism, Training

Shapes = list[tuple[tuple[int, ...], int]]  # (shape, repetitions)


def sharded_categories(zero_stage: int) -> frozenset[str]:
    """ZeRO stage 1: optimizer states and master weights; 2: + gradients; 3: + weights (P_os, P_os+g, P_os+g+p)."""
    categories = set()
    if zero_stage >= 1:
        categories |= {"optimizer_states", "master_weights"}
    if zero_stage >= 2:
        categories.add("gradients")
    if zero_stage >= 3:
        categories.add("weights")
    return frozenset(categories)


# Each ZeRO stage's sharded categories, worked out once (a ledger asks a few dozen times per estimate).
_SHARDED_BY_STAGE = tuple(sharded_categories(zero_stage) for zero_stage in range(4))


def is_sharded(category: str, parallelism: Parallelism) -> bool:
    return category in _SHARDED_BY_STAGE[parallelism.zero_stage]


def on_rank(value: int, category: str, parallelism: Parallelism) -> int:
    """The most-loaded data-parallel rank's share of `value` bytes of `category`."""
    return ceil_div(value, parallelism.shard_group) if is_sharded(category, parallelism) else value


def over_group(value: int, category: str, parallelism: Parallelism) -> int:
    """`value` bytes of one replica of `category`, summed over the data-parallel group."""
    return value if is_sharded(category, parallelism) else value * parallelism.shard_group


def rank_shapes(tensors: Iterable[tuple[ParamTensor, int]], tensor_parallel: int) -> Shapes:
    """Shapes on the most-loaded tensor-parallel rank (rank 0)."""
    return [(tensor.shape_on_rank(tensor_parallel, 0), reps) for tensor, reps in tensors]


def all_rank_shapes(tensors: Iterable[tuple[ParamTensor, int]], tensor_parallel: int) -> Shapes:
    """Shapes over every tensor-parallel rank, each with how many ranks and repetitions hold it."""
    return [(shape, reps * ranks) for tensor, reps in tensors for shape, ranks in tensor.rank_shapes(tensor_parallel)]


def elements(shapes: Shapes) -> int:
    return sum(math.prod(shape) * count for shape, count in shapes)


def largest_elements(shapes: Shapes) -> int:
    return max((math.prod(shape) for shape, _ in shapes), default=0)


def states_bytes(shapes: Shapes, training: Training, *, count: int | None = None) -> dict[str, int]:
    """Unsharded model states for parameters of the given shapes (`count`: their elements, if known)."""
    precision = training.precision
    count = elements(shapes) if count is None else count
    bits = precision.bits("optimizer_states")
    per_element = OPTIMIZER_INFO[training.optimizer].states_per_element
    if per_element is not None:
        optimizer_bytes = per_element * tensor_bytes(count, bits)
    else:
        optimizer_bytes = sum(
            reps * optimizer_state_bytes(training.optimizer, shapes=[shape], state_bits=bits,
                                         adafactor_momentum=training.adafactor_momentum)
            for shape, reps in shapes
        )
    return {
        "weights": tensor_bytes(count, precision.bits("weights")),
        "gradients": tensor_bytes(count, precision.bits("gradients")),
        "master_weights": tensor_bytes(count, precision.bits("master_weights")),
        "optimizer_states": optimizer_bytes,
    }


def paged_states_bytes(shapes: Shapes, training: Training) -> int:
    """Of `states_bytes`' optimizer state, what a paged optimizer keeps in CUDA unified memory."""
    return sum(reps * paged_state_bytes(training.optimizer, shapes=[shape]) for shape, reps in shapes)


def count_states_bytes(params: int, training: Training) -> dict[str, int]:
    """Unsharded model states of `params` parameters whose shapes are unknown."""
    precision = training.precision
    return {
        "weights": tensor_bytes(params, precision.bits("weights")),
        "gradients": tensor_bytes(params, precision.bits("gradients")),
        "master_weights": tensor_bytes(params, precision.bits("master_weights")),
        "optimizer_states": optimizer_state_bytes_from_count(
            training.optimizer, param_count=params, state_bits=precision.bits("optimizer_states")
        ),
    }


@dataclass(frozen=True)
class StageShapes:
    """Parameter counts of one stage's parts on tensor-parallel rank 0 and over every rank (worked out once)."""

    rank: dict[str, int]  # part ("layers", "embedding", "head") -> elements on rank 0
    cluster: dict[str, int]  # part -> elements summed over the tensor-parallel ranks
    layer_rank: int  # one layer's elements on rank 0
    layer_matmul_rank: int  # one layer's matmul weights' elements on rank 0
    # One layer's weights that autocast casts on rank 0: those an F.linear reads, every 2-D matmul weight and a
    # mixture's router; not the routed experts' stacked weights, which transformers 5.24 multiplies with
    # torch._grouped_mm, which has no autocast kernel (measured: docs/VALIDATION.md, "Mixture of experts").
    layer_autocast_rank: int
    output_rank: int  # the output layer's matmul weight on rank 0 (0 off the last stage)
    rank_shapes: tuple[tuple[tuple[int, ...], int], ...]
    cluster_shapes: tuple[tuple[tuple[int, ...], int], ...]
    largest_rank: int
    # With expert parallelism each GPU holds 1/expert of the experts: the parts and shapes below with the experts
    # so divided (equal to the ones above without it). Unsharded model states follow these; ZeRO-sharded ones are
    # the whole over the data-parallel group either way (each expert's shards over data ÷ expert GPUs).
    rank_ep: dict[str, int] = field(default_factory=dict)
    cluster_ep: dict[str, int] = field(default_factory=dict)
    rank_ep_shapes: tuple[tuple[tuple[int, ...], int], ...] = ()
    cluster_ep_shapes: tuple[tuple[tuple[int, ...], int], ...] = ()
    dense_layers: int = 0  # of the stage's layers, a mixture's dense ones
    dense_layer_rank: int = 0  # one dense layer's elements on rank 0 (when there are any)
    sparse_layer_rank: int = 0  # one mixture-of-experts layer's elements on rank 0 (when there are dense ones)

    @property
    def rank_total(self) -> int:
        return sum(self.rank.values())

    @property
    def rank_ep_total(self) -> int:
        return sum(self.rank_ep.values())

    @property
    def cluster_total(self) -> int:
        return sum(self.cluster.values())


def dense_layers_on(arch: Architecture, *, first_layer: int, layers: int, count: int) -> int:
    """A mixture's dense layers among a stage's `layers` decoder layers from `first_layer` (counted from 0). For a
    kind of `count` stages (the middle ones of a pipeline), its most-loaded stage is one without them whenever any
    is: they count only when every stage of the kind has them."""
    dense = arch.dense_layers if arch.is_moe else 0
    if not dense:
        return 0
    overlap = max(0, min(first_layer + layers, dense) - first_layer)
    if count > 1 and first_layer + count * layers > dense:
        return 0
    return overlap


def _expert_share(tensor: ParamTensor, expert_parallel: int, expert_tensor: int) -> ParamTensor:
    """A routed-experts tensor as one GPU of the expert grid holds it: 1/expert_parallel of the experts (its first
    dimension) and, where `expert_tensor` is given (an expert-tensor degree other than the tensor-parallel one),
    rank 0's slice of each expert over that many GPUs, the same on every tensor-parallel rank; every other tensor
    whole."""
    if not tensor.name.startswith("moe.experts."):
        return tensor
    if expert_parallel > 1:
        tensor = replace(tensor, shape=(tensor.shape[0] // expert_parallel, *tensor.shape[1:]))
    if expert_tensor:
        tensor = replace(tensor, shape=tensor.shape_on_rank(expert_tensor, 0), split="replicated")
    return tensor


def _autocast_casts(tensor: ParamTensor) -> bool:
    """Whether autocast makes a half-precision copy of this weight: one an F.linear reads (StageShapes)."""
    return tensor.name == "moe.router.weight" or (tensor.matmul and len(tensor.shape) == 2)


_Parts = dict[str, tuple[tuple[ParamTensor, int], ...]]


def _stage_parts(arch: Architecture, t: int, *, layers: int, first: bool, last: bool, dense: int
                 ) -> tuple[tuple[tuple[ParamTensor, int], ...], _Parts, ParamTensor | None, int, int]:
    """A stage's tensors by part (layers, embedding, head) with their repeats; "one layer" (the larger of a dense
    and a sparse layer); the output layer's weight where the stage is last; a dense and a sparse layer's elements."""
    one_layer = tuple((tensor, 1) for tensor in layer_tensors(arch))
    stacked = tuple((x, layers - dense) for x, _ in one_layer)
    dense_rank = sparse_rank = 0
    if dense:
        dense_layer = tuple((tensor, 1) for tensor in layer_tensors(arch, dense=True))
        stacked += tuple((x, dense) for x, _ in dense_layer)
        dense_rank, sparse_rank = elements(rank_shapes(dense_layer, t)), elements(rank_shapes(one_layer, t))
        if dense_rank > sparse_rank:
            one_layer = dense_layer
    parts: _Parts = {"layers": stacked}
    if first:
        parts["embedding"] = tuple((tensor, 1) for tensor in embedding_tensors(arch))
    output: ParamTensor | None = None
    if last:
        head = [(tensor, 1) for tensor in head_tensors(arch)]
        if arch.tie_word_embeddings and not first:
            head.append((embedding_tensors(arch)[0], 1))
        parts["head"] = tuple(head)
        output = embedding_tensors(arch)[0] if arch.tie_word_embeddings else next(x for x in head_tensors(arch) if x.matmul)
    return one_layer, parts, output, dense_rank, sparse_rank


@lru_cache(maxsize=256)
def stage_shapes(arch: Architecture, tensor_parallel: int, *, layers: int, first: bool, last: bool,
                 dense: int = 0, expert_parallel: int = 1, expert_tensor: int = 0) -> StageShapes:
    """The parameter shapes of a stage with `layers` layers, the embedding if `first`, the head if `last`.

    `dense` of the layers are a mixture's dense ones (its first ``first_k_dense_replace``, DeepSeek), each with a
    dense MLP in place of the experts; "one layer" (what ZeRO-3 gathers, a layer's unsharded gradient) is the
    larger of the two kinds. With tied embeddings and more than one stage the last stage keeps its own copy of
    the embedding matrix for the output layer (Megatron-LM keeps and all-reduces the two copies). The `_ep` shapes
    hold the routed experts as one GPU of the expert grid does (`expert_parallel`, and `expert_tensor` when it is
    not 0 nor the tensor-parallel degree).
    """
    t = tensor_parallel
    one_layer, parts, output, dense_rank, sparse_rank = _stage_parts(arch, t, layers=layers, first=first, last=last,
                                                                    dense=dense)
    everything = tuple(item for part in parts.values() for item in part)
    rank = rank_shapes(everything, t)
    rank_dict = {name: elements(rank_shapes(part, t)) for name, part in parts.items()}
    cluster_dict = {name: elements(all_rank_shapes(part, t)) for name, part in parts.items()}
    rank_ep, cluster_ep = rank_dict, cluster_dict
    rank_ep_shapes: tuple[tuple[tuple[int, ...], int], ...] = tuple(rank)
    cluster_ep_shapes: tuple[tuple[tuple[int, ...], int], ...] = ()
    ep, etp = expert_parallel, (expert_tensor if expert_tensor != t else 0)
    if ep > 1 or etp:
        parts_ep = {name: tuple((_expert_share(x, ep, etp), reps) for x, reps in part) for name, part in parts.items()}
        one_layer = tuple((_expert_share(x, ep, etp), reps) for x, reps in one_layer)
        everything_ep = tuple(item for part in parts_ep.values() for item in part)
        rank_ep = {name: elements(rank_shapes(part, t)) for name, part in parts_ep.items()}
        cluster_ep = {name: elements(all_rank_shapes(part, t)) for name, part in parts_ep.items()}
        rank_ep_shapes = tuple(rank_shapes(everything_ep, t))
        cluster_ep_shapes = tuple(all_rank_shapes(everything_ep, t))
    cluster_shapes = tuple(all_rank_shapes(everything, t))
    return StageShapes(
        rank=rank_dict,
        cluster=cluster_dict,
        rank_ep=rank_ep,
        cluster_ep=cluster_ep,
        rank_ep_shapes=rank_ep_shapes,
        cluster_ep_shapes=cluster_ep_shapes or cluster_shapes,
        layer_rank=elements(rank_shapes(one_layer, t)),
        layer_matmul_rank=elements(rank_shapes(((x, 1) for x, _ in one_layer if x.matmul), t)),
        layer_autocast_rank=elements(rank_shapes(((x, 1) for x, _ in one_layer if _autocast_casts(x)), t)),
        output_rank=elements(rank_shapes(((output, 1),), t)) if output is not None else 0,
        rank_shapes=tuple(rank),
        cluster_shapes=cluster_shapes,
        largest_rank=largest_elements(rank),
        dense_layers=dense,
        dense_layer_rank=dense_rank,
        sparse_layer_rank=sparse_rank,
    )


@dataclass(frozen=True)
class TrainedPart:
    """The trainable parameters of one part of a stage: shapes on rank 0 and over the tensor-parallel ranks,
    their width in bits, and what they are."""

    rank_shapes: tuple[tuple[tuple[int, ...], int], ...]
    cluster_shapes: tuple[tuple[tuple[int, ...], int], ...]
    bits: int
    what: str

    @property
    def rank_elements(self) -> int:
        return elements(list(self.rank_shapes))

    @property
    def cluster_elements(self) -> int:
        return elements(list(self.cluster_shapes))


@dataclass(frozen=True)
class FinetunedStage:
    """A stage under fine-tuning: what trains, by part, and the bytes of the frozen base weights."""

    parts: dict[str, TrainedPart]
    frozen_rank_bytes: int
    frozen_cluster_bytes: int
    frozen_text: str
    added_elements: int  # parameters fine-tuning adds to this stage (adapters, saved copies), on every rank together

    @property
    def trainable_rank(self) -> int:
        return sum(part.rank_elements for part in self.parts.values())

    @property
    def trainable_cluster(self) -> int:
        return sum(part.cluster_elements for part in self.parts.values())


def finetuned_stage(arch: Architecture, finetuning: Finetuning, weight_bits: int, tensor_parallel: int, *,
                    layers: int, first: bool, last: bool, first_layer: int,
                    quantized_head: bool = False) -> FinetunedStage:
    """What trains on a stage of layers first_layer .. first_layer + layers - 1 (finetuning module docstring): with
    adapters, the adapters and any trainable copies (`_adapted_stage`), otherwise the layers and ends not frozen
    (`_trained_stage`); the rest is frozen, at `weight_bits` or, QLoRA's linear weights, quantized, the output layer
    too where `quantized_head` (Training.quantizes_output_layer)."""
    t, ft = tensor_parallel, finetuning
    head = list(head_tensors(arch)) if last else []
    if last and arch.tie_word_embeddings and not first:
        head.append(embedding_tensors(arch)[0])
    if ft.adapters:
        tuned = _adapted_stage(arch, ft, weight_bits, t, layers=layers, first=first, head=head, first_layer=first_layer,
                               quantized_head=quantized_head)
    else:
        tuned = _trained_stage(arch, ft, weight_bits, layers=layers, first=first, head=head, first_layer=first_layer)
    parts = {name: TrainedPart(tuple(rank_shapes(tensors, t)), tuple(all_rank_shapes(tensors, t)), bits, what)
             for name, (tensors, bits, what) in tuned.trained.items() if tensors}
    frozen_rank = elements(rank_shapes(tuned.frozen, t))
    text = f"{frozen_rank:,} frozen params × {weight_bits} bit ÷ 8"
    if tuned.quantized_rank:
        head_too = " and the output layer's" if quantized_head and last else ""
        text += f" + {layers} layers' linear weights{head_too} in {ft.quantization} ({tuned.quantized_rank:,} B)"
    return FinetunedStage(parts, tensor_bytes(frozen_rank, weight_bits) + tuned.quantized_rank,
                          tensor_bytes(elements(all_rank_shapes(tuned.frozen, t)), weight_bits) + tuned.quantized_cluster,
                          text, tuned.added)


_Tensors = list[tuple[ParamTensor, int]]  # tensors with their repeats


@dataclass(frozen=True)
class _Tuned:
    """What a fine-tuning method makes of a stage: the parts that train (part -> tensors, width in bits, what they
    are), the frozen tensors, the quantized weights' bytes on tensor-parallel rank 0 and over every rank, and the
    parameters it adds (adapters, trainable copies) on every rank together."""

    trained: dict[str, tuple[_Tensors, int, str]]
    frozen: _Tensors
    quantized_rank: int = 0
    quantized_cluster: int = 0
    added: int = 0


def _adapted_stage(arch: Architecture, ft: Finetuning, weight_bits: int, t: int, *, layers: int, first: bool,
                   head: list[ParamTensor], first_layer: int, quantized_head: bool) -> _Tuned:
    """LoRA or QLoRA: the adapters train in fp32, the base weights are frozen (`_frozen_base`) and the ends too,
    but for the trainable copies that modules_to_save makes (`_saved_copies`); where `quantized_head`, the untied
    output layer's weight is stored quantized like the layers' (`_frozen_base`)."""
    # A mixture's dense first layers (first_k_dense_replace) hold a dense MLP, frozen like the rest, and adapters
    # on their attention alone: those on the router and the stacked experts (all-linear) sit in the sparse ones.
    dense = dense_layers_on(arch, first_layer=first_layer, layers=layers, count=1)
    adapted = [(tensor, layers - dense if tensor.name.startswith("moe.") else layers)
               for tensor in adapter_tensors(arch, ft)]
    kinds = [(layer_tensors(arch), layers - dense)]
    if dense:
        kinds.append((layer_tensors(arch, dense=True), dense))
    frozen, quantized_rank, quantized_cluster = _frozen_base(kinds, ft, t)
    ends, copies = _saved_copies(arch, ft, first=first, head=head)
    if quantized_head:
        output = tuple(tensor for tensor, _ in ends if tensor.name == "lm_head.weight")
        ends = [(tensor, count) for tensor, count in ends if tensor.name != "lm_head.weight"]
        _, head_rank, head_cluster = _frozen_base([(output, 1)], ft, t)
        quantized_rank, quantized_cluster = quantized_rank + head_rank, quantized_cluster + head_cluster
    trained = {"layers": (adapted, FP32_BITS, f"LoRA adapters (r = {ft.rank}) of {layers} layers, fp32")}
    trained |= {name: (tensors, weight_bits, "trainable copy (modules_to_save)") for name, tensors in copies.items()}
    added = sum(tensor.elements * count for tensor, count in adapted)
    added += sum(tensor.elements for tensors in copies.values() for tensor, _ in tensors)
    return _Tuned(trained, frozen + ends, quantized_rank, quantized_cluster, added)


def _frozen_base(kinds: list[tuple[tuple[ParamTensor, ...], int]], ft: Finetuning,
                 t: int) -> tuple[_Tensors, int, int]:
    """The layers' base weights under adapters (`kinds`: each kind of layer's tensors and how many), frozen; under
    QLoRA the nn.Linear weights (finetuning) are stored quantized instead: their bytes on tensor-parallel rank 0 and
    over every rank."""
    frozen: _Tensors = []
    quantized_rank = quantized_cluster = 0
    for kind_tensors, count in kinds:
        for tensor in kind_tensors:
            if ft.method == "qlora" and tensor.matmul and len(tensor.shape) == 2:  # nn.Linear weights (finetuning)
                size = stored_weight_bytes(tensor.shape, ft.quantization)
                quantized_rank += count * ceil_div(size, t) if tensor.split != "replicated" else count * size
                quantized_cluster += count * size
            else:
                frozen.append((tensor, count))
    return frozen, quantized_rank, quantized_cluster


def _saved_copies(arch: Architecture, ft: Finetuning, *, first: bool,
                  head: list[ParamTensor]) -> tuple[_Tensors, dict[str, _Tensors]]:
    """Under adapters, the stage's embedding (if `first`) and `head` tensors (none off the last stage), frozen, and
    the trainable copies of them that modules_to_save asks for, by part."""
    frozen: _Tensors = []
    copies: dict[str, _Tensors] = {"embedding": [], "head": []}
    if first:
        frozen += [(tensor, 1) for tensor in embedding_tensors(arch)]
        if "embed_tokens" in ft.modules_to_save:
            copies["embedding"].append((embedding_tensors(arch)[0], 1))
    frozen += [(tensor, 1) for tensor in head]
    if head and "lm_head" in ft.modules_to_save:
        # A tied output layer's trainable copy is of the embedding's matrix, and still the head's: its
        # gradient comes with the output layer's backward, on the last stage.
        copies["head"].append((next((x for x in head if x.matmul), embedding_tensors(arch)[0]), 1))
    return frozen, copies


def _trained_stage(arch: Architecture, ft: Finetuning, weight_bits: int, *, layers: int, first: bool,
                   head: list[ParamTensor], first_layer: int) -> _Tuned:
    """Full fine-tuning or frozen parts: the layers from ft.frozen_layers on train, the others are frozen; the
    embedding and the head as `_trained_ends` says."""
    one_layer = layer_tensors(arch)
    trained_layers = max(0, first_layer + layers - max(first_layer, ft.frozen_layers))
    frozen_layers = layers - trained_layers
    frozen: _Tensors = [(tensor, frozen_layers) for tensor in one_layer if frozen_layers]
    trained = {"layers": ([(tensor, trained_layers) for tensor in one_layer if trained_layers], weight_bits,
                          f"{trained_layers} trained layers")}
    frozen_ends, trained_ends = _trained_ends(arch, ft, weight_bits, first=first, head=head)
    return _Tuned(trained | trained_ends, frozen + frozen_ends)


_ENDS: Final = {"embedding": "the embedding", "head": "the final norm and output layer"}


def _trained_ends(arch: Architecture, ft: Finetuning, weight_bits: int, *, first: bool,
                  head: list[ParamTensor]) -> tuple[_Tensors, dict[str, tuple[_Tensors, int, str]]]:
    """Under full fine-tuning the embedding (if `first`) and the `head` (none off the last stage) train, but for
    their embedding matrices under freeze_embeddings: the embedding's tables and a tied output layer's copy."""
    ends = {"embedding": list(embedding_tensors(arch)) if first else [], "head": head}

    def frozen(tensor: ParamTensor) -> bool:
        return ft.freeze_embeddings and tensor.name.startswith("embed")

    return ([(x, 1) for tensors in ends.values() for x in tensors if frozen(x)],
            {name: ([(x, 1) for x in tensors if not frozen(x)], weight_bits, _ENDS[name]) for name, tensors in ends.items()})


def module_name(tensor: ParamTensor) -> str:
    """The module a parameter belongs to: its name less a trailing ``.weight`` or ``.bias``."""
    stem, _, leaf = tensor.name.rpartition(".")
    return stem if stem and leaf in ("weight", "bias") else tensor.name


@lru_cache(maxsize=256)
def largest_module(arch: Architecture, tensor_parallel: int, *, first: bool, last: bool) -> int:
    """Elements, on tensor-parallel rank 0, of the stage's module with the most parameters of its own.

    DeepSpeed's ZeRO-3 estimator takes ``largest_layer_params`` as the most any one module holds directly
    (``m.parameters(recurse=False)``, deepspeed/runtime/zero/stage3.py ``model_to_params``): a single linear
    layer or the embedding, not a whole decoder layer. A tied output layer holds the embedding's matrix.
    """
    tensors = list(layer_tensors(arch))
    if first:
        tensors += embedding_tensors(arch)
    if last:
        tensors += head_tensors(arch)
    modules: dict[str, int] = {}
    for tensor in tensors:
        name = module_name(tensor)
        modules[name] = modules.get(name, 0) + math.prod(tensor.shape_on_rank(tensor_parallel, 0))
    if last and arch.tie_word_embeddings:
        modules["lm_head"] = math.prod(embedding_tensors(arch)[0].shape_on_rank(tensor_parallel, 0))
    return max(modules.values(), default=0)
