"""What sharding the states adds: DeepSpeed's estimator convention and buckets, ZeRO's gathered layers and
unsharded gradients, FSDP2's all-gather and reduce-scatter buffers."""

from __future__ import annotations

from app.core import states
from app.core.contributors.base import (
    BWD_EMBEDDING,
    BWD_HEAD,
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    BWD_LOSS,
    DS_ZERO2,
    DS_ZERO3,
    FSDP2_COLLECTIVES,
    FSDP2_GROUP,
    FSDP2_STATE,
    FWD_EMBEDDING,
    FWD_LAYER_FIRST,
    FWD_LAYER_LAST,
    FWD_LOSS,
    StageBase,
)
from app.core.optimizers import FP32_BITS
from app.core.setup import (
    FP8_RECIPES,
    OFFLOADS,
)
from app.core.timeline import OPTIMIZER_STEP, START, Life
from app.core.units import ceil_div, tensor_bytes


class Sharding(StageBase):
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
        self._fsdp2_layer_buffers()
        self._fsdp2_root_buffers()

    def _fsdp2_layer_buffers(self) -> None:
        """The layers' share of `_fsdp2_buffers`: gathered parameters, unsharded gradients, the reduce-scatter
        input."""
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

    def _fsdp2_root_buffers(self) -> None:
        """The root's share of `_fsdp2_buffers`: its parameters gathered through the step, its unsharded gradients."""
        precision = self.training.precision
        wbits = precision.bits("weights")
        source = f"FSDP2 convention: {FSDP2_GROUP}"
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
