"""The ledger's common ground: a buffer, the phases of a micro-batch, and the stage every contributor writes to
(its inputs, what it derives from them once, and `add`). Each contributor (app/core/contributors/) adds one concern's
buffers; app/core/ledger.py runs them in order."""

from __future__ import annotations

from dataclasses import replace
from typing import Final, NamedTuple

from app.core import activations as act
from app.core import states
from app.core.architecture import Architecture
from app.core.categories import MODEL_STATE_CATEGORIES
from app.core.families import family_of
from app.core.finetuning import targets_mlp
from app.core.recompute import stage_recomputed
from app.core.setup import (
    FP8_RECIPES,
    OFFLOADS,
    Parallelism,
    Training,
    fsdp2_convention,
)
from app.core.stages import StageKind
from app.core.timeline import STEP_PHASE_NAMES, Life, Phase, Plan, describe, plan

# DeepSpeed 0.19.8's estimators, whose convention `training.framework: deepspeed` follows.
DS_ZERO2: Final = "deepspeed/runtime/zero/stage_1_and_2.py"
DS_ZERO3: Final = "deepspeed/runtime/zero/stage3.py"

# PyTorch 2.13's FSDP2 (torch/distributed/fsdp/_fully_shard/), whose convention `training.framework: fsdp2` follows.
FSDP2_PARAM: Final = "torch/distributed/fsdp/_fully_shard/_fsdp_param.py"
FSDP2_GROUP: Final = "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py"
FSDP2_COLLECTIVES: Final = "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py"
FSDP2_STATE: Final = "torch/distributed/fsdp/_fully_shard/_fsdp_state.py"
# Megatron-LM's distributed optimizer: its byte counts per parameter (docs/source/api-guide/dist_optimizer.md).
MEGATRON_DIST_OPT: Final = "Megatron-LM docs/source/api-guide/dist_optimizer.md"
# NVIDIA Transformer Engine 2.20's modules, whose FP8 recipes `training.fp8` te-* follow as Megatron-LM runs them.
TE_MODULE: Final = "transformer_engine/pytorch/module"

# Phase ids of one micro-batch.
FWD_EMBEDDING: Final = "fwd.embedding"
FWD_LAYER_FIRST: Final = "fwd.layer_first"
FWD_LAYER_LAST: Final = "fwd.layer_last"
FWD_LOSS: Final = "fwd.loss"
BWD_LOSS: Final = "bwd.loss"
BWD_HEAD: Final = "bwd.head"
BWD_LAYER_LAST: Final = "bwd.layer_last"
BWD_LAYER_FIRST: Final = "bwd.layer_first"
BWD_EMBEDDING: Final = "bwd.embedding"

ACTS: Final = "acts"  # layers whose saved tensors are alive
FORWARDED: Final = "forwarded"  # layers run forward in this micro-batch
GRADS: Final = "grads"  # layers whose gradients exist
GRADS_DONE: Final = "grads_done"  # layers whose backward has ended (gradients all written)


class Buffer(NamedTuple):
    key: str
    category: str
    label: str
    formula: str
    bytes: int  # on the most-loaded GPU of the stage
    cluster_bytes: int  # over every GPU of the stages of this kind
    life: Life
    names: dict[str, str]  # phase id -> name, for the words below

    @property
    def when(self) -> tuple[str, str]:
        """When the buffer is allocated and after which event it is freed, in words."""
        return describe(self.life, self.names)

    @property
    def allocated(self) -> str:
        """When the buffer is allocated, in words."""
        return describe(self.life, self.names)[0]

    @property
    def freed(self) -> str:
        """After which event it is freed, in words."""
        return describe(self.life, self.names)[1]


class StageLedger(NamedTuple):
    buffers: tuple[Buffer, ...]  # in GPU memory
    phases: tuple[Phase, ...]
    host: tuple[Buffer, ...] = ()  # in host memory (offloading)


