"""The allocator's reserved memory through the two steps: the ledger's buffers as the tensors a step allocates and
frees, in order, replayed through the caching allocator (`app.core.allocator`).

Each buffer becomes tensors by a template of relative sizes (`stage_templates`): the optimizer's state and the
gradients one tensor per parameter (the stage's parameter shapes), the weights, the master copy and the optimizer
step's scratch a piece per layer, a layer's gradients one tensor per parameter of a layer, a layer's saved
activations the tensors the layer keeps, the recomputed layer the tensors a full layer keeps; any other buffer is
one tensor; tensors of at most 1 MiB are packed together (`_pack_small`). Between two
events, buffers that end are freed first, then the layers' ramps move one layer at a time (in a layer's forward
under recomputation its working set is allocated and freed around what it keeps; in backward its gradients are
allocated before its activations are freed), then buffers that begin are allocated, in the ledger's order.

The replay costs about 3 µs of CPU a tensor, and a stage's tensors grow with its layers (8,637 for Llama-3.1-405B's
126; 64,100 for a config of 1,000 Llama layers, 424 ms). A stage of more than `MAX_REPLAYED_TENSORS` is replayed
several layers at a time (`fold_for`): each of a layer's tensors stands for the same tensor of `fold` layers, and the
layers' ramps move `fold` layers a step.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from app.core import states
from app.core.allocator import SMALL_BYTES, AllocatorKind, Block, CachingAllocator, OutOfMemory, round_size
from app.core.architecture import Architecture, layer_tensors
from app.core.gpus import Gpu
from app.core.ledger import Buffer
from app.core.setup import Parallelism
from app.core.stages import StageKind
from app.core.timeline import Life, Plan

# Within an event, these buffers are allocated in this order after all others: the order in which the loss runs
# (transformers' ForCausalLMLoss: the output layer's logits, their fp32 copy, log_softmax's output kept for
# backward; in backward nll_loss's gradient, then log_softmax's).
LAST_IN_ORDER: Final = ("activations.head", "loss.logits", "loss.logits_previous", "loss.upcast", "activations.loss",
                        "loss.grad_log_probs", "loss.grad_logits", "loss.grad_logits_half")
# A buffer that stands for the previous holder of another's place: the loop's logits of the step before stay alive
# until the new forward has made its own, so at that moment the new logits take a new block and the old block
# becomes the one freed after the event.
SUCCEEDS: Final = {"loss.logits_previous": "loss.logits"}
# How many of a layer's forward tensors are alive at once when it keeps none of them (recomputation): in the MLP,
# the gate projection, its activation and the up projection (measured on the storage log of a real-size
# forward: docs/VALIDATION.md, "Reserved memory").
WORKING_WINDOW: Final = 3
# The user's extra per GPU stands for memory outside the allocator, so it is not replayed.
OUTSIDE_KEY: Final = "overhead"
# The most tensors one replay makes before layers are folded together: about 30 ms of CPU, above every preset's
# stage (the most: 8,637 for Llama-3.1-405B) and every recorded run's, which are replayed layer by layer.
MAX_REPLAYED_TENSORS: Final = 12_000


@dataclass(frozen=True)
class Reserved:
    """What the allocator held: the most within each event, the most over the two steps, and where it ran out."""

    per_event: tuple[int, ...]
    max_bytes: int
    out_of_memory_at: int | None  # the index of the event where a request could not be met; None if none
    fold: int = 1  # layers replayed as one (`fold_for`); 1 for every stage of at most MAX_REPLAYED_TENSORS


def split(total: int, template: Sequence[int]) -> tuple[int, ...]:
    """`total` bytes in tensors proportional to `template` (the last takes the rounding), none empty."""
    weight = sum(template)
    if total <= 0:
        return ()
    if weight <= 0 or len(template) <= 1:
        return (total,)
    sizes = [total * part // weight for part in template[:-1]]
    sizes.append(total - sum(sizes))
    return tuple(size for size in sizes if size > 0)


def replay(ledger: Sequence[Buffer], steps: Plan, ramp_totals: Mapping[str, int], *,
           templates: Mapping[str, Sequence[int]], forward_transient: Sequence[int] = (),
           kind: AllocatorKind = "default", limit: int | None = None, preallocated: Sequence[int] = (),
           fold: int = 1) -> Reserved:
    """Replay the step's allocations; `templates` maps a buffer key to the relative
    sizes of its tensors (for a ramp, of one layer's); `forward_transient` is a layer's working set in forward
    when it keeps less than that (recomputation); `preallocated` are tensors live before the step (workspaces);
    `fold` layers move as one (`fold_for`), the templates made with the same `fold`."""
    with _no_collection():
        return _replay(ledger, steps, ramp_totals, templates, forward_transient, kind, limit, preallocated, fold)


@contextmanager
def _no_collection() -> Iterator[None]:
    """The garbage collector held off: a replay makes tens of thousands of linked blocks, each making a collection
    likelier, and a full collection walks the whole heap (10,000 layers: 57 ms of CPU in a fresh process, 82 ms
    once earlier requests had grown the heap, 52 ms held off). The blocks are collected young after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _replay(ledger: Sequence[Buffer], steps: Plan, ramp_totals: Mapping[str, int],
            templates: Mapping[str, Sequence[int]], forward_transient: Sequence[int], kind: AllocatorKind,
            limit: int | None, preallocated: Sequence[int], fold: int) -> Reserved:
    allocator = CachingAllocator(kind, limit=limit)
    events = steps.timeline
    ranks = {key: rank for rank, key in enumerate(LAST_IN_ORDER, start=1)}
    order = sorted(range(len(ledger)), key=lambda i: ranks.get(ledger[i].key, 0))
    index_of = {buffer.key: i for i, buffer in enumerate(ledger)}
    successors = {i: index_of[SUCCEEDS[buffer.key]] for i, buffer in enumerate(ledger)
                  if buffer.key in SUCCEEDS and SUCCEEDS[buffer.key] in index_of}
    held: list[list[list[Block]]] = [[] for _ in ledger]  # per buffer, per unit (layer), the handles
    folded = {ramp: _folded(total, fold) for ramp, total in ramp_totals.items()}
    counts = [_counts(buffer, steps, len(events), ramp_totals, folded) for buffer in ledger]
    units = [_units(buffer, folded, templates) for buffer in ledger]
    per_event: list[int] = []
    oom_at: int | None = None
    try:
        for size in preallocated:
            allocator.malloc(size)
        previous = [0] * len(ledger)
        for index in range(len(events)):
            allocator.max_reserved = allocator.reserved
            now = [count[index] for count in counts]
            _transition(allocator, ledger, order, successors, held, units, previous, now, forward_transient)
            previous = now
            per_event.append(allocator.max_reserved)
    except OutOfMemory:
        oom_at = len(per_event)
        per_event.append(allocator.limit or allocator.reserved)
    per_event += [per_event[-1]] * (len(events) - len(per_event))
    return Reserved(tuple(per_event), max(per_event), oom_at, fold)


def _folded(layers: int, fold: int) -> int:
    """How many units `layers` make, `fold` layers each (the last fewer)."""
    return -(-layers // fold)


def _counts(buffer: Buffer, steps: Plan, length: int, ramp_totals: Mapping[str, int] | None = None,
            folded: Mapping[str, int] | None = None) -> list[int]:
    """The buffer's units alive at each event: for a ramp of `layers` folded into `units`, the fewest units that
    hold the layers alive, in proportion (ceil(count × units / layers)): all of them with every layer."""
    counts = [0] * length
    ramp = buffer.life.ramp
    layers, units = ((ramp_totals[ramp], folded[ramp]) if ramp is not None and ramp_totals and folded
                     and folded[ramp] != ramp_totals[ramp] else (0, 0))
    for index, count in steps.alive_at(buffer.life):
        counts[index] = -(-count * units // layers) if layers else count
    return counts


def fold_for(ledger: Sequence[Buffer], steps: Plan, ramp_totals: Mapping[str, int],
             templates: Mapping[str, Sequence[int]]) -> int:
    """How many layers the replay moves as one, so that it makes at most about MAX_REPLAYED_TENSORS tensors: 1 for
    every stage at most that (`templates` made unfolded; small tensors counted unpacked, so it errs towards folding)."""
    made = 0
    for buffer in ledger:
        if buffer.key != OUTSIDE_KEY:
            made += _allocations(steps, buffer.life) * max(len(templates.get(buffer.key) or (1,)), 1)
    if made <= MAX_REPLAYED_TENSORS:
        return 1
    return min(-(-made // MAX_REPLAYED_TENSORS), max(1, *ramp_totals.values()))


def _allocations(steps: Plan, life: Life) -> int:
    """How many units of a buffer the steps allocate: each rise in the count alive, from none after a gap."""
    made = before = end = 0
    for start, stop, count in steps.runs(life):
        made += max(count - (before if start == end else 0), 0)
        before, end = count, stop
    return made


def _units(buffer: Buffer, ramp_totals: Mapping[str, int], templates: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    """The tensor sizes of one unit of the buffer: one layer of a ramp, or the whole buffer."""
    template = templates.get(buffer.key) or (1,)
    if buffer.life.ramp is None:
        return _pack_small(split(buffer.bytes, template))
    return _pack_small(split(buffer.bytes // max(ramp_totals[buffer.life.ramp], 1), template))


def _pack_small(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The small pool's tensors (at most 1 MiB: norms, biases) of one unit packed into pieces of at most 1 MiB, each
    where its first tensor stood: they share 2 MiB segments either way, and the replay takes fewer steps."""
    out: list[int] = []
    piece, at = 0, -1
    for size in sizes:
        if size > SMALL_BYTES:
            out.append(size)
            continue
        rounded = round_size(size)
        if at >= 0 and piece + rounded <= SMALL_BYTES:
            piece += rounded
            out[at] = piece
        else:
            piece, at = rounded, len(out)
            out.append(piece)
    return tuple(out)


def _transition(allocator: CachingAllocator, ledger: Sequence[Buffer], order: Sequence[int],
                successors: Mapping[int, int], held: list[list[list[Block]]], units: list[tuple[int, ...]],
                previous: list[int], now: list[int], forward_transient: Sequence[int]) -> None:
    ramps = [i for i, buffer in enumerate(ledger) if buffer.life.ramp is not None and previous[i] != now[i]]
    for i in order:
        if ledger[i].life.ramp is None and previous[i] and not now[i]:
            _free_units(allocator, held[i], len(held[i]))
    if ramps:
        # A ramp that starts from nothing or falls to nothing in one move is a whole pass's worth at once.
        layers = max(abs(now[i] - len(held[i])) for i in ramps)
        forward = any(now[i] > len(held[i]) and ledger[i].category == "activations" for i in ramps)
        for _ in range(layers):
            transient = _forward_working_set(allocator, forward_transient) if forward else []
            for i in ramps:
                if now[i] > len(held[i]):
                    held[i].append([allocator.malloc(size) for size in units[i]])
            for i in ramps:
                if now[i] < len(held[i]):
                    _free_units(allocator, held[i], 1)
            for handle in transient:
                allocator.free(handle)
    for i in order:
        if ledger[i].life.ramp is None and now[i] and not previous[i]:
            new = [allocator.malloc(size) for size in units[i]]
            successor = successors.get(i)
            if successor is not None and held[successor]:
                held[i].append(held[successor].pop())
                held[successor].append(new)
            else:
                held[i].append(new)


def _forward_working_set(allocator: CachingAllocator, tensors: Sequence[int]) -> list[Block]:
    """A layer's forward that keeps less than it makes: its tensors made in order, each freed once the next
    WORKING_WINDOW have been made (an operation's output outlives its input by an operation or two); returns
    the handles still held, freed after the layer's kept tensors are allocated."""
    live: list[Block] = []
    for size in tensors:
        live.append(allocator.malloc(size))
        if len(live) > WORKING_WINDOW:
            allocator.free(live.pop(0))
    return live


def _free_units(allocator: CachingAllocator, units: list[list[Block]], count: int) -> None:
    for _ in range(count):
        for handle in units.pop():
            allocator.free(handle)


@dataclass(frozen=True)
class StageReserve:
    """The reserve of the reported stage: the replay, what lives outside the allocator, and whether it fits."""

    reserved: Reserved
    outside_bytes: int  # the CUDA context, the communicators' buffers and the user's extra, per GPU
    out_of_memory: bool  # the replay ran out with the cache released, within the GPU's capacity


def _elements(shapes: Sequence[tuple[tuple[int, ...], int]], fold: int = 1) -> list[int]:
    """Each tensor's elements; a tensor repeated over layers, `fold` of them as one."""
    sizes = []
    for shape, repeats in shapes:
        count = 1
        for dim in shape:
            count *= dim
        pieces = _folded(repeats, fold)
        if pieces:
            sizes += [count * repeats // pieces] * pieces
    return sizes


def stage_templates(arch: Architecture, parallelism: Parallelism, kind: StageKind, ledger: Sequence[Buffer],
                    full_layer: Sequence[int], kept_layer: Sequence[int], fold: int = 1) -> dict[str, Sequence[int]]:
    """How each buffer of a stage splits into tensors: model states per parameter, a layer's gradients per
    parameter of a layer, a layer's activations per saved tensor, the recomputed layer as a whole layer's; a tensor
    repeated over layers, `fold` of them as one (a ramp's unit is scaled by the replay)."""
    dense = states.dense_layers_on(arch, first_layer=kind.first_layer - 1, layers=kind.layers, count=kind.count)
    shapes = states.stage_shapes(arch, parallelism.tensor, layers=kind.layers, first=kind.first, last=kind.last,
                                 dense=dense, expert_parallel=parallelism.expert,
                                 expert_tensor=parallelism.expert_tensor_degree)
    stage_shapes = shapes.rank_ep_shapes or shapes.rank_shapes
    per_param = _elements(stage_shapes, fold)
    one_layer = _elements(states.rank_shapes(((tensor, 1) for tensor in layer_tensors(arch)), parallelism.tensor))
    # The weights and the master copy are made before anything is freed, so a layer's parameters lie side by side
    # whether made one by one or at once: a piece per layer (the embedding and output layer on their own). The
    # optimizer step's scratch too, made and freed within the step (per parameter or per layer, the recorded runs'
    # reserved peaks agree within 1%, docs/VALIDATION.md); the optimizer's state stays per parameter, as it settles
    # into the holes the step before left.
    layered = sum(_elements([(shape, repeats) for shape, repeats in stage_shapes if repeats > 1]))
    pieces = _folded(kind.layers, fold)
    per_layer = [layered // pieces] * pieces if kind.layers and layered else []
    by_layer = per_layer + _elements([(shape, repeats) for shape, repeats in stage_shapes if repeats == 1])
    sizes = {buffer.key: buffer.bytes for buffer in ledger}
    reference = sizes.get("master_weights") or sizes.get("weights") or 1
    moments = min(2, max(1, round(sizes.get("optimizer_states", 0) / reference)))  # Adam's two, SGD's one
    return {"weights": by_layer, "master_weights": by_layer, "gradients": per_param, "optimizer.scratch": by_layer,
            "optimizer_states": per_param * moments, "gradients.layers": one_layer,
            "activations.layers": kept_layer, "recompute": full_layer}


def allocator_room(gpu: Gpu, extra_bytes: int) -> int:
    """What the allocator can reserve on `gpu`: its capacity less the CUDA context and `extra_bytes` (the user's
    extra and the communicators' buffers), which lie outside it."""
    return gpu.capacity_bytes - gpu.context_bytes - extra_bytes


def tensors_pass(gpu: Gpu, ledger_peak_bytes: int, extra_bytes: int, communicator_bytes: int = 0) -> bool:
    """Whether the tensors alone pass the allocator's room: out of memory whatever the allocator does, as its reserve
    holds at least its tensors (`ledger_peak_bytes` counts the user's extra as a buffer: it is taken off)."""
    return ledger_peak_bytes - extra_bytes > allocator_room(gpu, extra_bytes + communicator_bytes)


def stage_reserve(ledger: Sequence[Buffer], steps: Plan, ramp_totals: Mapping[str, int], *,
                  templates: Mapping[str, Sequence[int]], forward_transient: Sequence[int], kind: AllocatorKind,
                  gpu: Gpu | None, extra_bytes: int, ledger_peak_bytes: int,
                  communicator_bytes: int = 0, fold: int = 1, verdict_only: bool = False) -> StageReserve:
    """The replay within the allocator's room on a GPU, as the allocator releases its cache before it gives up. Until
    a request would pass the room it is the same replay as one without a limit, so where it never runs out it is the
    answer whether or not it had to release the cache; where it runs out, the replay without a limit says how far
    past the room the step goes. Where the tensors alone pass the room (`tensors_pass`), and with no GPU, the replay
    without a limit alone. With `verdict_only` only the verdict is asked for: a replay that runs out is not
    followed by one without a limit, and tensors that alone pass the room are out of memory with no replay at all."""
    replayed = [buffer for buffer in ledger if buffer.key != OUTSIDE_KEY]
    workspaces = (gpu.workspace_bytes,) if gpu is not None and gpu.workspace_bytes else ()
    args = {"templates": templates, "forward_transient": forward_transient, "kind": kind, "preallocated": workspaces,
            "fold": fold}
    if gpu is None:
        return StageReserve(replay(replayed, steps, ramp_totals, **args), extra_bytes, False)  # type: ignore[arg-type]
    outside = gpu.context_bytes + communicator_bytes + extra_bytes
    limit = allocator_room(gpu, extra_bytes + communicator_bytes)
    if tensors_pass(gpu, ledger_peak_bytes, extra_bytes, communicator_bytes):
        if verdict_only:
            return StageReserve(Reserved((), 0, 0, fold), outside, True)  # out of memory before anything is replayed
        free = replay(replayed, steps, ramp_totals, **args)  # type: ignore[arg-type]
        return StageReserve(free, outside, free.max_bytes > limit)
    bounded = replay(replayed, steps, ramp_totals, limit=max(limit, 0), **args)  # type: ignore[arg-type]
    if bounded.out_of_memory_at is None or verdict_only:
        return StageReserve(bounded, outside, bounded.out_of_memory_at is not None)
    return StageReserve(replay(replayed, steps, ramp_totals, **args), outside, True)  # type: ignore[arg-type]
