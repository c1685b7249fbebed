"""The ledger: every buffer of a training step on the most-loaded GPU of a stage, with its lifetime.

Each buffer has its category, a label, a formula written with the request's numbers, its bytes on
the most-loaded GPU and over the cluster, and when it is alive (`timeline.Life`). Per-category
sums, the explanation, the timeline and the peak are all read off this one list.

What lives when (one micro-batch; PyTorch's autograd frees what a node saved once the node has
run, and `zero_grad(set_to_none=True)` frees the gradients):

* weights, the master copy and the framework's overhead live for the whole run; the optimizer's
  state from the first `optimizer.step()` on (torch creates it lazily, torch/optim/adam.py
  ``_init_group``);
* activations: each layer's saved tensors from its forward to its backward; the loss's fp32
  log-probabilities until the loss's backward; the output layer's input until its backward;
* gradients appear as backward reaches each parameter and live until `zero_grad`, so they never
  coexist with the full activations of the first micro-batch (Megatron-LM keeps a persistent
  gradient buffer instead);
* around the loss: the logits, their fp32 upcast in forward, and two fp32 tokens × vocabulary
  gradients in backward (nll_loss's and log_softmax's);
* `optimizer.step()`'s own scratch (see `optimizers.OPTIMIZER_INFO`);
* under ZeRO-3 the layer being computed and the next (prefetched) are gathered whole in the
  16-bit dtype (Rajbhandari et al. 2019, section 5.3), and under ZeRO-2/3 a layer's unsharded
  gradient lives until it is reduce-scattered.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from app.core import activations as act
from app.core.architecture import Architecture
from app.core.contributors.backward import Backward
from app.core.contributors.base import (
    ACTS,
    DS_ZERO2,
    FORWARDED,
    GRADS,
    GRADS_DONE,
    Buffer,
    StageLedger,
    finetunes,
    fp8_layer_saved,
    moe_backward_modelled,
    stage_plan,
)
from app.core.contributors.bnb import Bitsandbytes
from app.core.contributors.experts import Experts
from app.core.contributors.fp8 import Fp8
from app.core.contributors.loss import Loss
from app.core.contributors.model_states import ModelStates
from app.core.contributors.saved import SavedTensors
from app.core.contributors.sharding import Sharding
from app.core.contributors.temporaries import Temporaries
from app.core.setup import (
    Parallelism,
    Training,
)
from app.core.stages import StageKind
from app.core.timeline import START, Life

# The ledger's public names, defined with the contributors' common ground.
__all__ = ["ACTS", "DS_ZERO2", "FORWARDED", "GRADS", "GRADS_DONE", "Buffer", "StageLedger", "finetunes",
           "fp8_layer_saved", "moe_backward_modelled", "stage_plan", "stage_ledger"]


class _Stage(ModelStates, Sharding, SavedTensors, Temporaries, Loss, Backward, Experts, Fp8, Bitsandbytes):
    """What one stage kind's buffers are computed from, and the ledger being written: every contributor's buffers,
    the temporaries in the order below."""

    def temporaries(self) -> None:
        self._context_chunks()
        self._dequantized()
        self._kept_4bit_inputs()
        self._kept_head_input()
        self._loss_buffers()
        self._dequantized_head()
        self._attention_backward()
        self._mlp_backward()
        self._moe_backward()
        self._wrapped_experts_backward()
        self._recomputation()
        self._autocast_copies()
        self._zero_buffers()
        self._expert_dispatch()
        self._fp8_casts()
        size = self.training.framework_overhead_bytes
        self.add("overhead", "temporary", "Framework overhead (CUDA context, allocator reserve)", "set by you",
                 size, self.per_stage(size), Life("run", START))


def stage_ledger(arch: Architecture, training: Training, parallelism: Parallelism, kind: StageKind,
                 setup: act.ActivationSetup, *, layer_saved: tuple[act.SavedTensor, ...] | None = None,
                 texts: bool = True) -> StageLedger:
    """Every buffer on the most-loaded GPU of a stage of this kind, and the stage's micro-batch events.

    `layer_saved` is what one layer saves without recomputation (`fp8_layer_saved` of it), if already worked out.
    With `texts` false the formulas leave out the model states' shares and notes: for a ledger whose bytes are
    only summed, never shown.
    """
    if layer_saved is None:
        layer_saved = fp8_layer_saved(arch, training, setup, act.layer_activations(arch, setup))
    stage = _Stage(arch, training, parallelism, kind, setup, layer_saved, texts=texts)
    # The model states' buffers depend on every input but the few that shape only the activations, the loss and the
    # step's order (STEP_ONLY), which a session changes most. They are kept per the rest: a field added to Training
    # is part of the key until it is named here, so the cache cannot answer for inputs it was not computed from.
    key = (arch, kind, parallelism, texts, replace(training, **_STEP_DEFAULTS))
    kept = _STATE_BUFFERS.get(key)
    if kept is None:
        stage.model_states()
        stage.host_gradients()
        stage.deepspeed_states()
        if len(_STATE_BUFFERS) >= _MAX_STATE_BUFFERS:
            _STATE_BUFFERS.clear()
        kept = _STATE_BUFFERS[key] = (tuple(stage.buffers), tuple(stage.host))
    else:
        stage.buffers.extend(kept[0])
        stage.host.extend(kept[1])
    stage.activations()
    stage.temporaries()
    return StageLedger(tuple(stage.buffers), stage.phases, tuple(stage.host))


# Training's fields the model states' buffers never read (tests/core/test_ledger_cache.py checks each).
STEP_ONLY: Final = ("micro_batch_size", "seq_len", "gradient_accumulation_steps", "attention",
                    "activation_checkpointing", "recompute_every", "recompute_first_layers", "compile",
                    "activation_offload", "activation_offload_layers", "loss", "loss_chunks", "loop", "allocator",
                    "framework_overhead_bytes")
_STEP_DEFAULTS: Final = {name: getattr(Training(), name) for name in STEP_ONLY}
_STATE_BUFFERS: dict[tuple, tuple[tuple[Buffer, ...], tuple[Buffer, ...]]] = {}
_MAX_STATE_BUFFERS: Final = 512