def stage_phases(kind: StageKind) -> tuple[Phase, ...]:
    """The events of one micro-batch on a stage of this kind, with the layer counts at each."""
    n, low = kind.layers, kind.first_layer
    high = low + n - 1
    phases = []
    if kind.first:
        phases.append(Phase(FWD_EMBEDDING, "forward: embedding", {ACTS: 0, FORWARDED: 0}))
    phases.append(Phase(FWD_LAYER_FIRST, f"forward: layer {low}", {ACTS: 1, FORWARDED: 1}))
    if n > 1:
        phases.append(Phase(FWD_LAYER_LAST, f"forward: layer {high}", {ACTS: n, FORWARDED: n}))
    if kind.last:
        phases += [
            Phase(FWD_LOSS, "forward: loss", {ACTS: n, FORWARDED: n}),
            Phase(BWD_LOSS, "backward: loss gradients", {ACTS: n}),
            Phase(BWD_HEAD, "backward: output layer", {ACTS: n}),
        ]
    phases.append(Phase(BWD_LAYER_LAST, f"backward: layer {high}", {ACTS: n, GRADS: 1, GRADS_DONE: 0}))
    if n > 1:
        phases.append(Phase(BWD_LAYER_FIRST, f"backward: layer {low}", {ACTS: 1, GRADS: n, GRADS_DONE: n - 1}))
    if kind.first:
        phases.append(Phase(BWD_EMBEDDING, "backward: embedding", {ACTS: 0, GRADS: n, GRADS_DONE: n}))
    return tuple(phases)


def fp8_layer_saved(arch: Architecture, training: Training, setup: act.ActivationSetup,
                    layer_saved: tuple[act.SavedTensor, ...]) -> tuple[act.SavedTensor, ...]:
    """What one layer saves: Transformer Engine's FP8 recipes save FP8 copies of the linear layers' inputs
    (`act.megatron_fp8_layer`); every other choice saves `layer_saved`."""
    te = FP8_RECIPES[training.fp8].transformer_engine
    if te is None:
        return layer_saved
    return act.megatron_fp8_layer(arch, setup, block=te.block, proj_saves_original=te.proj_saves_original)


# A stage's events and their names depend only on its layout (how many layers, the first of them, whether it holds
# the embedding or the loss): worked out once per layout and shared, read-only, by every estimate with that layout.
_LAYOUTS: dict[tuple[int, int, bool, bool], tuple[tuple[Phase, ...], dict[str, str]]] = {}
_MAX_LAYOUTS: Final = 512

# Plain training of every weight, as `Training` defaults to it.
NO_FINETUNING: Final = Training().finetuning


def finetunes(training: Training) -> bool:
    """Whether the setup fine-tunes (adapters, or frozen parts) rather than training every weight."""
    return training.finetuning is not NO_FINETUNING and training.finetuning != NO_FINETUNING


def _layout(kind: StageKind) -> tuple[tuple[Phase, ...], dict[str, str]]:
    """The stage's events (`stage_phases`) and phase id -> name, the step-level events included."""
    key = (kind.layers, kind.first_layer, kind.first, kind.last)
    found = _LAYOUTS.get(key)
    if found is None:
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        phases = stage_phases(kind)
        found = _LAYOUTS[key] = (phases, {phase.id: phase.name for phase in phases} | STEP_PHASE_NAMES)
    return found


_STAGE_PLANS: dict[tuple[int, int, bool, bool, int], Plan] = {}


def stage_plan(kind: StageKind, *, micro_batches: int) -> Plan:
    """The events of two steps on a stage of this kind (`timeline.plan`): from the second micro-batch on, the
    gradients of all its layers exist. Depends on the layout and the micro-batches alone (worked out once)."""
    key = (kind.layers, kind.first_layer, kind.first, kind.last, min(micro_batches, 2))
    found = _STAGE_PLANS.get(key)
    if found is None:
        if len(_STAGE_PLANS) >= _MAX_LAYOUTS:
            _STAGE_PLANS.clear()
        found = _STAGE_PLANS[key] = plan(_layout(kind)[0], micro_batches=micro_batches, carried={GRADS: kind.layers, GRADS_DONE: kind.layers})
    return found


def deepspeed_convention(training: Training, parallelism: Parallelism) -> bool:
    """Whether DeepSpeed's own convention counts the model states (setup.FRAMEWORKS); ZeRO stage 0 is plain data
    parallelism."""
    return training.framework == "deepspeed" and parallelism.zero_stage >= 1


def _backward_measured_layout(training: Training, parallelism: Parallelism, setup: act.ActivationSetup) -> bool:
    """What the layer-backward working sets below were measured under: Hugging Face's modules without autocast or
    FP8, one tensor-parallel and one context-parallel rank, gradients unsharded and in PyTorch's own convention."""
    p = parallelism
    return (setup.implementation == "transformers" and not setup.autocast and training.fp8 == "none"
            and p.tensor == 1 and p.context == 1 and p.zero_stage < 2 and not fsdp2_convention(training, p)
            and not deepspeed_convention(training, p))


