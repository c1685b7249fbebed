"""The allocator's reserved memory through the two steps: the ledger's buffers as the tensors a step allocates and
frees, in order, replayed through the caching allocator (`app.core.allocator`).

Each buffer becomes tensors by a template of relative sizes: the model states one tensor per parameter (the stage's
parameter shapes), a layer's gradients one per parameter of a layer, a layer's saved activations the tensors the
layer keeps, the recomputed layer the tensors a full layer keeps; any other buffer is one tensor. Between two
events, buffers that end are freed first, then the layers' ramps move one layer at a time (in a layer's forward
under recomputation its working set is allocated and freed around what it keeps; in backward its gradients are
allocated before its activations are freed), then buffers that begin are allocated, in the ledger's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from app.core.allocator import AllocatorKind, CachingAllocator, OutOfMemory
from app.core.ledger import Buffer
from app.core.timeline import Plan

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


@dataclass(frozen=True)
class Reserved:
    """What the allocator held: the most within each event, the most over the two steps, and where it ran out."""

    per_event: tuple[int, ...]
    max_bytes: int
    out_of_memory_at: int | None  # the index of the event where a request could not be met; None if none


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
           kind: AllocatorKind = "default", limit: int | None = None, preallocated: Sequence[int] = ()) -> Reserved:
    """Replay the step's allocations; `templates` maps a buffer key (or its first dotted part) to the relative
    sizes of its tensors (for a ramp, of one layer's); `forward_transient` is a layer's working set in forward
    when it keeps less than that (recomputation); `preallocated` are tensors live before the step (workspaces)."""
    allocator = CachingAllocator(kind, limit=limit)
    events = steps.timeline
    ranks = {key: rank for rank, key in enumerate(LAST_IN_ORDER, start=1)}
    order = sorted(range(len(ledger)), key=lambda i: ranks.get(ledger[i].key, 0))
    index_of = {buffer.key: i for i, buffer in enumerate(ledger)}
    successors = {i: index_of[SUCCEEDS[buffer.key]] for i, buffer in enumerate(ledger)
                  if buffer.key in SUCCEEDS and SUCCEEDS[buffer.key] in index_of}
    held: list[list[list[int]]] = [[] for _ in ledger]  # per buffer, per unit (layer), the handles
    counts = [_counts(buffer, steps, len(events)) for buffer in ledger]
    units = [_units(buffer, ramp_totals, templates) for buffer in ledger]
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
    return Reserved(tuple(per_event), max(per_event), oom_at)


def _counts(buffer: Buffer, steps: Plan, length: int) -> list[int]:
    counts = [0] * length
    for index, count in steps.alive_at(buffer.life):
        counts[index] = count
    return counts


def _units(buffer: Buffer, ramp_totals: Mapping[str, int], templates: Mapping[str, Sequence[int]]) -> tuple[int, ...]:
    """The tensor sizes of one unit of the buffer: one layer of a ramp, or the whole buffer."""
    template = templates.get(buffer.key) or templates.get(buffer.key.split(".")[0]) or (1,)
    if buffer.life.ramp is None:
        return split(buffer.bytes, template)
    return split(buffer.bytes // max(ramp_totals[buffer.life.ramp], 1), template)


def _transition(allocator: CachingAllocator, ledger: Sequence[Buffer], order: Sequence[int],
                successors: Mapping[int, int], held: list[list[list[int]]], units: list[tuple[int, ...]],
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


def _forward_working_set(allocator: CachingAllocator, tensors: Sequence[int]) -> list[int]:
    """A layer's forward that keeps less than it makes: its tensors made in order, each freed once the next
    WORKING_WINDOW have been made (an operation's output outlives its input by an operation or two); returns
    the handles still held, freed after the layer's kept tensors are allocated."""
    live: list[int] = []
    for size in tensors:
        live.append(allocator.malloc(size))
        if len(live) > WORKING_WINDOW:
            allocator.free(live.pop(0))
    return live


def _free_units(allocator: CachingAllocator, units: list[list[int]], count: int) -> None:
    for _ in range(count):
        for handle in units.pop():
            allocator.free(handle)
