"""The model states' buffers: weights, the master copy, gradients, the optimizer's state and its step's
scratch, per framework's convention (plain PyTorch, Megatron-LM's main gradients), with fine-tuning's share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from app.core import states
from app.core.contributors.base import (
    BWD_EMBEDDING,
    BWD_HEAD,
    BWD_LAYER_LAST,
    FSDP2_PARAM,
    GRADS,
    GRADS_DONE,
    MEGATRON_DIST_OPT,
    Buffer,
    StageBase,
    _group_words,
)
from app.core.optimizers import (
    BNB_PAGED_MIN_ELEMENTS,
    FP32_BITS,
    OPTIMIZER_INFO,
    optimizer_formula,
    optimizer_label,
)
from app.core.setup import (
    OFFLOADS,
)
from app.core.timeline import OPTIMIZER_STEP, START, Life
from app.core.units import ceil_div, tensor_bytes


class ModelStates(StageBase):
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
                # Every layer alike: each one's elements before expert parallelism's split (noted after the total),
                # which `layer_rank` (one layer as ZeRO-3 gathers it) has applied
                terms.append(f"{self.kind.layers} layers × {self.parts['layers'] // self.kind.layers:,}")
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
        self._page_out(shapes.rank_shapes if states.is_sharded("optimizer_states", p) else shapes.rank_ep_shapes,
                       shapes.cluster_shapes if states.is_sharded("optimizer_states", p) else shapes.cluster_ep_shapes)
        self._gradients(precision.bits("gradients"))
        self._megatron_main_grads()
        self._optimizer_scratch(bits)

    def _page_out(self, rank_shapes: Iterable[tuple[tuple[int, ...], int]],
                  cluster_shapes: Iterable[tuple[tuple[int, ...], int]]) -> None:
        """A paged optimizer's large states leave the GPU's ledger for the host's: CUDA unified memory, outside
        PyTorch's allocator, that the driver keeps on the GPU while it fits and moves to host memory under pressure
        (optimizers.BNB_PAGED_MIN_ELEMENTS). What stays is the rest: small tensors' states and the block scales."""
        training, p = self.training, self.parallelism
        if not OPTIMIZER_INFO[training.optimizer].paged:
            return
        indices = [i for i, buffer in enumerate(self.buffers) if buffer.key == "optimizer_states"]
        paged_rank = states.paged_states_bytes(list(rank_shapes), training)
        if not indices or not paged_rank:  # offloaded to the host already (ZeRO-Offload), or nothing large enough
            return
        # Each part is sharded on its own, as each is its own allocation.
        total_rank = states.states_bytes(list(rank_shapes), training)["optimizer_states"]
        paged_cluster = states.paged_states_bytes(list(cluster_shapes), training)
        total_cluster = states.states_bytes(list(cluster_shapes), training)["optimizer_states"]
        kept = self.buffers[indices[-1]]
        self.buffers[indices[-1]] = kept._replace(
            bytes=states.on_rank(total_rank - paged_rank, "optimizer_states", p),
            cluster_bytes=states.over_group(total_cluster - paged_cluster, "optimizer_states", p) * self.kind.count,
            label=kept.label + " (what is not paged)")
        rank = states.on_rank(paged_rank, "optimizer_states", p)
        cluster = states.over_group(paged_cluster, "optimizer_states", p) * self.kind.count
        self.host.append(Buffer("optimizer_states.paged", "optimizer_states", f"{kept.label}: the paged part, "
                                "in CUDA unified memory (on the GPU while it fits, in host memory under pressure)",
                                f"2 moments of each tensor of {BNB_PAGED_MIN_ELEMENTS:,}+ elements [bitsandbytes "
                                "optim/optimizer.py, get_state_buffer]", rank, cluster, kept.life, self.names))

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
        ft = self.finetuned
        assert ft is not None
        self._finetuned_weights(ft)
        self._finetuned_master(ft)
        bits = self._finetuned_optimizer(ft)
        self._finetuned_gradients(ft)
        largest = max((states.largest_elements(list(part.rank_shapes)) for part in ft.parts.values()), default=0)
        self._optimizer_scratch(bits, params=ft.trainable_rank, largest=largest)

    def _finetuned_weights(self, ft: states.FinetunedStage) -> None:
        """The frozen base and what trains, each part at its own width."""
        p, trained = self.parallelism, ft.parts.values()
        weights_rank = ft.frozen_rank_bytes + sum(tensor_bytes(part.rank_elements, part.bits) for part in trained)
        weights_cluster = ft.frozen_cluster_bytes + sum(tensor_bytes(part.cluster_elements, part.bits)
                                                        for part in trained)
        trained_text = " + ".join(f"{part.rank_elements:,} trainable params ({part.what}) × {part.bits} bit ÷ 8"
                                  for part in trained)
        self.add("weights", "weights", f"Weights: the frozen base in {self.training.precision.weights}, and what trains",
                 f"{ft.frozen_text} + {trained_text}{self._shard_note('weights')}",
                 states.on_rank(weights_rank, "weights", p),
                 states.over_group(weights_cluster, "weights", p) * self.kind.count, Life("run", START))

    def _finetuned_master(self, ft: states.FinetunedStage) -> None:
        """A master copy of the trained parts narrower than the master weights' dtype (none where none is)."""
        p, precision = self.parallelism, self.training.precision
        master_bits = precision.bits("master_weights")
        master = [part for part in ft.parts.values() if master_bits > part.bits]
        if not master:
            return
        rank = sum(tensor_bytes(part.rank_elements, master_bits) for part in master)
        cluster = sum(tensor_bytes(part.cluster_elements, master_bits) for part in master)
        self.add("master_weights", "master_weights", f"Master copy in {precision.master_weights} of what trains "
                 "in a narrower dtype", " + ".join(f"{part.rank_elements:,} params × {master_bits} bit ÷ 8"
                                                   for part in master) + self._shard_note("master_weights"),
                 states.on_rank(rank, "master_weights", p),
                 states.over_group(cluster, "master_weights", p) * self.kind.count, Life("run", START))

    def _finetuned_optimizer(self, ft: states.FinetunedStage) -> int:
        """The optimizer's state of what trains (adapters' in fp32, as they are) and what a paged optimizer moves
        out of it; returns the state's width in bits."""
        training, p = self.training, self.parallelism
        precision = training.precision
        # torch's optimizers make their state like the parameter (torch.zeros_like): fp32 adapters get fp32 state.
        adapter_training = replace(training, precision=replace(precision, optimizer_states="fp32"))

        def optimizer_bytes(name: str, shapes: tuple) -> int:
            owner = adapter_training if training.finetuning.adapters and name == "layers" else training
            return states.states_bytes(list(shapes), owner)["optimizer_states"]

        rank_states = sum(optimizer_bytes(name, part.rank_shapes) for name, part in ft.parts.items())
        cluster_states = sum(optimizer_bytes(name, part.cluster_shapes) for name, part in ft.parts.items())
        bits = precision.bits("optimizer_states")
        if training.finetuning.adapters:
            bits = max(bits, FP32_BITS)
        share = f"{ft.trainable_rank:,} trainable params"
        self.add("optimizer_states", "optimizer_states",
                 optimizer_label(training.optimizer, adafactor_momentum=training.adafactor_momentum) + " of what trains",
                 optimizer_formula(training.optimizer, share=share, bits=bits,
                                   adafactor_momentum=training.adafactor_momentum) + self._shard_note("optimizer_states"),
                 states.on_rank(rank_states, "optimizer_states", p),
                 states.over_group(cluster_states, "optimizer_states", p) * self.kind.count, Life("run", OPTIMIZER_STEP))
        self._page_out(tuple(shape for part in ft.parts.values() for shape in part.rank_shapes),
                       tuple(shape for part in ft.parts.values() for shape in part.cluster_shapes))
        return bits

    def _finetuned_gradients(self, ft: states.FinetunedStage) -> None:
        """The gradients of each part that trains, at the adapters' width or the gradients' dtype."""
        training, p = self.training, self.parallelism
        gradient_bits = training.precision.bits("gradients")
        for name, (what, life) in self._gradient_lives().items():
            part = ft.parts.get(name)
            if part is None:
                continue
            part_bits = part.bits if training.finetuning.adapters else gradient_bits
            self.add(f"gradients.{name}", "gradients", f"Gradients {what} ({part.what})",
                     f"{part.rank_elements:,} params × {part_bits} bit ÷ 8{self._shard_note('gradients')}",
                     states.on_rank(tensor_bytes(part.rank_elements, part_bits), "gradients", p),
                     states.over_group(tensor_bytes(part.cluster_elements, part_bits), "gradients", p) * self.kind.count,
                     life)

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