def mlp_backward_modelled(arch: Architecture, training: Training, parallelism: Parallelism,
                          setup: act.ActivationSetup) -> bool:
    """Whether a layer's backward working set beyond its saved tensors (`_Stage._mlp_backward`) is measured for this
    setup: a gated MLP or GPT-2's in Hugging Face's modules, pre-norm layers or OLMo 2's and Gemma 3's, no autocast, no mixture
    of experts or latent attention, a fused attention kernel, gradients unsharded, and with adapters LoRA on the
    attention only."""
    ft = training.finetuning
    full = not finetunes(training)
    post_norm = arch.norm_placement != "pre" or arch.norms_per_layer != 2
    olmo2 = arch.norm_placement == "post" and arch.norms_per_layer == 2  # a norm after each block, none before
    gemma3 = family_of(arch).sandwich_norms  # norms before and after each block (GLM-4's gate_up fused: measured)
    gpt2 = family_of(arch).ungated_backward_measured and full and not (arch.dropout or arch.attn_dropout)  # no gate
    return _backward_measured_layout(training, parallelism, setup) and not (
        arch.is_moe or arch.is_mla or (not arch.is_gated and not gpt2) or (arch.fused_gate_up and not gemma3)
        or (post_norm and full and not (olmo2 or gemma3))
        or (not full and (ft.method != "lora" or targets_mlp(arch, ft)))
        or act.attention_kernel(arch, setup) in ("eager", "math"))


def moe_backward_modelled(arch: Architecture, training: Training, parallelism: Parallelism,
                          setup: act.ActivationSetup) -> bool:
    """Whether a mixture-of-experts layer's backward working set (`_Stage._moe_backward`) is measured for this setup:
    Mixtral's or Qwen3-MoE's block in Hugging Face's modules, trained in full or with LoRA on the attention, a fused
    attention kernel; or gpt-oss's, trained in full, its attention eager; in half precision without autocast, one
    GPU's worth of experts and unsharded gradients, one micro-batch a step."""
    ft = training.finetuning
    if not (_backward_measured_layout(training, parallelism, setup) and parallelism.expert == 1 and arch.is_moe
            and setup.half_bytes < act.FP32_BYTES and training.gradient_accumulation_steps == 1):
        return False
    kernel = act.attention_kernel(arch, setup)
    if family_of(arch).backward_by_moment:  # trained in full, its attention eager (`_Stage._gpt_oss_backward`)
        return not finetunes(training) and kernel == "eager"
    return (family_of(arch).moe_backward_measured and not arch.is_mla
            and not arch.n_shared_experts and not arch.shared_expert_gate
            and (not finetunes(training) or (ft.method == "lora" and not ft.frozen_layers and not targets_mlp(arch, ft)))
            and kernel not in ("eager", "math"))


