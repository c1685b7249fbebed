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
from typing import Final, NamedTuple

from app.core import activations as act
from app.core import states
from app.core.architecture import Architecture, layer_tensors
from app.core.categories import MODEL_STATE_CATEGORIES
from app.core.finetuning import experts_wrapped, head_trains, layer_roles, linear_modules, targets_mlp
from app.core.optimizers import FP32_BITS, OPTIMIZER_INFO, optimizer_formula, optimizer_label
from app.core.setup import (
    FP8_RECIPES,
    LOOPS,
    OFFLOADS,
    Parallelism,
    Training,
    TransformerEngineFp8,
    effective_loop,
    fsdp2_convention,
)
from app.core.stages import StageKind
from app.core.timeline import OPTIMIZER_STEP, START, STEP_PHASE_NAMES, Life, Phase, Plan, describe, plan
from app.core.units import ceil_div, tensor_bytes

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
    gemma3 = arch.model_type == "gemma3_text"  # norms before and after each block
    gpt2 = arch.model_type == "gpt2" and full and not (arch.dropout or arch.attn_dropout)  # its MLP has no gate
    return _backward_measured_layout(training, parallelism, setup) and not (
        arch.is_moe or arch.is_mla or (not arch.is_gated and not gpt2) or arch.fused_gate_up
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
    if arch.model_type == "gpt_oss":  # trained in full, its attention eager (`_Stage._gpt_oss_backward`)
        return not finetunes(training) and kernel == "eager"
    return (arch.model_type in (None, "mixtral", "qwen3_moe") and not arch.is_mla
            and not arch.n_shared_experts and not arch.shared_expert_gate
            and (not finetunes(training) or (ft.method == "lora" and not ft.frozen_layers and not targets_mlp(arch, ft)))
            and kernel not in ("eager", "math"))


class _Stage:
    """What one stage kind's buffers are computed from, and the ledger being written."""

    def __init__(self, arch: Architecture, training: Training, parallelism: Parallelism, kind: StageKind,
                 setup: act.ActivationSetup, layer_saved: tuple[act.SavedTensor, ...], *, texts: bool = True) -> None:
        self.arch, self.training, self.parallelism, self.kind, self.setup = arch, training, parallelism, kind, setup
        # Without texts the shares of the model states and their notes are left out of the formulas, for a stage whose
        # ledger is only summed (a middle pipeline stage, never the most loaded).
        self.texts = texts
        self.layer_saved = layer_saved  # what one layer saves without recomputation (`fp8_layer_saved` applied)
        # gpt-oss's layer backward, counted moment by moment with the layer's own gradients (`_gpt_oss_backward`)
        self.gradients_after_layer = (arch.model_type == "gpt_oss"
                                      and moe_backward_modelled(arch, training, parallelism, setup))
        self.phases, self.names = _layout(kind)
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
                                                    first_layer=kind.first_layer - 1)

    # --- writing ---------------------------------------------------------------------------------

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

    def host_gradients(self) -> None:
        """Offloaded optimizers update on the CPU from an fp32 copy of this rank's gradient partition."""
        if not OFFLOADS[self.parallelism.offload].optimizer:
            return
        p = self.parallelism
        params = self.finetuned.trainable_rank if self.finetuned is not None else self.shapes.rank_total
        cluster = self.finetuned.trainable_cluster if self.finetuned is not None else self.shapes.cluster_total
        rank = ceil_div(params, p.shard_group)
        size = tensor_bytes(rank, FP32_BITS)
        self.host.append(Buffer("offload.fp32_gradients", "gradients", "fp32 gradient partition for the CPU optimizer "
                                "(in host memory)", f"{params:,} params ÷ {p.shard_group} × 32 bit ÷ 8", size,
                                tensor_bytes(cluster, FP32_BITS) * self.kind.count, Life("run", START), self.names))

    def _deepspeed_source(self) -> str:
        """Where DeepSpeed's estimator counts this stage's model states."""
        if self.parallelism.zero_stage >= 3:
            return f"{DS_ZERO3}:4027-4046, estimate_zero3_model_states_mem_needs"
        return f"{DS_ZERO2}:4024-4031, estimate_zero2_model_states_mem_needs"

    def deepspeed_states(self) -> None:
        """The buffers DeepSpeed keeps beyond the ZeRO paper's model states, as its estimators count them.

        Without optimizer offload its optimizer steps from an fp32 copy of this rank's gradient partition, made in
        step() and dropped after it (stage_1_and_2.py:3118-3126 and 3141; stage3.py:2686-2693): the 4_grads_32bit
        of ``2 + 18 × P ÷ N`` (stage_1_and_2.py:4029-4031) and of ``4 × largest + 18 × P ÷ N`` (stage3.py:4046).
        With offload that copy lives in host memory (`host_gradients`). Under ZeRO-3 the largest layer's 16-bit
        parameters and gradients are gathered whole: ``largest_layer_memory = 4 × largest_layer_params``
        (stage3.py:4027), with or without offload (4031, 4039).
        """
        if not self.deepspeed:
            return
        p, precision = self.parallelism, self.training.precision
        if not OFFLOADS[p.offload].optimizer:
            params = self.finetuned.trainable_rank if self.finetuned is not None else self.shapes.rank_total
            cluster = self.finetuned.trainable_cluster if self.finetuned is not None else self.shapes.cluster_total
            size = tensor_bytes(ceil_div(params, p.shard_group), FP32_BITS)
            source = (f"{DS_ZERO3}:2686-2693" if p.zero_stage >= 3 else f"{DS_ZERO2}:3118-3126") + \
                f", counted as 4_grads_32bit in {self._deepspeed_source()}"
            self.add("deepspeed.fp32_grad_partition", "gradients", "fp32 copy of this rank's gradient partition for "
                     "the optimizer step (DeepSpeed)", f"{params:,} params ÷ {p.shard_group} × 32 bit ÷ 8 — DeepSpeed "
                     f"convention, {source}", size, tensor_bytes(cluster, FP32_BITS) * self.kind.count,
                     Life("step", OPTIMIZER_STEP, OPTIMIZER_STEP))
        self._deepspeed_bucket()
        if p.zero_stage < 3:
            return
        largest = states.largest_module(self.arch, p.tensor, first=self.kind.first, last=self.kind.last)
        source = f"largest_layer_memory = 4 × largest_layer_params, {DS_ZERO3}:4027"
        first_backward = next(phase.id for phase in self.phases if phase.id.startswith("bwd."))
        for key, category, what, bits, life in (
            ("deepspeed.largest_layer_params", "weights", "parameters", precision.bits("weights"),
             Life("micro-batch", self.phases[0].id, self.phases[-1].id)),
            ("deepspeed.largest_layer_grads", "gradients", "gradients", precision.bits("gradients"),
             Life("micro-batch", first_backward, self.phases[-1].id)),
        ):
            size = tensor_bytes(largest, bits)
            self.add(key, category, f"The largest layer's {what} gathered whole (DeepSpeed ZeRO-3)",
                     f"{largest:,} params × {bits} bit ÷ 8 — DeepSpeed convention, {source}", size,
                     self.per_stage(size), life)

    def _deepspeed_bucket(self) -> None:
        """DeepSpeed's contiguous gradient bucket (contiguous_gradients, on by default): reduce_bucket_size elements
        in the gradients' dtype, whatever the model's size. ZeRO-1/2 allocate it at the first gradient of backward
        and release it when backward ends (stage_1_and_2.py:3266, setup_buckets; 1061, in
        independent_gradient_partition_epilogue); ZeRO-3 allocates it once, after the optimizer's state, for the
        whole run (stage3.py:780-784). With overlap_comm, ZeRO-1/2 keep a second one (3275); it is off by default
        for them (config.py:384-386) and not counted."""
        p, precision = self.parallelism, self.training.precision
        elements = p.reduce_bucket_size
        bits = precision.bits("gradients")
        size = tensor_bytes(elements, bits)
        if p.zero_stage >= 3:
            source, life = f"{DS_ZERO3}:780-784", Life("run", START)
        else:
            first_backward = next(phase.id for phase in self.phases if phase.id.startswith("bwd."))
            source = f"{DS_ZERO2}:3266, setup_buckets; released at 1061"
            life = Life("micro-batch", first_backward, self.phases[-1].id)
        self.add("deepspeed.reduce_bucket", "gradients", f"Contiguous gradient bucket of reduce_bucket_size elements "
                 f"in {precision.gradients} (DeepSpeed)", f"{elements:,} × {bits} bit ÷ 8 — DeepSpeed convention, "
                 f"{source}", size, self.per_stage(size), life)

    def per_stage(self, size: int) -> int:
        """Cluster bytes of a buffer every GPU of every stage of this kind holds once."""
        return size * self.ranks * self.kind.count

    # --- model states ------------------------------------------------------------------------------

    def _share_text(self, part_names: tuple[str, ...]) -> tuple[int, str]:
        """Elements on the most-loaded rank for these parts, and how they add up."""
        if not self.texts:
            return sum(self.parts[name] for name in part_names if name in self.parts), ""
        terms, total = [], 0
        for name in part_names:
            if name not in self.parts:
                continue
            total += self.parts[name]
            if name == "layers" and self.shapes.dense_layers:
                shapes = self.shapes
                terms.append(f"{self.kind.layers - shapes.dense_layers} layers × {shapes.sparse_layer_rank:,} + "
                             f"{shapes.dense_layers} dense layers × {shapes.dense_layer_rank:,}")
            elif name == "layers":
                terms.append(f"{self.kind.layers} layers × {self.shapes.layer_rank:,}")
            else:
                terms.append(f"{name} {self.parts[name]:,}")
        text = f"{total:,} params"
        if len(terms) > 1 or self.kind.layers > 1 and terms:
            text = f"({' + '.join(terms)}) = {text}"
        t = self.parallelism.tensor
        if t > 1:
            text += f" on tensor rank 1 of {t}"
        return total, text

    def _expert_note(self, category: str) -> str:
        p = self.parallelism
        if not self.texts or not p.experts_apart or states.is_sharded(category, p):
            return ""
        notes = []
        if p.expert > 1:
            notes.append(f"the routed experts ÷ {p.expert} (expert parallelism)")
        if p.expert_tensor_degree != p.tensor:
            notes.append(f"each expert's matrices ÷ {p.expert_tensor_degree} rather than ÷ {p.tensor} "
                         "(expert tensor parallelism)")
        return ", " + ", ".join(notes)

    def _shard_note(self, category: str) -> str:
        p = self.parallelism
        if self.texts and states.is_sharded(category, p) and p.shard_group > 1:
            return f" ÷ {p.shard_group} (ZeRO-{p.zero_stage} over the {_group_words(p)})"
        return ""

    def model_states(self) -> None:
        if self.finetuned is not None:
            self._finetuned_states()
            return
        p, shapes = self.parallelism, self.shapes
        precision = self.states_precision
        training = self.training if precision is self.training.precision else replace(self.training, precision=precision)
        rank = states.states_bytes(list(shapes.rank_shapes), training, count=shapes.rank_total)
        cluster = states.states_bytes(list(shapes.cluster_shapes), training, count=shapes.cluster_total)
        rank_ep, cluster_ep = rank, cluster
        if p.experts_apart:  # what is not ZeRO-sharded holds only this GPU's share of the experts (states.StageShapes)
            rank_ep = states.states_bytes(list(shapes.rank_ep_shapes), training, count=shapes.rank_ep_total)
            cluster_ep = states.states_bytes(list(shapes.cluster_ep_shapes), training,
                                             count=sum(shapes.cluster_ep.values()))
        _, share = self._share_text(("layers", "embedding", "head"))
        always = Life("run", START)

        def state(category: str, label: str, formula: str, life: Life) -> None:
            sharded = states.is_sharded(category, p)
            self.add(category, category, label, formula + self._shard_note(category) + self._expert_note(category),
                     states.on_rank(rank[category], category, p) if sharded else rank_ep[category],
                     states.over_group((cluster if sharded else cluster_ep)[category], category, p) * self.kind.count,
                     life)

        if self.fsdp2 and precision is not self.training.precision:
            state("weights", f"Sharded parameters in {precision.weights}, the master copy (FSDP2 casts to "
                  f"{self.training.precision.weights} as it gathers)", f"{share} × {precision.bits('weights')} bit ÷ 8 "
                  f"[FSDP2 convention: {FSDP2_PARAM}, FSDPParam._init_sharded_param keeps the parameter's dtype; "
                  "MixedPrecisionPolicy.param_dtype applies to the all-gather]", always)
        else:
            state("weights", f"Weights in {precision.weights}", f"{share} × {precision.bits('weights')} bit ÷ 8", always)
        if precision.master_weights:
            state("master_weights", f"Master copy in {precision.master_weights}",
                  f"{share} × {precision.bits('master_weights')} bit ÷ 8", always)
        bits = precision.bits("optimizer_states")
        state("optimizer_states", optimizer_label(training.optimizer, adafactor_momentum=training.adafactor_momentum),
              optimizer_formula(training.optimizer, share=share, bits=bits, adafactor_momentum=training.adafactor_momentum),
              Life("run", OPTIMIZER_STEP))
        self._gradients(precision.bits("gradients"))
        self._megatron_main_grads()
        self._optimizer_scratch(bits)

    def _megatron_main_grads(self) -> None:
        """Megatron-LM's optimizer steps from fp32 main gradients: with a gradient buffer narrower than fp32 it
        keeps an fp32 copy, sharded like the optimizer state by its distributed optimizer (4 + 16/d bytes per
        parameter for fp16 parameters and gradients, 20 without sharding; MEGATRON_DIST_OPT)."""
        training, p = self.training, self.parallelism
        if training.framework != "megatron" or training.precision.bits("gradients") >= FP32_BITS:
            return
        elements, share = self._share_text(("layers", "embedding", "head"))
        size = states.on_rank(tensor_bytes(elements, FP32_BITS), "optimizer_states", p)
        cluster = states.over_group(tensor_bytes(self.shapes.cluster_total, FP32_BITS), "optimizer_states", p)
        self.add("megatron.fp32_main_grads", "gradients", "fp32 main gradients the optimizer steps from (Megatron-LM)",
                 f"{share} × 32 bit ÷ 8{self._shard_note('optimizer_states')} — Megatron-LM convention, "
                 f"{MEGATRON_DIST_OPT}", size, cluster * self.kind.count, Life("step", OPTIMIZER_STEP, OPTIMIZER_STEP))

    def _gradient_lives(self) -> dict[str, tuple[str, Life]]:
        head_from = BWD_LAYER_LAST if self.setup.autocast else BWD_HEAD
        if self.fsdp2:
            # FSDP2 writes a sharded gradient only when its group is reduce-scattered: a layer's after its
            # backward (while it runs, its unsharded gradients stand in: fsdp2.unsharded_grad.layers), the root's
            # at the end of backward.
            last = self.phases[-1].id
            return {
                "head": ("of the final norm and output layer, sharded after the root's reduce-scatter",
                         Life("step", last, OPTIMIZER_STEP)),
                "layers": (f"of {self.kind.layers} layers, sharded as each layer's reduce-scatter ends",
                           Life("step", self.bwd_end, OPTIMIZER_STEP, ramp=GRADS)),
                "embedding": ("of the embedding, sharded after the root's reduce-scatter", Life("step", last, OPTIMIZER_STEP)),
            }
        # A tied output layer is the embedding's weight: its gradient from the output layer's backward waits in
        # autograd's buffer for the embedding's own, so the embedding's gradient is held from the output layer on
        # (measured on CPU: GPT-2's layer events V·h·w bytes above the prediction before this; on an H200, Gemma 3
        # 1B's 602,500,608 B against 262,144 × 1,152 × 2 = 603,979,776 B).
        tied = self.arch.tie_word_embeddings and self.kind.first and self.kind.last
        # Where a layer's backward is counted moment by moment (`_gpt_oss_backward`), its own gradients are part of
        # those moments: the ramp counts the layers whose backward has ended.
        written = GRADS_DONE if self.gradients_after_layer else GRADS
        return {
            "head": ("of the final norm and output layer", Life("step", head_from, OPTIMIZER_STEP)),
            "layers": (f"of {self.kind.layers} layers, written layer by layer in backward",
                       Life("step", BWD_LAYER_LAST, OPTIMIZER_STEP, ramp=written)),
            "embedding": ("of the embedding, which the tied output layer's backward starts" if tied
                          else "of the embedding", Life("step", head_from if tied else BWD_EMBEDDING, OPTIMIZER_STEP)),
        }

    def _finetuned_states(self) -> None:
        """Model states under fine-tuning: every weight, but gradients, master copy and optimizer state only for
        what trains (finetuning module docstring), each part in its own dtype."""
        training, p, ft = self.training, self.parallelism, self.finetuned
        assert ft is not None
        precision = training.precision
        count = self.kind.count
        trained = ft.parts.items()
        weights_rank = ft.frozen_rank_bytes + sum(tensor_bytes(part.rank_elements, part.bits) for _, part in trained)
        weights_cluster = ft.frozen_cluster_bytes + sum(tensor_bytes(part.cluster_elements, part.bits)
                                                        for _, part in trained)
        trained_text = " + ".join(f"{part.rank_elements:,} trainable params ({part.what}) × {part.bits} bit ÷ 8"
                                  for _, part in trained)
        always = Life("run", START)
        self.add("weights", "weights", f"Weights: the frozen base in {precision.weights}, and what trains",
                 f"{ft.frozen_text} + {trained_text}{self._shard_note('weights')}",
                 states.on_rank(weights_rank, "weights", p), states.over_group(weights_cluster, "weights", p) * count,
                 always)
        master_bits = precision.bits("master_weights")
        master = [(name, part) for name, part in trained if master_bits > part.bits]
        if master:
            rank = sum(tensor_bytes(part.rank_elements, master_bits) for _, part in master)
            cluster = sum(tensor_bytes(part.cluster_elements, master_bits) for _, part in master)
            self.add("master_weights", "master_weights", f"Master copy in {precision.master_weights} of what trains "
                     "in a narrower dtype", " + ".join(f"{part.rank_elements:,} params × {master_bits} bit ÷ 8"
                                                       for _, part in master) + self._shard_note("master_weights"),
                     states.on_rank(rank, "master_weights", p),
                     states.over_group(cluster, "master_weights", p) * count, always)
        bits = precision.bits("optimizer_states")
        # torch's optimizers make their state like the parameter (torch.zeros_like): fp32 adapters get fp32 state.
        adapter_training = replace(training, precision=replace(precision, optimizer_states="fp32"))

        def optimizer_bytes(name: str, shapes: tuple) -> int:
            owner = adapter_training if training.finetuning.adapters and name == "layers" else training
            return states.states_bytes(list(shapes), owner)["optimizer_states"]

        rank_states = sum(optimizer_bytes(name, part.rank_shapes) for name, part in trained)
        cluster_states = sum(optimizer_bytes(name, part.cluster_shapes) for name, part in trained)
        if training.finetuning.adapters:
            bits = max(bits, FP32_BITS)
        share = f"{ft.trainable_rank:,} trainable params"
        self.add("optimizer_states", "optimizer_states",
                 optimizer_label(training.optimizer, adafactor_momentum=training.adafactor_momentum) + " of what trains",
                 optimizer_formula(training.optimizer, share=share, bits=bits,
                                   adafactor_momentum=training.adafactor_momentum) + self._shard_note("optimizer_states"),
                 states.on_rank(rank_states, "optimizer_states", p),
                 states.over_group(cluster_states, "optimizer_states", p) * count, Life("run", OPTIMIZER_STEP))
        gradient_bits = precision.bits("gradients")
        for name, (what, life) in self._gradient_lives().items():
            part = ft.parts.get(name)
            if part is None:
                continue
            part_bits = part.bits if training.finetuning.adapters else gradient_bits
            self.add(f"gradients.{name}", "gradients", f"Gradients {what} ({part.what})",
                     f"{part.rank_elements:,} params × {part_bits} bit ÷ 8{self._shard_note('gradients')}",
                     states.on_rank(tensor_bytes(part.rank_elements, part_bits), "gradients", p),
                     states.over_group(tensor_bytes(part.cluster_elements, part_bits), "gradients", p) * count, life)
        largest = max((states.largest_elements(list(part.rank_shapes)) for _, part in trained), default=0)
        self._optimizer_scratch(bits, params=ft.trainable_rank, largest=largest)

    def _gradients(self, bits: int) -> None:
        p = self.parallelism
        dtype = self.states_precision.gradients
        if self.training.implementation == "megatron":
            elements_rank, share = self._share_text(("layers", "embedding", "head"))
            cluster = self.shapes.cluster_total
            self.add("gradients", "gradients", f"Gradient buffer in {dtype} (Megatron-LM keeps it allocated)",
                     f"{share} × {bits} bit ÷ 8{self._shard_note('gradients')}",
                     states.on_rank(tensor_bytes(elements_rank, bits), "gradients", p),
                     states.over_group(tensor_bytes(cluster, bits), "gradients", p) * self.kind.count,
                     Life("run", START))
            return
        # Under autocast the output layer's matmul ran on a half-precision copy, so its backward writes a
        # half-precision gradient first (`autocast.head_grad`); the cast to the fp32 .grad (ToCopyBackward0)
        # runs after that matmul's backward has returned and freed the logits' gradient.
        for part, (what, life) in self._gradient_lives().items():
            if part not in self.parts:
                continue
            elements_rank, share = self._share_text((part,))
            cluster = self.shapes.cluster[part]
            if not states.is_sharded("gradients", p):  # this GPU's experts only (expert parallelism)
                elements_rank, cluster = self.shapes.rank_ep[part], self.shapes.cluster_ep[part]
            self.add(f"gradients.{part}", "gradients", f"Gradients {what}, in {dtype}",
                     f"{share} × {bits} bit ÷ 8{self._shard_note('gradients')}{self._expert_note('gradients')}",
                     states.on_rank(tensor_bytes(elements_rank, bits), "gradients", p),
                     states.over_group(tensor_bytes(cluster, bits), "gradients", p) * self.kind.count, life)

    def _optimizer_scratch(self, bits: int, *, params: int | None = None, largest: int | None = None) -> None:
        training, p = self.training, self.parallelism
        scratch = OPTIMIZER_INFO[training.optimizer].scratch[training.optimizer_implementation]
        if params is None:
            params = self.shapes.rank_total if states.is_sharded("optimizer_states", p) else self.shapes.rank_ep_total
        largest = self.shapes.largest_rank if largest is None else largest
        note = ""
        if states.is_sharded("optimizer_states", p) and p.shard_group > 1:
            params, largest = ceil_div(params, p.shard_group), ceil_div(largest, p.shard_group)
            note = f" (this rank's 1/{p.shard_group} shard)"
        elements_scratch = scratch.elements(param_elements=params, largest_elements=largest)
        formula = scratch.formula(param_elements=params, largest_elements=largest, bits=bits)
        size = tensor_bytes(elements_scratch, bits)
        self.add("optimizer.scratch", "temporary",
                 f"optimizer.step() scratch, {training.optimizer_implementation}{note}",
                 f"{formula}: {scratch.source}", size, self.per_stage(size), Life("step", OPTIMIZER_STEP, OPTIMIZER_STEP))

    # --- activations ---------------------------------------------------------------------------------

    def activations(self) -> None:
        arch, setup, kind, training = self.arch, self.setup, self.kind, self.training
        checkpointing = training.activation_checkpointing
        per_layer = act.total_bytes(act.checkpointed_layer_activations(arch, setup, checkpointing, full=self.layer_saved))
        n = kind.layers
        b, s, h = setup.micro_batch_size, setup.seq_len, arch.hidden_size
        policy = act.CHECKPOINTING_CHOICES[checkpointing].about
        current = kind.count  # one micro-batch per stage in the most-loaded position
        layers_bytes, layers_text = n * per_layer, f"{n} layers × {per_layer:,} B"
        if self.dense:
            dense_full = act.layer_activations(arch, setup, dense=True)
            per_dense = act.total_bytes(act.checkpointed_layer_activations(arch, setup, checkpointing, full=dense_full))
            layers_bytes = (n - self.dense) * per_layer + self.dense * per_dense
            layers_text = f"{n - self.dense} layers × {per_layer:,} B + {self.dense} dense layers × {per_dense:,} B"
        if self.finetuned is not None:
            layers_bytes, layers_text = self._finetuned_layers(per_layer)
        window_layers, window_each = self._sliding_window_extra()
        if window_each:
            layers_bytes += window_layers * window_each
            layers_text += (f" {'+' if window_each > 0 else '−'} {window_layers} sliding-window layers × "
                            f"{abs(window_each):,} B (what sdpa keeps once the window is passed as a mask)")
        self.add("activations.layers", "activations", f"{n} layers' saved tensors ({policy}), b={b}, s={s:,}, h={h:,}",
                 layers_text, layers_bytes, layers_bytes * self.ranks * current,
                 Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end, ramp=ACTS))
        embedding = 0
        if kind.first:
            first = act.embedding_activations(arch, setup)
            embedding = act.total_bytes(first)
            self.add("activations.embedding", "activations",
                     "Embedding: token ids, positions or rotary cos/sin, dropout mask",
                     _listed(first), embedding, embedding * self.ranks,
                     Life("micro-batch", FWD_EMBEDDING, BWD_EMBEDDING))
            kwargs = act.checkpoint_held_activations(arch, setup, checkpointing)
            full_mask = tuple(x for x in kwargs if x.name == act.FULL_ATTENTION_MASK)
            kwargs = tuple(x for x in kwargs if x.name != act.FULL_ATTENTION_MASK)
            if kwargs:
                # kept by each layer's recomputation closure: freed with the first layer's backward
                held_bytes = act.total_bytes(kwargs)
                embedding += held_bytes
                self.add("activations.checkpoint_held", "activations", "Keyword arguments recomputation keeps for "
                         "every layer until its backward (position ids, masks)", _listed(kwargs), held_bytes,
                         held_bytes * self.ranks, Life("micro-batch", FWD_EMBEDDING, self.bwd_end))
            if full_mask:
                embedding += self._full_attention_mask(full_mask)
        others = kind.in_flight - 1
        if others > 0:
            held = layers_bytes + embedding
            others_total = kind.in_flight_total - kind.count
            self.add("activations.in_flight", "activations",
                     f"{others} more micro-batches in flight on this stage (1F1B)",
                     f"{others} × {held:,} B", others * held, held * others_total * self.ranks,
                     Life("micro-batch", self.phases[0].id, self.phases[-1].id))
        if kind.extra_chunks:
            chunk = layers_bytes // n * kind.chunk_layers
            size = kind.extra_chunks * chunk
            self.add("activations.interleaved", "activations",
                     f"{kind.extra_chunks} more chunks of {kind.chunk_layers} layers in flight (interleaved schedule, "
                     f"{n // kind.chunk_layers} virtual stages)",
                     f"{kind.extra_chunks} × {kind.chunk_layers} layers × {layers_bytes // n:,} B "
                     "(Korthikanti et al. 2022, section 4.2.3)", size,
                     kind.extra_chunks_total * chunk * self.ranks,
                     Life("micro-batch", self.phases[0].id, self.phases[-1].id))
        if kind.last:
            head = act.head_activations(arch, setup)
            loss = tuple(item for item in head if item.name.startswith(("loss.", "logits.")))
            rest = tuple(item for item in head if item not in loss)
            loss_end = BWD_HEAD if training.implementation == "megatron" else BWD_LOSS
            self.add("activations.head", "activations", "Final norm and the output layer's input", _listed(rest),
                     act.total_bytes(rest), act.total_bytes(rest) * self.ranks, Life("micro-batch", FWD_LOSS, BWD_HEAD))
            if loss:  # none with a fused linear cross entropy (its gradients are kept instead)
                self.add("activations.loss", "activations",
                         f"The loss's saved tensors: fp32 softmax or log-probabilities (4 B × {b} × {s:,} × "
                         f"{arch.vocab_size:,}) and the labels", _listed(loss), act.total_bytes(loss),
                         act.total_bytes(loss) * self.ranks, Life("micro-batch", FWD_LOSS, loss_end))

    def _sliding_window_extra(self) -> tuple[int, int]:
        """The stage's sliding-window layers (at most their share of the model's, rounded up) and what each keeps
        beyond a full-attention layer, which may be less (`act.sliding_window_layer`): under full recomputation a
        layer keeps only its input; selective recomputation drops what belongs to core attention."""
        arch, checkpointing = self.arch, self.training.activation_checkpointing
        if not arch.sliding_window_layers or checkpointing == "full":
            return 0, 0
        sliding = act.sliding_window_layer(arch, self.setup)
        if sliding == self.layer_saved:
            return 0, 0
        each = (act.total_bytes(act.checkpointed_layer_activations(arch, self.setup, checkpointing, full=sliding))
                - act.total_bytes(act.checkpointed_layer_activations(arch, self.setup, checkpointing,
                                                                     full=self.layer_saved)))
        if not each:
            return 0, 0
        layers = min(self.kind.layers, ceil_div(self.kind.layers * arch.sliding_window_layers, arch.num_hidden_layers))
        return layers, each

    def _finetuned_layers(self, full_layer: int) -> tuple[int, str]:
        """The stage's layers by their part in backward (finetuning.layer_role): the lowest trainable layer keeps
        nothing for its input, frozen layers with nothing trainable below keep nothing at all."""
        arch, setup, checkpointing = self.arch, self.setup, self.training.activation_checkpointing
        first = self.kind.first_layer - 1
        roles = layer_roles(self.training.finetuning, first, self.kind.layers)
        words = {"full": "layers", "bottom": "lowest trainable layer", "through": "frozen layers gradients pass "
                 "through", "off": "frozen layers with nothing trainable below"}
        # A mixture's dense first layers (only with adapters, setup._check_moe_finetuning): the lowest one is the
        # lowest trainable layer when the stage holds it, the rest take the full role.
        dense = self.dense
        dense_roles = {}
        if dense:
            bottom = int(roles.get("bottom", 0) > 0 and first == 0)
            dense_roles = {"bottom": bottom, "full": dense - bottom}
        total, terms = 0, []
        for role, count in roles.items():
            for is_dense, number in ((True, dense_roles.get(role, 0)), (False, count - dense_roles.get(role, 0))):
                if not number:
                    continue
                if role == "full" and not is_dense:
                    each = full_layer
                elif role == "off":
                    each = 0
                elif checkpointing == "full":
                    each = act.total_bytes(act.checkpointed_layer_activations(arch, setup, "full"))
                else:
                    each = act.total_bytes(act.checkpointed_layer_activations(
                        arch, setup, checkpointing, full=act.layer_activations(arch, setup, role, dense=is_dense)))
                total += number * each
                word = words[role] if number > 1 or role != "full" else "layer"
                terms.append(f"{number} {'dense ' if is_dense else ''}{word} × {each:,} B")
        return total, " + ".join(terms)

    # --- temporaries -----------------------------------------------------------------------------------

    def temporaries(self) -> None:
        self._context_chunks()
        self._dequantized()
        self._loss_buffers()
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

    def _loss_buffers(self) -> None:
        if not self.kind.last:
            return
        arch, setup, training = self.arch, self.setup, self.training
        n_v = setup.tokens * arch.vocab_size
        v_rank = ceil_div(n_v, self.parallelism.tensor)
        half = setup.half_bytes
        dims = _ceil_text(f"{setup.micro_batch_size} × {setup.seq_len:,} × {arch.vocab_size:,}",
                          self.parallelism.tensor)  # the vocabulary split over tensor-parallel ranks
        logits = v_rank * half
        if training.implementation == "megatron":
            self.add("loss.logits", "temporary", "Logits before the fused cross entropy", f"{half} B × {dims}",
                     logits, self.per_stage(logits), Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))
            return
        if training.loss == "fused-linear":
            self._fused_linear_loss()
            return
        chunks = training.loss_chunks if training.loss == "chunked" else 1
        loop = LOOPS[effective_loop(training)]
        if loop.keeps_output:
            self.add("loss.logits", "temporary", "Logits in the model's output, which the loop keeps",
                     f"{half} B × {dims}", logits, self.per_stage(logits), Life("run", FWD_LOSS))
            self.add("loss.logits_previous", "temporary",
                     "The previous micro-batch's logits, until the loop's output variable is reassigned",
                     f"{half} B × {dims}", logits, self.per_stage(logits),
                     Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,), later=True))
        else:
            self.add("loss.logits", "temporary", "Logits, freed when the loss is computed (only the loss is kept)",
                     f"{half} B × {dims}", logits, self.per_stage(logits),
                     Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))
        self._router_logits(loop.keeps_output)
        # Chunked: the fp32 upcast and the loss's gradients exist for one chunk of tokens at a time.
        per = ceil_div(v_rank, chunks)
        fp32 = per * act.FP32_BYTES
        one = f" for one of {chunks} chunks" if chunks > 1 else ""
        dims_chunk = _ceil_text(dims, chunks)
        if half != act.FP32_BYTES:
            self.add("loss.upcast", "temporary", f"fp32 upcast of the logits inside the loss (logits.float()){one}",
                     f"4 B × {dims_chunk}", fp32, self.per_stage(fp32), Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))
        self.add("loss.grad_log_probs", "temporary", f"Gradient of the log-probabilities (nll_loss backward, fp32){one}",
                 f"4 B × {dims_chunk}", fp32, self.per_stage(fp32), Life("micro-batch", BWD_LOSS, only=(BWD_LOSS,)))
        if half == act.FP32_BYTES:
            self.add("loss.grad_logits", "temporary", f"Gradient of the logits (log_softmax backward, fp32){one}",
                     f"4 B × {dims_chunk}", fp32, self.per_stage(fp32), Life("micro-batch", BWD_LOSS, BWD_HEAD))
            return
        self.add("loss.grad_logits", "temporary", f"Gradient of the logits (log_softmax backward, fp32){one}",
                 f"4 B × {dims_chunk}", fp32, self.per_stage(fp32), Life("micro-batch", BWD_LOSS, only=(BWD_LOSS,)))
        self.add("loss.grad_logits_half", "temporary", "Gradient of the logits cast back for the output layer",
                 f"{half} B × {dims}", logits, self.per_stage(logits), Life("micro-batch", BWD_HEAD, only=(BWD_HEAD,)))

    def _fused_linear_loss(self) -> None:
        """Liger Kernel 0.8.5's fused linear cross entropy (liger_kernel/ops/fused_linear_cross_entropy.py).

        Forward splits the BT tokens into chunks of min(next_power_of_2(⌈BT ÷ ⌈V ÷ H⌉⌉), BT) (lines 103-106): each
        chunk's logits go into one reused chunk × V buffer in the input's dtype (line 151), become their own
        gradient in place, and are multiplied into grad_input (BT × H, zeros_like(_input), line 108) and
        grad_weight (V × H in the weight's dtype, line 116); a BT fp32 loss vector (line 125). Both gradients are
        saved for backward (ctx.save_for_backward, line 575); grad_weight then becomes the output layer's .grad.
        """
        arch, setup, training, p = self.arch, self.setup, self.training, self.parallelism
        tokens, h, v = setup.tokens, arch.hidden_size, arch.vocab_size
        half = setup.half_bytes
        chunk = min(_next_power_of_2(ceil_div(tokens, ceil_div(v, h))), tokens)
        logits = ceil_div(chunk * v, p.tensor) * half
        self.add("loss.logits_chunk", "temporary", f"One chunk of {chunk:,} tokens' logits (fused linear cross "
                 "entropy)", f"{_ceil_text(f'{chunk:,} × {v:,}', p.tensor)} × {half} B", logits, self.per_stage(logits),
                 Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))
        loss_vector = tokens * act.FP32_BYTES
        self.add("loss.per_token", "temporary", "Per-token fp32 losses", f"{tokens:,} × 4 B", loss_vector,
                 self.per_stage(loss_vector), Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))
        grad_input = tokens * h * half
        self.add("loss.grad_input", "activations", "Gradient of the final norm's output, computed in forward and "
                 "kept for backward (fused linear cross entropy)", f"{tokens:,} × {h:,} × {half} B", grad_input,
                 grad_input * self.ranks, Life("micro-batch", FWD_LOSS, BWD_HEAD))
        if not head_trains(arch, training.finetuning):
            return
        weight_bytes = max(1, training.precision.bits("weights") // 8)
        grad_weight = ceil_div(v * h, p.tensor) * weight_bytes
        self.add("loss.grad_weight", "gradients", "The output layer's weight gradient, computed in forward (fused "
                 "linear cross entropy), until the layer's own gradient takes it over",
                 f"{_ceil_text(f'{v:,} × {h:,}', p.tensor)} × {weight_bytes} B", grad_weight, self.per_stage(grad_weight),
                 Life("micro-batch", FWD_LOSS, BWD_LOSS))

    def _context_chunks(self) -> None:
        """Context parallelism: ring attention computes on the K and V chunk it holds while the next arrives, so two
        chunks of K and V (this rank's s/c tokens each) are in flight during every layer's attention, forward and
        backward (Liu et al. 2023, Ring Attention, arXiv:2310.01889; Megatron-LM's context parallelism exchanges
        them point to point)."""
        p, setup, arch = self.parallelism, self.setup, self.arch
        if p.context == 1:
            return
        elements = ceil_div(2 * 2 * setup.tokens * arch.kv_heads * arch.head_size, p.tensor)
        size = elements * setup.half_bytes
        self.add("context.kv_chunks", "temporary", f"K and V chunks in flight around the ring ({p.context} ranks)",
                 f"2 chunks × (K + V) × {setup.micro_batch_size} × {setup.seq_len:,} × {arch.kv_heads} × "
                 f"{arch.head_size} × {setup.half_bytes} B", size, self.per_stage(size),
                 Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end))

    def _dequantized(self) -> None:
        """QLoRA: bitsandbytes dequantizes each 4-bit or 8-bit weight to the compute dtype for its matmul, forward and
        backward (bitsandbytes/autograd/_functions.py, MatMul4Bit: ``F.dequantize_4bit(B, quant_state).to(A.dtype)``),
        one weight at a time."""
        ft = self.training.finetuning
        if ft.method != "qlora":
            return
        largest = max(tensor.elements for tensor in linear_modules(self.arch))
        largest = ceil_div(largest, self.parallelism.tensor)
        size = largest * self.setup.half_bytes
        self.add("qlora.dequantized", "temporary", f"The largest {ft.quantization} weight dequantized for its matmul",
                 f"{largest:,} × {self.setup.half_bytes} B", size, self.per_stage(size),
                 Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end))

    def _attention_backward(self) -> None:
        """Eager attention with an fp32 softmax: its backward makes an fp32 gradient of the probabilities.

        The Llama family runs ``softmax(scores, dtype=torch.float32).to(query.dtype)``; in backward the
        cast's gradient (ToCopyBackward0) is an fp32 b·a·s² tensor alive while softmax's backward runs,
        one layer at a time. Measured at real size: docs/VALIDATION.md, "Peak through two steps".
        """
        arch, setup = self.arch, self.setup
        kernel = act.attention_kernel(arch, setup)
        if setup.implementation != "megatron" and kernel == "math":
            if not arch.attn_dropout:  # with dropout (CPU's math path) the measured tensors are the saved ones
                self._math_attention()
            return
        if setup.implementation == "megatron" or kernel != "eager":
            return
        if arch.model_type == "gpt2":  # softmax in the scores' own dtype, no cast to take a gradient of
            return
        if self.gradients_after_layer:
            return  # one of gpt-oss's layer backward moments there (`_gpt_oss_backward`)
        elements = ceil_div(setup.micro_batch_size * arch.num_attention_heads * setup.seq_len ** 2,
                            self.parallelism.tensor)
        size = elements * act.FP32_BYTES
        self.add("attention.grad_probs", "temporary", "fp32 gradient of one layer's attention probabilities "
                 "in backward (eager)", f"4 B × {setup.micro_batch_size} × {arch.num_attention_heads} × "
                 f"{setup.seq_len:,}²", size, self.per_stage(size), Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _math_attention(self) -> None:
        """sdpa's math path (torch's _scaled_dot_product_attention_math, as CUDA runs it for fp32 with grouped K/V
        heads), one layer at a time. Forward: the scores (a batched matmul), the scores plus the causal mask (an
        s × s fp32 tensor made from is_causal) and softmax's output, with _safe_softmax's boolean of fully masked
        rows: two fp32 b·a·s² tensors beside the probabilities at once. Backward: the gradients of the
        probabilities and of the scores, two fp32 b·a·s² tensors beside the attention's kept tensors, once the
        MLP's are freed. Each line is what the event holds beyond its other lines: under recomputation the forward
        keeps nothing of the layer, so the attention's tensors count there too (measured on CPU with the math
        backend forced, and on an H200: docs/VALIDATION.md)."""
        arch, setup, t = self.arch, self.setup, self.parallelism.tensor
        b, s, a = setup.micro_batch_size, setup.seq_len, arch.num_attention_heads
        squares = ceil_div(b * a * s * s, t)
        scores = squares * act.FP32_BYTES
        extras = s * s * act.FP32_BYTES + squares  # the causal mask, and the boolean of fully masked rows
        saved = self.layer_saved
        attention = sum(x.bytes for x in saved if x.name.startswith(("attn.", "attn_norm."))
                        and x.name != "attn.out_proj_input")
        later = act.total_bytes(saved) - attention
        if self.training.activation_checkpointing == "full":
            forward = attention + scores + extras
        else:
            forward = scores + extras - later
        backward = 2 * scores - later
        dims = f"{b} × {a} × {s:,}²" + (f" ÷ {t}" if t > 1 else "")
        layers = tuple(x for x in (FWD_LAYER_FIRST, FWD_LAYER_LAST) if x in self.names)
        if forward > 0:
            self.add("attention.math_forward", "temporary", "One layer's attention scores, masked scores and mask "
                     "while softmax runs (sdpa's math path), beyond what the event keeps",
                     f"fp32 scores and mask ({dims}) and the causal mask ({s:,}² × 4 B), less the layer's later tensors",
                     forward, self.per_stage(forward), Life("micro-batch", layers[0], only=layers))
        if backward > 0:
            self.add("attention.math_backward", "temporary", "fp32 gradients of one layer's attention probabilities "
                     "and scores in backward (sdpa's math path)", f"2 × 4 B × {dims}, less the MLP's freed tensors "
                     f"({later:,} B)", backward, self.per_stage(backward),
                     Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _mlp_backward(self) -> None:
        """An MLP's backward working set, at each layer's backward (Hugging Face modules, no autocast).

        The output projection's backward gives the gradient of the product act(gate) · up (n × I); the product's
        backward then makes the gradients of both factors from it, and the activation's backward the gate's: three
        n × I tensors at once, beside the n × h gradient of the layer's output, in the activations' dtype (in fp32
        under full recomputation that last one is no extra tensor). Trained in full, the down projection's backward has freed the product it
        kept (n × I) and written its weight gradient, and the layer's other gradients come after; with adapters
        on attention only, the frozen MLP keeps no product and the adapters' gradients come after too. So the
        event holds this much beyond what its other lines count (which have the layer's gradients written):
        measured on CPU (docs/VALIDATION.md, "Peak through two steps") and on an H200, where LoRA on Llama-3-8B at
        32,768 tokens under recomputation held 3,086,486,528 B beyond them against 3,087,007,744 B here ("On a
        GPU"). Left out where the layer's backward differs: autocast, a mixture of experts, eager attention (its
        own transient comes later in the layer), fused or Megatron/Liger modules, sharded gradients, adapters on the
        MLP, MLPs without a gate other than GPT-2's (trained in full, without dropout), and a norm after the MLP in
        other families than OLMo 2 and Gemma 3 (theirs, whose fp32 backward runs before the MLP's, are in
        `_mlp_working_set` and `_post_norm_full_backward`). With accumulated micro-batches the rest of the working
        set joins from a step's second micro-batch (`mlp.backward.accumulating`)."""
        arch, training = self.arch, self.training
        if not mlp_backward_modelled(arch, training, self.parallelism, self.setup):
            return
        full = not finetunes(training)
        post_norm = arch.norm_placement != "pre" or arch.norms_per_layer != 2
        recomputed = training.activation_checkpointing == "full"
        grads = self._layer_gradient_bytes()
        if post_norm and full:
            size, terms, written, working = self._post_norm_full_backward(grads, recomputed)
        else:
            size, terms, written, working = self._mlp_working_set(grads, recomputed, full=full, post_norm=post_norm)
        accumulating = working - max(size, 0)
        if full and training.gradient_accumulation_steps > 1 and accumulating > 0:
            # From a step's second micro-batch on every gradient exists already, none is left to write: the event
            # holds the whole working set beyond its other lines (measured on CPU: Llama trained in full with two
            # micro-batches, bf16, with and without recomputation, to the byte).
            self.add("mlp.backward.accumulating", "temporary", "One layer's MLP backward once gradients accumulate: "
                     "what a step's first micro-batch leaves unwritten exists from its second on",
                     f"{working:,} B − {max(size, 0):,} B", accumulating, self.per_stage(accumulating),
                     Life("micro-batch", BWD_LAYER_LAST, self.bwd_end, accumulating=True))
        if size <= 0:
            return
        # With adapters, the lowest layer's backward holds less than this (measured below it on CPU and on the H200
        # by about n × h): counted where the backward starts, which under adapters always holds more.
        life = (Life("micro-batch", BWD_LAYER_LAST, self.bwd_end) if full
                else Life("micro-batch", BWD_LAYER_LAST, only=(BWD_LAYER_LAST,)))
        self.add("mlp.backward", "temporary", "One layer's MLP backward: the gradients of its n × I tensors, less "
                 "the layer's gradients not yet written", f"{terms} − {grads - written:,} B of gradients written later",
                 size, self.per_stage(size), life)

    def _mlp_working_set(self, grads: int, recomputed: bool, *, full: bool,
                         post_norm: bool) -> tuple[int, str, int, int]:
        """`_mlp_backward` except full training with a norm after the MLP: (bytes beyond the event's other lines, the
        formula, the layer's gradients written by then, the working set)."""
        arch, setup, training = self.arch, self.setup, self.training
        n, h, inter, w = setup.tokens, arch.hidden_size, arch.ffn_size, setup.half_bytes
        factors = 2 if full else 3
        # GPT-2's MLP (c_fc, the tanh GELU, c_proj), without a gate, holds no output gradient under recomputation in
        # either dtype (measured on CPU, bf16 and fp32, I/h 2 to 6, h 256 to 512, 512 to 1,024 tokens).
        output_grad = 0 if recomputed and (w >= act.FP32_BYTES or not arch.is_gated) else n * h * w
        working = factors * n * inter * w + output_grad
        terms = f"{factors} × {n:,} × {inter:,} × {w} B" + (f" + {n:,} × {h:,} × {w} B" if output_grad else "")
        if post_norm:
            # With adapters, a norm after the MLP (OLMo 2, Gemma 3): its backward, which computes in fp32, runs
            # first, five fp32 n × h tensors and the output's gradient; then the MLP's, 3 × n × I less n × h (in
            # fp32 without recomputation, less nothing). Measured on CPU in bf16 and fp32, with and without
            # recomputation, I/h from 2 to 10, and on an H200 (OLMo 2 7B and Gemma 3 1B at 32,768 tokens).
            less = 0 if w >= act.FP32_BYTES and not recomputed else n * h * w
            norm, mlp = 5 * n * h * act.FP32_BYTES + output_grad, 3 * n * inter * w - less
            working = max(norm, mlp)
            if norm >= mlp:
                terms = (f"5 × {n:,} × {h:,} × 4 B" + (f" + {n:,} × {h:,} × {w} B" if output_grad else "")
                         + " (the norm after the MLP)")
            else:
                terms = f"3 × {n:,} × {inter:,} × {w} B" + (f" − {n:,} × {h:,} × {w} B" if less else "")
        written = tensor_bytes(inter * h, training.precision.bits("gradients")) if full else 0
        return working - (grads - written), terms, written, working

    def _layer_gradient_bytes(self) -> int:
        """One layer's gradients on this GPU (the `gradients.layers` line over the stage's layers; 0 without it)."""
        return next((b.bytes for b in self.buffers if b.key == "gradients.layers"), 0) // max(1, self.kind.layers)

    def _moe_backward(self) -> None:
        """A mixture-of-experts layer's backward working set, trained in full or with LoRA on the attention, in half
        precision (Hugging Face's Mixtral and Qwen3-MoE blocks, `act._hf_moe`), at each layer's backward: the
        largest of three moments, each beyond the event's other lines (which count the layer's gradients written).

        First, before any of the layer's gradients is written: the gradients of the routed tokens' weighted outputs
        and of the combine, three n·k × h tensors in the routing weights' dtype (fp32 for Mixtral, the activations'
        for Qwen3-MoE, `act.FP32_ROUTING_MODELS`), beside the layer's output gradient (n × h); without recomputation,
        where the fp32 routing weights widen the weighted output, n·k × h more of that difference. With LoRA under
        recomputation the combine's gradient (n·k × h in the activations' dtype) beside two n·k × h in the routing
        weights' dtype and three n × h can hold more (Mixtral at k = 1; Qwen3-MoE by 4 n·h bytes always).
        Then inside the experts' MLP backward: the gradients of the product and of both its factors (3 n·k × I),
        the experts' output freed (n·k × h), beside the layer's output gradient; trained in full the down
        projections' weight gradient is written by then and the product it kept freed (n·k × I less). This one
        decides for experts wider than the hidden size.
        Measured on CPU (docs/VALIDATION.md, "Mixture of experts and Qwen3"), trained in full: Mixtral and Qwen3-MoE
        with k from 1 to 8, 512 to 2,048 tokens, I/h 0.5 to 6, within 0.13 n·h bytes where the layers' backward
        holds the peak. With LoRA on the attention, k 1 to 8, I/h 0.5 to 6, 1,024 and 2,048 tokens, with and without
        recomputation (49 setups), within 0.8 n·h bytes, except Qwen3-MoE at k = 1, where the fp32 backward of the
        attention's norm comes later and holds 1.7 n·h bytes more (5.7 without recomputation). On an H200
        Qwen3-30B-A3B's within 1.6 MB at 4,096 tokens and Mixtral-8x7B's (LoRA, recomputation, 8,192 tokens, I/h 3.5:
        the MLP moment) within 20 KB ("On a GPU"). fp32, autocast and the other routers are not measured for it."""
        arch, setup, training = self.arch, self.setup, self.training
        if not moe_backward_modelled(arch, training, self.parallelism, setup):
            return
        if self.gradients_after_layer:
            self._gpt_oss_backward()
            return
        n, h, k, w, r = self._routing()
        recomputed = training.activation_checkpointing == "full"
        widened = 0 if recomputed else n * k * h * (r - w)
        working, terms = self._routed_gradients()
        if finetunes(training) and recomputed:
            combine = n * k * h * (w + 2 * r) + 3 * n * h * w
            if combine > working:
                working = combine
                terms = f"{n:,} × {k} × {h:,} × ({w} + 2 × {r}) B + 3 × {n:,} × {h:,} × {w} B"
        working += widened
        terms += f" + {n:,} × {k} × {h:,} × {r - w} B" if widened else ""
        grads = self._layer_gradient_bytes()
        size, written = working - grads, 0
        later, down, later_terms = self._experts_mlp_backward(full=not finetunes(training))
        if later - (grads - down) > size:
            size, written, terms = later - (grads - down), down, later_terms
        if size <= 0:
            return
        self.add("moe.backward", "temporary", "One mixture-of-experts layer's backward: the routed tokens' gradients "
                 "before the layer's gradients are written", f"{terms} − {grads - written:,} B of gradients written later",
                 size, self.per_stage(size), Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _experts_mlp_backward(self, *, full: bool) -> tuple[int, int, str]:
        """Inside the experts' MLP backward (`_moe_backward`): the gradients of the product and of both its factors
        (n·k × I each) beside the layer's output gradient, the experts' output freed; trained in full, the down
        projections' weight gradient is written by then and the product it kept freed. Experts wider than the hidden
        size hold the most here. (bytes beyond the layer's gradients, the down projections' gradient written by then,
        the formula)."""
        n, h, k, w, _ = self._routing()
        inter = self.arch.expert_size
        down = tensor_bytes(self.arch.num_local_experts * inter * h, self.training.precision.bits("gradients")) if full else 0
        factors = 2 if full else 3
        return (factors * n * k * inter * w - n * k * h * w + n * h * w, down,
                f"{factors} × {n:,} × {k} × {inter:,} × {w} B − {n:,} × {k} × {h:,} × {w} B + {n:,} × {h:,} × {w} B")

    def _full_attention_mask(self, mask: tuple[act.SavedTensor, ...]) -> int:
        """With sliding-window and full-attention layers, eager attention under full recomputation keeps a second
        mask (`act.checkpoint_held_activations`): the full-attention layers' recomputation closures keep it until the
        lowest of them has run its backward, one layer before the first (a sliding-window layer in gpt-oss and
        Gemma 3). The first layer's event stands for both: it holds the mask less one layer's gradients where that
        is more (measured on CPU with gpt-oss from 128 to 2,048 positions: docs/VALIDATION.md). Returns the bytes
        kept through the forward."""
        size = act.total_bytes(mask)
        self.add("activations.checkpoint_full_mask", "activations", "The full-attention layers' mask, kept by their "
                 "recomputation until the lowest one's backward", _listed(mask),
                 size, size * self.ranks, Life("micro-batch", FWD_EMBEDDING, BWD_LAYER_LAST))
        beyond = size - self._layer_gradient_bytes()
        if self.kind.layers > 1 and beyond > 0:
            self.add("activations.checkpoint_full_mask_lowest", "activations", "The lowest full-attention layer's "
                     "backward, the layer before the first: the full-attention mask, less one layer's gradients",
                     f"{size:,} B − {size - beyond:,} B", beyond, beyond * self.ranks,
                     Life("micro-batch", BWD_LAYER_FIRST, only=(BWD_LAYER_FIRST,)))
        return size

    def _gpt_oss_backward(self) -> None:
        """gpt-oss's layer backward trained in full (GptOssDecoderLayer: eager attention with sinks, GptOssExperts
        with biases and the clamped GLU), in half precision: the largest of its moments.

        - The routed tokens' gradients, before any of the layer's gradients is written: three n·k × h tensors
          beside the layer's output gradient (`_routed_gradients`; the routing weights are in the activations'
          dtype), and under recomputation n × h more: 3 n·k·h·w + n·h·w (+ n·h·w).
        - Inside the experts' MLP backward, as Mixtral's trained in full (`_experts_mlp_backward`): 2 n·k·I·w −
          n·k·h·w + n·h·w with the down projections' gradient written. Under recomputation also before it:
          3 n·k·I·w + 2 n·h·w.
        - The post-attention norm's backward, in fp32, once the experts' tensors are freed and their gradients
          written: five fp32 n × h tensors, less the tensors the mixture kept and an n × h one.
        - The attention's softmax backward, once the norm's tensors are freed too and the output projection's
          gradient written: two b·a·s·(s + 1) tensors (the probabilities with the sinks' column), in place of the
          fp32 gradient of the probabilities other eager attention makes (`_attention_backward`). Under
          recomputation the rebuilt attention's softmax holds more for long sequences: the scores (b·a·s²), the
          scores with the sinks' column and less their maximum at once, before what is kept from the
          probabilities on is rebuilt, beside the routed tokens' first gradient (n·k × h) and 2 n × h.
        Each is beyond the layer's kept (or rebuilt) tensors and the gradients of the layers whose backward has ended
        (the `GRADS_DONE` ramp). Measured on CPU (docs/VALIDATION.md, "gpt-oss"): k from 1 to 4, I/h 0.5 to 4, 4 to
        8 experts, 256 to 1,024 tokens and 128 to 512 positions, with and without recomputation, each layer event
        within 0.07%; the attention's moments at 1,024 and 2,048 positions within 0.33 n·h·w bytes."""
        arch, setup, training = self.arch, self.setup, self.training
        n, h, k, w, _ = self._routing()
        b, s, a, inter = setup.micro_batch_size, setup.seq_len, arch.num_attention_heads, arch.expert_size
        recomputed = training.activation_checkpointing == "full"
        bits = training.precision.bits("gradients")
        tensors = layer_tensors(arch)

        def gradients(*prefixes: str) -> int:
            return sum(tensor_bytes(x.elements, bits) for x in tensors if x.name.startswith(prefixes))

        def kept(*prefixes: str) -> int:
            return sum(x.bytes for x in self.layer_saved if x.name.startswith(prefixes))

        experts = gradients("moe.")
        mixture = kept("moe.")
        routed, routed_terms = self._routed_gradients()
        later, down, later_terms = self._experts_mlp_backward(full=True)
        moments = {
            "routed": (routed + n * h * w, f"{routed_terms} + {n:,} × {h:,} × {w} B") if recomputed
            else (routed, routed_terms),
            "experts": (later + down, f"{later_terms} + {down:,} B of the down projections' gradient"),
            "norm": (5 * n * h * act.FP32_BYTES + experts - mixture - n * h * w,
                     f"5 × {n:,} × {h:,} × 4 B + {experts:,} B of the mixture's gradients − {mixture:,} B it kept − "
                     f"{n:,} × {h:,} × {w} B"),
            "attention": (2 * b * a * s * (s + 1) * w + experts + gradients("attn.o.") - mixture - kept("mlp_norm."),
                          f"2 × {b} × {a} × {s:,} × {s + 1:,} × {w} B + {experts + gradients('attn.o.'):,} B of "
                          f"gradients − {mixture + kept('mlp_norm.'):,} B kept"),
        }
        if recomputed:
            # The experts' MLP backward before the down projections' gradient is written; and the rebuilt
            # attention's softmax, with the scores, the scores with the sinks' column and less their maximum at once,
            # before the tensors kept from the probabilities on are rebuilt.
            later = mixture + kept("mlp_norm.", "attn.softmax_with_sink", "attn.out_proj_input")
            moments["experts, early"] = (3 * n * k * inter * w + 2 * n * h * w,
                                         f"3 × {n:,} × {k} × {inter:,} × {w} B + 2 × {n:,} × {h:,} × {w} B")
            moments["attention, rebuilt"] = (
                b * a * s * s * w + 2 * b * a * s * (s + 1) * w + n * k * h * w + 2 * n * h * w - later,
                f"{b} × {a} × {s:,}² × {w} B + 2 × {b} × {a} × {s:,} × {s + 1:,} × {w} B + {n:,} × {k} × {h:,} × "
                f"{w} B + 2 × {n:,} × {h:,} × {w} B − {later:,} B kept from the probabilities on")
        name = max(moments, key=lambda key: moments[key][0])
        size, terms = moments[name]
        if size <= 0:
            return
        self.add("moe.backward", "temporary", f"One gpt-oss layer's backward at its largest moment ({name}), beyond "
                 "its kept tensors and the gradients of the layers before it", terms,
                 size, self.per_stage(size), Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _wrapped_experts_backward(self) -> None:
        """With adapters on a mixture's stacked experts (`finetuning.experts_wrapped`), in half precision, a layer's
        backward holds at least what trained experts hold first (`_moe_backward`): the routed tokens' gradients, three
        n·k × h tensors in the routing weights' dtype, beside the layer's output gradient; the adapters' gradients
        are small. Its later moments, where the gradients of the adapted expert copies (E × 2I × h and E × h × I) meet
        the experts' own, are not modelled (the estimate warns where a layer's backward holds the peak). Measured on
        CPU (docs/VALIDATION.md, "Fine-tuning"): Mixtral within 2.5 n·h bytes of the layer's backward, I/h 1 to 4, 512
        to 2,048 tokens; Qwen3-MoE up to 4.5 n·h bytes over it at I/h up to 2 and 28 n·h short at I/h 4. DeepSeek's is
        not measured."""
        if not experts_wrapped(self.arch, self.training.finetuning) or self.setup.half_bytes >= act.FP32_BYTES:
            return
        size, terms = self._routed_gradients()
        self.add("moe.backward", "temporary", "One mixture-of-experts layer's backward: the routed tokens' gradients "
                 "(adapters on the experts)", terms, size, self.per_stage(size),
                 Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _routing(self) -> tuple[int, int, int, int, int]:
        """Tokens n, hidden size h, experts per token k, and the bytes of an activation (w) and of a routing weight
        (r: fp32 for Mixtral and DeepSeek-V3, the activations' for Qwen3-MoE, `act.FP32_ROUTING_MODELS`)."""
        arch, w = self.arch, self.setup.half_bytes
        r = act.FP32_BYTES if arch.model_type in act.FP32_ROUTING_MODELS else w
        return self.setup.tokens, arch.hidden_size, arch.num_experts_per_tok, w, r

    def _routed_gradients(self) -> tuple[int, str]:
        """A mixture-of-experts layer's backward before any of its weights' gradients: three n·k × h tensors in the
        routing weights' dtype beside the layer's output gradient (n × h), in bytes, and its formula
        (`_moe_backward`)."""
        n, h, k, w, r = self._routing()
        return 3 * n * k * h * r + n * h * w, f"3 × {n:,} × {k} × {h:,} × {r} B + {n:,} × {h:,} × {w} B"

    def _post_norm_full_backward(self, grads: int, recomputed: bool) -> tuple[int, str, int, int]:
        """`_mlp_backward` trained in full with a norm after the MLP (OLMo 2; Gemma 3, which has one before it too):
        (bytes beyond the event's other lines, the formula, the layer's gradients written by then, and the larger
        working set once every gradient exists, as with accumulated micro-batches).

        Two moments, the larger counts. First the norm's backward, in fp32, before any of the layer's gradients
        exists: four fp32 n × h tensors. Then the MLP's, once the down projection's weight gradient is written: the
        gradients of two n × I tensors less two fp32 n × h freed by then. Without recomputation the layer's output
        gradient (n × h) is beside both. Gemma 3 holds 2 n·h bytes more in fp32 and 3 n·h more in bf16 at both
        moments, and its bf16 backward no output gradient beside them. Measured on CPU (docs/VALIDATION.md, "Gemma 3
        and OLMo 2"): bf16 and fp32, with and without recomputation, I/h from 2 to 6, to within 0.01 n·h·w at the
        layer's backward; not yet on a GPU."""
        arch, setup, training = self.arch, self.setup, self.training
        n, h, inter, w = setup.tokens, arch.hidden_size, arch.ffn_size, setup.half_bytes
        fp32 = act.FP32_BYTES
        gemma3 = arch.model_type == "gemma3_text"
        extra = (2 if w >= fp32 else 3) * n * h if gemma3 else 0
        output_grad = 0 if recomputed or (gemma3 and w < fp32) else n * h * w
        norm = 4 * n * h * fp32 + extra + output_grad
        mlp = 2 * n * inter * w - 2 * n * h * fp32 + extra + output_grad
        written = tensor_bytes(inter * h, training.precision.bits("gradients"))
        more = (f" + {extra // (n * h)} × {n:,} × {h:,} B" if extra else "") + \
               (f" + {n:,} × {h:,} × {w} B" if output_grad else "")
        if norm - grads >= mlp - (grads - written):
            return norm - grads, f"4 × {n:,} × {h:,} × 4 B{more} (the norm after the MLP)", 0, max(norm, mlp)
        return (mlp - (grads - written), f"2 × {n:,} × {inter:,} × {w} B − 2 × {n:,} × {h:,} × 4 B{more}", written,
                max(norm, mlp))

    def _router_logits(self, keeps_output: bool) -> None:
        """With ``output_router_logits`` the model returns every routed layer's router logits (n × E, in the
        activations' dtype) for the load-balancing loss (transformers' MixtralModel collects them in forward): each
        layer's from its forward on, then all of them as long as the model's output lives, which the loop decides
        (loss.logits)."""
        arch, setup = self.arch, self.setup
        if not arch.output_router_logits:
            return
        routed = self.kind.layers - self.dense
        size = routed * setup.tokens * arch.num_local_experts * setup.half_bytes
        formula = (f"{routed} routed layers × {setup.tokens:,} tokens × {arch.num_local_experts} experts × "
                   f"{setup.half_bytes} B")
        self.add("moe_aux.router_logits_forward", "temporary", "Router logits the model collects layer by layer for "
                 "the load-balancing loss", formula, size, self.per_stage(size),
                 Life("micro-batch", FWD_LAYER_FIRST, self.fwd_end, ramp=FORWARDED))
        if keeps_output:
            self.add("moe_aux.router_logits", "temporary", "Router logits in the model's output, which the loop keeps",
                     formula, size, self.per_stage(size), Life("run", FWD_LOSS))
            self.add("moe_aux.router_logits_previous", "temporary", "The previous micro-batch's router logits, until "
                     "the loop's output variable is reassigned", formula, size, self.per_stage(size),
                     Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,), later=True))
        else:
            self.add("moe_aux.router_logits", "temporary", "Router logits, freed with the model's output once the "
                     "loss is computed", formula, size, self.per_stage(size),
                     Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))

    def _fp8_casts(self) -> None:
        """torchao's float8 copies around one linear layer's matmuls (setup.FP8_RECIPES), for the layer's largest:
        in forward the input (n × in) and the weight (out × in); in backward the output's gradient twice (n × out,
        once per scaling axis), the weight again and the input for the weight's gradient (n × in). One byte each;
        the scales are single fp32 numbers (torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args).
        Transformer Engine's recipes keep their own buffers (`_te_fp8`)."""
        recipe = FP8_RECIPES[self.training.fp8]
        if recipe.transformer_engine is not None:
            self._te_fp8(recipe.transformer_engine)
            return
        if not recipe.casts:
            return
        tokens, t = self.setup.tokens, self.parallelism.tensor
        forward = backward = 0
        for tensor in layer_tensors(self.arch):
            if not tensor.matmul or len(tensor.shape) != 2:
                continue
            out, width = tensor.shape_on_rank(t, 0)
            forward = max(forward, tokens * width + out * width)
            backward = max(backward, 2 * tokens * out + out * width + tokens * width)
        source = "torchao/float8/float8_linear.py, matmul_with_hp_or_float8_args"
        fwd = tuple(x for x in (FWD_LAYER_FIRST, FWD_LAYER_LAST) if x in self.names)
        bwd = tuple(x for x in (BWD_LAYER_LAST, BWD_LAYER_FIRST) if x in self.names)
        self.add("fp8.forward_casts", "temporary", "float8 copies of the largest linear layer's input and weight "
                 "for its forward matmul (torchao)", f"{forward:,} × 1 B [{source}.forward]", forward,
                 self.per_stage(forward), Life("micro-batch", fwd[0], only=fwd))
        self.add("fp8.backward_casts", "temporary", "float8 copies of the largest linear layer's output gradient "
                 "(twice), weight and input for its backward matmuls (torchao)", f"{backward:,} × 1 B "
                 f"[{source}.backward]", backward, self.per_stage(backward), Life("micro-batch", bwd[0], only=bwd))


    def _te_linears(self) -> tuple[tuple[str, int, int], ...]:
        """One layer's four Transformer Engine linear layers on this GPU, (name, out, in), as Megatron-LM fuses them:
        one QKV weight and one gate/up weight (megatron/core/transformer/attention.py, SelfAttention.linear_qkv;
        mlp.py, MLP.linear_fc1), split by columns over the tensor-parallel GPUs, linear_proj and linear_fc2 by rows."""
        arch, t = self.arch, self.parallelism.tensor
        h, q, kv, inter = arch.hidden_size, arch.num_attention_heads * arch.head_size, arch.kv_heads * arch.head_size, \
            arch.ffn_size
        up = (2 if arch.is_gated else 1) * inter
        return (("linear_qkv", ceil_div(q + 2 * kv, t), h), ("linear_proj", h, ceil_div(q, t)),
                ("linear_fc1", ceil_div(up, t), h), ("linear_fc2", h, ceil_div(inter, t)))

    def _te_fp8(self, te: TransformerEngineFp8) -> None:
        """Transformer Engine's FP8 buffers beyond the saved tensors, for a stage's decoder layers.

        * The FP8 weights: with Megatron-LM's is_first_microbatch set (TELinear.forward), each module quantizes its
          weight into a workspace it keeps in ``_fp8_workspaces`` and refreshes in place on each step's first
          micro-batch (module/base.py, quantize_weight: cache=True, then ``workspace.quantize_`` on a hit): never
          freed. Row-wise for forward and column-wise for the input gradient (linear.py, _linear_forward_impl:
          ``weight_quantizer.set_usage(rowwise=True, columnwise=columnwise_usage)``), with their scales. Counted
          from the first layer's forward (it fills layer by layer in step 1's first forward).
        * Delayed scaling's state: per module 3 forward FP8 tensors (input, weight, output) and 2 backward ones
          (output gradient, input gradient), each with an fp32 scale and ``amax_history_len`` fp32 amax rows
          (module/base.py, set_meta_tensor: num_gemms × 3 and × 2; quantization.py, DelayedScalingRecipeState).
        * Transients around the largest linear layer: in forward the row-wise FP8 input the GEMM reads beside the
          column-wise copy that is kept (under sequence parallelism, the gathered one); in backward the output
          gradient quantized row-wise for the input gradient and column-wise for the weight gradient
          (linear.py, _linear_backward: grad_output quantizer with both usages)."""
        n, layers = self.setup.tokens, self.kind.layers
        linears = self._te_linears()
        per_layer, terms = 0, []
        for name, out, width in linears:
            scales = act.te_scale_bytes(out, width, block=te.block, columnwise=False)
            if te.block:
                scales += act.te_scale_bytes(out, width, block=te.block, columnwise=True)
            per_layer += te.weight_copies * out * width + scales
            terms.append(f"{te.weight_copies} × {out:,} × {width:,} × 1 B + {scales:,} B ({name})")
        copies = "row-wise and transposed" if not te.block else "row-wise and column-wise"
        size = layers * per_layer
        self.add("fp8.weight_cache", "weights", f"FP8 copies of the layers' linear weights, {copies}, cached across "
                 f"micro-batches (Transformer Engine, {te.recipe_class})",
                 f"{layers} layers × ({' + '.join(terms)}) [{TE_MODULE}/base.py, quantize_weight; _fp8_workspaces]",
                 size, self.per_stage(size), Life("run", FWD_LAYER_FIRST))
        if te.amax_history_len:
            modules = len(linears)
            rows = te.amax_history_len + 1
            size = layers * modules * (3 + 2) * rows * FP32_BITS // 8
            self.add("fp8.scaling_state", "weights", f"Delayed scaling's scales and amax history (Transformer Engine, "
                     f"amax_history_len {te.amax_history_len})", f"{layers} layers × {modules} linear layers × "
                     f"(3 forward + 2 backward FP8 tensors) × (1 scale + {te.amax_history_len} amax) × 32 bit ÷ 8 "
                     f"[{TE_MODULE}/base.py, set_meta_tensor; transformer_engine/pytorch/quantization.py, "
                     "DelayedScalingRecipeState]", size, self.per_stage(size), Life("run", FWD_LAYER_FIRST))
        width = max(width for _, _, width in linears)
        in_scales = act.te_scale_bytes(n, width, block=te.block, columnwise=False)
        forward = n * width + in_scales
        out = max(out for _, out, _ in linears)
        out_scales = act.te_scale_bytes(n, out, block=te.block, columnwise=False)
        if te.block:
            out_scales += act.te_scale_bytes(n, out, block=te.block, columnwise=True)
        backward = 2 * n * out + out_scales
        fwd = tuple(x for x in (FWD_LAYER_FIRST, FWD_LAYER_LAST) if x in self.names)
        bwd = tuple(x for x in (BWD_LAYER_LAST, BWD_LAYER_FIRST) if x in self.names)
        self.add("fp8.forward_casts", "temporary", "Row-wise FP8 input of the widest linear layer while its GEMM "
                 "runs (Transformer Engine)", f"{n:,} × {width:,} × 1 B + {in_scales:,} B scales "
                 f"[{TE_MODULE}/linear.py, _linear_forward_impl]", forward, self.per_stage(forward),
                 Life("micro-batch", fwd[0], only=fwd))
        self.add("fp8.backward_casts", "temporary", "The widest linear layer's output gradient in FP8, row-wise and "
                 "column-wise (Transformer Engine)", f"2 × {n:,} × {out:,} × 1 B + {out_scales:,} B scales "
                 f"[{TE_MODULE}/linear.py, _linear_backward]", backward, self.per_stage(backward),
                 Life("micro-batch", bwd[0], only=bwd))

    def _expert_dispatch(self) -> None:
        """Expert parallelism's all-to-all: each MoE layer permutes its tokens' k copies into one send buffer,
        exchanges it and runs the experts on what it receives (Megatron-LM's MoEAlltoAllTokenDispatcher:
        permute, all_to_all, sort by local expert), and the gradients take the same way back in backward. The
        received tokens are the experts' inputs, kept as the layer's saved tensors already; the send buffer is
        the extra, n·k·h in the activations' dtype, with routing balanced over the experts. With an expert-tensor
        degree other than the tensor-parallel one, the copies this GPU sends are its share of them
        (`ActivationSetup.routed_on_rank`)."""
        arch, setup, p = self.arch, self.setup, self.parallelism
        if p.expert == 1 or not arch.is_moe:
            return
        tokens, k, h = setup.tokens, arch.num_experts_per_tok, arch.hidden_size
        copies = setup.routed_on_rank(tokens * k)
        size = copies * h * setup.half_bytes
        count = f"{tokens:,} tokens × {k}"
        if copies != tokens * k:
            count = f"({count} × {p.expert_tensor_degree} ÷ {p.tensor} expert-tensor share = {copies:,})"
        phases = tuple(x for x in (FWD_LAYER_FIRST, FWD_LAYER_LAST, BWD_LAYER_LAST, BWD_LAYER_FIRST) if x in self.names)
        self.add("moe.dispatch", "temporary", f"Expert parallelism's send buffer: this GPU's tokens, k = {k} copies "
                 f"each, permuted for the all-to-all over {p.expert} GPUs (balanced routing)",
                 f"{count} × {h:,} × {setup.half_bytes} B", size, self.per_stage(size),
                 Life("micro-batch", phases[0], only=phases))

    def _recomputation(self) -> None:
        checkpointing = self.training.activation_checkpointing
        rebuilt = act.recompute_workspace(self.arch, self.setup, checkpointing, full=self.layer_saved)
        if not rebuilt:
            return
        size = act.total_bytes(rebuilt)
        self.add("recompute", "temporary", "One layer rebuilt during backward (recomputation)",
                 f"{_listed(rebuilt)}", size, self.per_stage(size),
                 Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _autocast_copies(self) -> None:
        setup = self.setup
        if not setup.autocast:
            return
        bits = setup.precision.bits("activations")
        per_layer_elements = self.shapes.layer_autocast_rank
        n = self.kind.layers
        layers = tensor_bytes(per_layer_elements * n, bits)
        one = tensor_bytes(per_layer_elements, bits)
        dtype = setup.precision.activations
        if self.training.activation_checkpointing == "full":
            self.add("autocast.layers", "temporary", f"{dtype} copies of the layers' matmul weights in autocast's "
                     "cache, until the forward's autocast region ends", f"{n} × {per_layer_elements:,} × {bits} bit ÷ 8",
                     layers, self.per_stage(layers),
                     Life("micro-batch", FWD_LAYER_FIRST, FWD_LOSS if self.kind.last else self.fwd_end, ramp=FORWARDED))
            self.add("autocast.recompute", "temporary", f"{dtype} copies one recomputed layer makes again in backward",
                     f"{per_layer_elements:,} × {bits} bit ÷ 8", one, self.per_stage(one),
                     Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))
        else:
            self.add("autocast.layers", "temporary", f"{dtype} copies of the layers' matmul weights, kept by the "
                     "matmuls until each layer's backward", f"{n} × {per_layer_elements:,} × {bits} bit ÷ 8",
                     layers, self.per_stage(layers), Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end, ramp=ACTS))
        if self.kind.last:
            elements = self.shapes.output_rank
            size = tensor_bytes(elements, bits)
            self.add("autocast.head", "temporary", f"{dtype} copy of the output layer's weight, kept for its backward",
                     f"{elements:,} × {bits} bit ÷ 8", size, self.per_stage(size), Life("micro-batch", FWD_LOSS, BWD_HEAD))
            self.add("autocast.head_grad", "gradients", f"{dtype} gradient of that copy, before its cast to the "
                     "weight's dtype", f"{elements:,} × {bits} bit ÷ 8", size, self.per_stage(size),
                     Life("micro-batch", BWD_HEAD, only=(BWD_HEAD,)))

    def _zero_buffers(self) -> None:
        p, precision = self.parallelism, self.training.precision
        if p.shard_group == 1 or p.zero_stage < 2 or self.deepspeed:
            return  # DeepSpeed's convention counts its own buffers instead (deepspeed_states)
        if self.fsdp2:
            self._fsdp2_buffers()
            return
        gbits, wbits = precision.bits("gradients"), precision.bits("weights")
        layer_elements = self.shapes.layer_rank
        ends = {"layers": (BWD_LAYER_LAST, self.bwd_end), "head": (BWD_HEAD, BWD_HEAD),
                "embedding": (BWD_EMBEDDING, BWD_EMBEDDING)}
        for part, (first, last) in ends.items():
            if part not in self.parts:
                continue
            count = layer_elements if part == "layers" else self.parts[part]
            size = tensor_bytes(count, gbits)
            what = "one layer" if part == "layers" else f"the {part}"
            self.add(f"zero.unsharded_grad.{part}", "gradients",
                     f"Unsharded gradient of {what} until it is reduce-scattered (ZeRO-{p.zero_stage})",
                     f"{count:,} params × {gbits} bit ÷ 8", size, self.per_stage(size), Life("micro-batch", first, last))
        if p.zero_stage < 3:
            return
        gathered = tensor_bytes(2 * layer_elements, wbits) if self.kind.layers > 1 else tensor_bytes(layer_elements, wbits)
        layers_gathered = 2 if self.kind.layers > 1 else 1
        self.add("zero.gathered.layers", "weights",
                 "Weights of the layer computing and the next, prefetched, gathered whole (ZeRO-3)",
                 f"{layers_gathered} × {layer_elements:,} params × {wbits} bit ÷ 8", gathered, self.per_stage(gathered),
                 Life("micro-batch", only=tuple(x for x in (FWD_LAYER_FIRST, FWD_LAYER_LAST, BWD_LAYER_LAST, BWD_LAYER_FIRST)
                                                if x in self.names), first=FWD_LAYER_FIRST))
        for part, phases in (("embedding", (FWD_EMBEDDING, BWD_EMBEDDING)), ("head", (FWD_LOSS, BWD_LOSS, BWD_HEAD))):
            if part not in self.parts:
                continue
            count = self.parts[part]
            size = tensor_bytes(count, wbits)
            self.add(f"zero.gathered.{part}", "weights", f"Weights of the {part} gathered whole while it computes (ZeRO-3)",
                     f"{count:,} params × {wbits} bit ÷ 8", size, self.per_stage(size),
                     Life("micro-batch", phases[0], only=phases))


    def _fsdp2_buffers(self) -> None:
        """What FSDP2 holds unsharded while a layer computes, with one fully_shard per decoder layer and one at the
        root (the embedding, final norm and output layer).

        * A layer's parameters are all-gathered in the weights' dtype (MixedPrecisionPolicy.param_dtype) before it
          computes and freed after (reshard_after_forward=True); the next layer's all-gather output is held beside
          it (implicit prefetch in forward, FSDPParamGroup.wait_for_unshard; explicit prefetch in backward).
        * The root is not resharded after forward (FSDPState._lazy_init sets its post_forward_mesh_info to None):
          its parameters stay gathered from the first forward operation to the end of backward.
        * Backward writes a layer's unsharded gradients in the weights' dtype; foreach_reduce copies them into
          one flat reduce-scatter input in the reduce dtype (the gradients' dtype here) and frees them; that input
          is kept until the next group's reduce-scatter (reduce_scatter_max_input_buffers = 1). The root's
          gradients wait for the root's own post-backward at the end of backward.
        """
        precision = self.training.precision
        wbits, rbits = precision.bits("weights"), precision.bits("gradients")
        layer_elements = self.shapes.layer_rank
        source = f"FSDP2 convention: {FSDP2_GROUP}"
        layers_gathered = 2 if self.kind.layers > 1 else 1
        one_gathered = tensor_bytes(layer_elements, wbits)
        one_text = f"{layer_elements:,} params × {wbits} bit ÷ 8"
        if FP8_RECIPES[self.training.fp8].fp8_all_gather:  # the linear weights gathered in float8, the rest as is
            matmul = self.shapes.layer_matmul_rank
            one_gathered = matmul + tensor_bytes(layer_elements - matmul, wbits)
            one_text = (f"({matmul:,} linear weights × 8 bit + {layer_elements - matmul:,} params × {wbits} bit) ÷ 8 "
                        "[torchao/float8/fsdp_utils.py, fsdp_pre_all_gather: float8 all-gather]")
        gathered = layers_gathered * one_gathered
        layer_phases = tuple(x for x in (FWD_LAYER_FIRST, FWD_LAYER_LAST, BWD_LAYER_LAST, BWD_LAYER_FIRST)
                             if x in self.names)
        self.add("fsdp2.gathered.layers", "weights", "Parameters of the layer computing and the next, gathered "
                 "whole (FSDP2)", f"{layers_gathered} × {one_text} [{source}, unshard and wait_for_unshard]", gathered,
                 self.per_stage(gathered), Life("micro-batch", layer_phases[0], only=layer_phases))
        held_phases = tuple(x for x in (FWD_LOSS, BWD_LOSS, BWD_HEAD) if x in self.names)
        if held_phases:
            held = one_gathered
            self.add("fsdp2.all_gather_held", "weights", "The last layer's all-gather output, whose free forward "
                     "defers to the next all-gather (FSDP2)", f"{one_text} "
                     f"[{source}, wait_for_unshard: comm_ctx.all_gather_state]", held, self.per_stage(held),
                     Life("micro-batch", held_phases[0], only=held_phases))
        unsharded = tensor_bytes(layer_elements, wbits)
        self.add("fsdp2.unsharded_grad.layers", "gradients", f"One layer's unsharded gradients in {precision.weights}, "
                 "until they are copied into the reduce-scatter input (FSDP2)",
                 f"{layer_elements:,} params × {wbits} bit ÷ 8 [{source}, post_backward]", unsharded,
                 self.per_stage(unsharded), Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))
        after_first = tuple(x for x in (BWD_LAYER_FIRST, BWD_EMBEDDING) if x in self.names)
        if after_first:
            reduce_input = tensor_bytes(layer_elements, rbits)
            self.add("fsdp2.reduce_scatter_input.layers", "gradients", f"A layer's gradients in {precision.gradients}, "
                     "the reduce-scatter input, held until the next group's reduce-scatter (FSDP2)",
                     f"{layer_elements:,} params × {rbits} bit ÷ 8 [FSDP2 convention: {FSDP2_COLLECTIVES}, "
                     f"foreach_reduce; {FSDP2_GROUP}, reduce_scatter_max_input_buffers = 1]", reduce_input,
                     self.per_stage(reduce_input), Life("micro-batch", after_first[0], only=after_first))
        root = [part for part in ("embedding", "head") if part in self.parts]
        if not root:
            return
        elements = sum(self.parts[part] for part in root)
        words = " and ".join({"embedding": "embedding", "head": "final norm and output layer"}[part] for part in root)
        size = tensor_bytes(elements, wbits)
        self.add("fsdp2.gathered.root", "weights", f"The root's parameters ({words}) gathered whole in "
                 f"{precision.weights}, from forward to the end of backward (FSDP2)",
                 f"{elements:,} params × {wbits} bit ÷ 8 [FSDP2 convention: {FSDP2_STATE}, _lazy_init: the root is not "
                 "resharded after forward]", size, self.per_stage(size),
                 Life("micro-batch", self.phases[0].id, self.phases[-1].id))
        last = self.phases[-1].id
        if "head" in root:
            head = tensor_bytes(self.parts["head"], wbits)
            self.add("fsdp2.unsharded_grad.head", "gradients", f"The final norm's and output layer's unsharded "
                     f"gradients in {precision.weights}, until the root's reduce-scatter (FSDP2)",
                     f"{self.parts['head']:,} params × {wbits} bit ÷ 8 [{source}, post_backward]", head,
                     self.per_stage(head), Life("micro-batch", BWD_HEAD, last))
        if "embedding" in root:
            embedding = tensor_bytes(self.parts["embedding"], wbits)
            self.add("fsdp2.unsharded_grad.embedding", "gradients", f"The embedding's unsharded gradient in "
                     f"{precision.weights}, until the root's reduce-scatter (FSDP2)",
                     f"{self.parts['embedding']:,} params × {wbits} bit ÷ 8 [{source}, post_backward]", embedding,
                     self.per_stage(embedding), Life("micro-batch", BWD_EMBEDDING, only=(BWD_EMBEDDING,)))
        # The root's own reduce-scatter input is left out: the root reshards before it reduces
        # (FSDPParamGroup.post_backward), so that input, in the same dtype, takes the place of its gathered
        # parameters, and the held layer input is dropped first; backward's end (FSDPParamGroup.finalize_backward)
        # releases it before the optimizer step.


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
    # The model states' buffers depend on the architecture, the stage, the layout and the training's precision,
    # optimizer, framework, implementation, FP8 recipe and fine-tuning: not on the batch, the sequence, the attention
    # or the loss, which a session changes most. They are kept per those inputs.
    key = (arch, kind, parallelism, texts, training.precision, training.optimizer, training.optimizer_implementation,
           training.adafactor_momentum, training.framework, training.implementation, training.fp8, training.finetuning)
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


_STATE_BUFFERS: dict[tuple, tuple[tuple[Buffer, ...], tuple[Buffer, ...]]] = {}
_MAX_STATE_BUFFERS: Final = 512
