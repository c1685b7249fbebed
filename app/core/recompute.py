"""Which of a stage's layers full recomputation applies to: all of them, every k-th, or the first N.

Frameworks rarely recompute every layer by default:
* torchtitan's `selective_ac_option = "k"` (its default is "2") wraps every k-th transformer block in a checkpoint,
  counting the blocks it is handed from 1: block i is recomputed when i % k == 0, so with k = 2 the second, fourth,
  … and, with an even count, the top one (pytorch/torchtitan, torchtitan/distributed/activation_checkpoint.py at
  01db32e: `_apply_layer_sac`, a counter raised before `_layer_sac_count % ac_freq == 0` is tested; earlier
  releases kept the same count on `ptd_checkpoint_wrapper._count`).
* Megatron-LM's `--recompute-granularity full --recompute-method block --recompute-num-layers N` recomputes the
  first N layers of each pipeline stage and keeps everything of the rest (megatron/core/transformer/
  transformer_block.py, `_checkpointed_forward`, the `block` method).

A recomputed layer keeps its input; a kept layer keeps all it saves. In backward the layers run top down: a
recomputed layer rebuilds its tensors once the kept layers above it have freed theirs, so only the part of the rebuild
beyond what they freed adds to the top layer's backward (`rebuild_beyond_freed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ALL_LAYERS: Final = 1  # recompute_every's default: every layer
WHOLE_LAYERS: Final = ("full", "op")  # the policies that rebuild each recomputed layer in its backward


@dataclass(frozen=True)
class Recomputed:
    """A stage's layers under the policy: how many are recomputed, and the index (from 0, bottom up) of the highest."""

    layers: int
    count: int
    highest: int  # -1 when none is
    every: int = ALL_LAYERS
    first_layers: int | None = None

    @property
    def all(self) -> bool:
        return self.count == self.layers

    @property
    def partial(self) -> bool:
        return 0 < self.count < self.layers

    @property
    def top(self) -> bool:
        """Whether the stage's top layer, whose backward comes first, is recomputed."""
        return self.count > 0 and self.highest == self.layers - 1

    def among_first(self, positions: int) -> int:
        """How many of the stage's lowest `positions` layers are recomputed."""
        return recomputed_below(self, positions)

    def is_recomputed(self, index: int) -> bool:
        return recomputed_below(self, index + 1) > recomputed_below(self, index)


def stage_recomputed(checkpointing: str, layers: int, *, every: int = ALL_LAYERS,
                     first_layers: int | None = None) -> Recomputed:
    """The policy applied to a stage of `layers` layers (`checkpointing` other than full recomputes none whole)."""
    if checkpointing not in WHOLE_LAYERS or layers <= 0:
        return Recomputed(layers, 0, -1)
    if checkpointing == "op":  # every layer, its policy within each
        return Recomputed(layers, layers, layers - 1)
    if first_layers is not None:
        count = min(first_layers, layers)
        return Recomputed(layers, count, count - 1, every, first_layers)
    count = layers // every
    return Recomputed(layers, count, count * every - 1, every)


def recomputed_below(policy: Recomputed, positions: int) -> int:
    """How many of the layers at indices 0 .. positions - 1 the policy recomputes."""
    positions = max(0, min(positions, policy.layers))
    if policy.count == 0:
        return 0
    if policy.first_layers is not None:
        return min(positions, policy.count)
    return positions // policy.every


def recomputed_share(checkpointing: str, layers: int, *, every: int = ALL_LAYERS,
                     first_layers: int | None = None, stages: int = 1) -> float:
    """The share of the model's layers that full recomputation applies to, its `stages` pipeline stages even."""
    per_stage = max(1, layers // max(stages, 1))
    return stage_recomputed(checkpointing, per_stage, every=every, first_layers=first_layers).count / per_stage


def rebuild_beyond_freed(policy: Recomputed, rebuild_bytes: int, kept_layer_bytes: int) -> int:
    """What a recomputed layer's rebuild adds at the top layer's backward: all of it when the top layer is recomputed;
    otherwise what it exceeds the kept layers above the highest recomputed one, freed by then (0 when none is)."""
    if policy.count == 0:
        return 0
    above = policy.layers - 1 - policy.highest
    return max(0, rebuild_bytes - above * kept_layer_bytes)


def kept_layer_role(role: str) -> str:
    """The part a kept layer takes in backward when other layers are recomputed: with recomputation on, transformers
    makes the embedding's output need a gradient (PreTrainedModel.enable_input_require_grads, which
    gradient_checkpointing_enable calls for a model whose inputs need none), so the lowest trainable layer keeps
    what its input's gradient needs too (measured on CPU: docs/VALIDATION.md, "Recomputing some layers")."""
    return "full" if role == "bottom" else role


def describe(every: int, first_layers: int | None) -> str:
    """The policy in words, for the ledger's labels."""
    if first_layers is not None:
        return f"the first {first_layers} layers of each stage recomputed"
    if every > 1:
        return f"every {_ordinal(every)} layer recomputed"
    return "every layer recomputed"


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"