class StageBase:
    """What one stage kind's buffers are computed from, and the ledger being written."""

    def __init__(self, arch: Architecture, training: Training, parallelism: Parallelism, kind: StageKind,
                 setup: act.ActivationSetup, layer_saved: tuple[act.SavedTensor, ...], *, texts: bool = True) -> None:
        self.arch, self.training, self.parallelism, self.kind, self.setup = arch, training, parallelism, kind, setup
        # Without texts the shares of the model states and their notes are left out of the formulas, for a stage whose
        # ledger is only summed (a middle pipeline stage, never the most loaded).
        self.texts = texts
        self.layer_saved = layer_saved  # what one layer saves without recomputation (`fp8_layer_saved` applied)
        # gpt-oss's layer backward, counted moment by moment with the layer's own gradients (`_gpt_oss_backward`)
        self.gradients_after_layer = (family_of(arch).backward_by_moment
                                      and moe_backward_modelled(arch, training, parallelism, setup))
        self.phases, self.names = _layout(kind)
        self.recomputed = stage_recomputed(training.activation_checkpointing, kind.layers,
                                           every=training.recompute_every, first_layers=training.recompute_first_layers)
        # The policy this stage's layers follow: full recomputation of none of them (a stage of fewer than k layers
        # when every k-th is recomputed) keeps everything
        self.checkpointing: act.Checkpointing = ("none" if training.activation_checkpointing == "full"
                                                 and not self.recomputed.count else training.activation_checkpointing)
        n = kind.layers
        self.fwd_end = FWD_LAYER_LAST if n > 1 else FWD_LAYER_FIRST
        self.bwd_end = BWD_LAYER_FIRST if n > 1 else BWD_LAYER_LAST
        self.buffers: list[Buffer] = []
        self.host: list[Buffer] = []  # what offloading keeps in host memory instead (setup.OFFLOADS)
        offload = OFFLOADS[parallelism.offload]
        self.offload_optimizer = offload.optimizer
        self.host_keys: set[str] = set()
        if offload.optimizer:
            self.host_keys |= {"optimizer_states", "master_weights", "optimizer.scratch"}
        if offload.parameters:
            self.host_keys.add("weights")
        # ZeRO-2/3 with offload: each gradient partition is copied to the host as it is reduced; the GPU keeps
        # only the layer's unsharded gradient until then (DeepSpeed stage_1_and_2.py, cpu_offload: async copy of
        # the reduced partition into single_partition_of_fp32_groups' .grad).
        self.gradients_leave = offload.optimizer and parallelism.zero_stage >= 2
        self.ranks = parallelism.tensor * parallelism.data * parallelism.context  # GPUs of one stage
        self.deepspeed = deepspeed_convention(training, parallelism)
        # FSDP2 keeps each parameter sharded in its own dtype, the master copy when the precision keeps one, and
        # its sharded gradient in that dtype too (setup.FRAMEWORKS); model states are counted in that precision.
        self.fsdp2 = fsdp2_convention(training, parallelism)
        self.states_precision = training.precision
        if self.fsdp2 and training.precision.master_weights:
            master = training.precision.master_weights
            self.states_precision = replace(training.precision, weights=master, gradients=master, master_weights=None)
        self.dense = states.dense_layers_on(arch, first_layer=kind.first_layer - 1, layers=n, count=kind.count)
        self.shapes = states.stage_shapes(arch, parallelism.tensor, layers=n, first=kind.first, last=kind.last,
                                          dense=self.dense, expert_parallel=parallelism.expert,
                                          expert_tensor=parallelism.expert_tensor_degree)
        self.parts = self.shapes.rank
        self.finetuned = None
        if finetunes(training):
            self.finetuned = states.finetuned_stage(arch, training.finetuning, training.precision.bits("weights"),
                                                    parallelism.tensor, layers=n, first=kind.first, last=kind.last,
                                                    first_layer=kind.first_layer - 1,
                                                    quantized_head=training.quantizes_output_layer)

    def add(self, key: str, category: str, label: str, formula: str, size: int, cluster: int, life: Life) -> None:
        if self.deepspeed and self.texts and category in MODEL_STATE_CATEGORIES and not key.startswith("deepspeed."):
            formula += f" [DeepSpeed convention: {self._deepspeed_source()}]"
        if key == "optimizer.scratch" and self.offload_optimizer:
            return  # DeepSpeedCPUAdam updates in place in its C++ kernel (deepspeed/ops/csrc/adam/cpu_adam_impl.cpp)
        if key in self.host_keys:
            self.host.append(Buffer(key, category, label + " (in host memory)", formula, size, cluster, life, self.names))
        elif self.gradients_leave and key.startswith("gradients."):
            return  # streamed to the host partition (host_gradients)
        else:
            # A plain tuple of the NamedTuple's class: the same object without a Python-level __new__.
            self.buffers.append(tuple.__new__(Buffer, (key, category, label, formula, size, cluster, life, self.names)))

    def per_stage(self, size: int) -> int:
        """Cluster bytes of a buffer every GPU of every stage of this kind holds once."""
        return size * self.ranks * self.kind.count

    def _deepspeed_source(self) -> str:
        """Where DeepSpeed's estimator counts this stage's model states."""
        if self.parallelism.zero_stage >= 3:
            return f"{DS_ZERO3}:4027-4046, estimate_zero3_model_states_mem_needs"
        return f"{DS_ZERO2}:4024-4031, estimate_zero2_model_states_mem_needs"

    def _layer_gradient_bytes(self) -> int:
        """One layer's gradients on this GPU (the `gradients.layers` line over the stage's layers; 0 without it)."""
        return next((b.bytes for b in self.buffers if b.key == "gradients.layers"), 0) // max(1, self.kind.layers)


def _ceil_text(elements: str, divisor: int) -> str:
    """`elements` split over `divisor` parts, rounded up, as its formula (unchanged when not split)."""
    return f"⌈{elements} ÷ {divisor}⌉" if divisor > 1 else elements


def _next_power_of_2(value: int) -> int:
    return 1 << (value - 1).bit_length()


def _group_words(p: Parallelism) -> str:
    return "data-parallel group" if p.context == 1 else f"data × context-parallel group ({p.data} × {p.context})"


def _listed(items: tuple[act.SavedTensor, ...]) -> str:
    """The tensors and their bytes, e.g. ``embed.token_ids 32,768 B + rope.cos_sin 2,097,152 B``."""
    if not items:
        return "0"
    return " + ".join(f"{item.name} {item.bytes:,} B" for item in items)
