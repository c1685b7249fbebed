"""Short-lived buffers that belong to no single kernel: context parallelism's K and V chunks in flight,
dequantised QLoRA weights, a recomputed layer's rebuild and autocast's weight copies."""

from __future__ import annotations

from typing import Final

from app.core import activations as act
from app.core.contributors.base import (
    ACTS,
    BWD_HEAD,
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    FORWARDED,
    FWD_LAYER_FIRST,
    FWD_LOSS,
    StageBase,
    _listed,
)
from app.core.finetuning import linear_modules
from app.core.recompute import rebuild_beyond_freed
from app.core.timeline import Life
from app.core.units import DTYPE_BITS, ceil_div, tensor_bytes

FP16_BYTES = DTYPE_BITS["fp16"] // 8


# What the loss makes after the output layer has written the logits (contributors.loss, saved).
_MADE_AFTER_THE_LOGITS: Final = ("loss.upcast", "activations.loss")


class Temporaries(StageBase):
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
        one weight at a time: the layers' largest, through the micro-batch."""
        ft = self.training.finetuning
        if ft.method != "qlora":
            return
        largest = ceil_div(max(tensor.elements for tensor in linear_modules(self.arch)), self.parallelism.tensor)
        size, formula = self._dequantized_bytes(largest)
        label = f"The largest {ft.quantization} weight dequantized for its matmul"
        if ft.dequantizes_from_fp16 and self.training.precision.activations != "fp16":
            label += ", in fp16 and cast (bitsandbytes before 0.43.0)"
        self.add("qlora.dequantized", "temporary", label, formula, size, self.per_stage(size),
                 Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end))

    def _dequantized_head(self) -> None:
        """A quantized output layer (Training.quantizes_output_layer) dequantized for its own matmuls, in place of the
        layers' largest weight counted through the micro-batch: in the backward beside the logits' gradient; in the
        forward beside the logits it writes but before the loss's upcast and saved tensors, so only where it outweighs
        those."""
        if not (self.training.quantizes_output_layer and self.kind.last):
            return
        layer = next(b.bytes for b in self.buffers if b.key == "qlora.dequantized")
        head = ceil_div(self.arch.vocab_size * self.arch.hidden_size, self.parallelism.tensor)
        size, formula = self._dequantized_bytes(head)
        label = f"The {self.training.finetuning.quantization} output layer dequantized for its matmul"
        if size > layer:
            self.add("qlora.dequantized_head", "temporary", f"{label} (backward)", f"{formula} − {layer:,} B",
                     size - layer, self.per_stage(size - layer), Life("micro-batch", BWD_HEAD, only=(BWD_HEAD,)))
        after = sum(b.bytes for b in self.buffers if b.key in _MADE_AFTER_THE_LOGITS)
        if size > layer + after:
            self.add("qlora.dequantized_head.forward", "temporary", f"{label} (forward)",
                     f"{formula} − {layer:,} B − {after:,} B (the loss's after the logits)", size - layer - after,
                     self.per_stage(size - layer - after), Life("micro-batch", FWD_LOSS, only=(FWD_LOSS,)))

    def _dequantized_bytes(self, elements: int) -> tuple[int, str]:
        """One weight of `elements` dequantized: in the compute dtype, and before bitsandbytes 0.43.0 first in fp16
        (app.core.finetuning, dequantizes_from_fp16)."""
        half = self.setup.half_bytes
        size, formula = elements * half, f"{elements:,} × {half} B"
        if self.training.finetuning.dequantizes_from_fp16 and self.training.precision.activations != "fp16":
            size += elements * FP16_BYTES
            formula += f" + {elements:,} × {FP16_BYTES} B: the second in fp16"
        return size, formula

    def _recomputation(self) -> None:
        checkpointing = self.checkpointing
        rebuilt = act.recompute_workspace(self.arch, self.setup, checkpointing, full=self.layer_saved)
        if not rebuilt:
            return
        size, text = act.total_bytes(rebuilt), _listed(rebuilt)
        if checkpointing == "full" and self.recomputed.partial:
            self._partial_rebuilds(size, text)
            return
        self.add("recompute", "temporary", "One layer rebuilt during backward (recomputation)",
                 text, size, self.per_stage(size),
                 Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))
        if self.training.use_reentrant:
            self._reentrant_output()

    def _reentrant_output(self) -> None:
        """The reentrant checkpoint runs the whole layer again in its backward, the residual sum that is the layer's
        output too, and holds that output until the layer's backward returns (torch.utils.checkpoint,
        CheckpointFunction.backward); the non-reentrant one stops once the saved tensors are rebuilt
        (set_checkpoint_early_stop). Measured on CPU: docs/VALIDATION.md, "Reentrant checkpoints"."""
        setup, h = self.setup, self.arch.hidden_size
        size = setup.micro_batch_size * setup.seq_len * h * setup.stream_bytes
        self.add("recompute.output", "temporary", "The rebuilt layer's output, which the reentrant checkpoint holds "
                 "through the layer's backward", f"{setup.micro_batch_size} × {setup.seq_len:,} × {h:,} × "
                 f"{setup.stream_bytes} B", size, self.per_stage(size), Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _partial_rebuilds(self, size: int, text: str) -> None:
        """Some layers recomputed: at the top layer's backward, the highest recomputed layer's rebuild beyond what the
        kept layers above it have freed by then (their saved tensors, less the gradients they leave: measured on CPU,
        docs/VALIDATION.md, "Recomputing some layers"); at the lowest layer's backward the whole rebuild, where that
        layer is recomputed."""
        recomputed = self.recomputed
        above = recomputed.layers - 1 - recomputed.highest
        if above:
            freed = act.total_bytes(self.layer_saved) - self._layer_gradient_bytes()
            top = rebuild_beyond_freed(recomputed, size, freed)
            top_text = f"{text} − {above} kept layers above it × {freed:,} B, freed by then less their gradients"
        else:
            top, top_text = size, text
        if top > 0:
            self.add("recompute", "temporary", "The highest recomputed layer rebuilt during backward (recomputation)",
                     top_text, top, self.per_stage(top), Life("micro-batch", BWD_LAYER_LAST, only=(BWD_LAYER_LAST,)))
        if self.kind.layers > 1:
            self._lowest_layer(size, text)

    def _lowest_layer(self, rebuild: int, text: str) -> None:
        """The lowest layer's backward: the saved-tensors line counts the average layer there (its share of the
        stage's), where the lowest layer keeps its input if it is recomputed, everything if not; recomputed, it is
        rebuilt as well."""
        layers = next(b.bytes for b in self.buffers if b.key == "activations.layers")
        share = layers // self.kind.layers
        if self.recomputed.is_recomputed(0):
            kept = act.total_bytes(act.checkpointed_layer_activations(self.arch, self.setup, "full"))
            size = rebuild + kept - share
            self.add("recompute.lowest", "temporary", "The lowest layer rebuilt during its backward (recomputation), "
                     "beyond the average layer's share of the saved tensors", f"{text} + {kept:,} B kept − {share:,} B",
                     size, self.per_stage(size), Life("micro-batch", BWD_LAYER_FIRST, only=(BWD_LAYER_FIRST,)))
            return
        size = act.total_bytes(self.layer_saved) - share
        if size > 0:
            self.add("activations.lowest", "activations", "The lowest layer keeps all it saves, more than the average "
                     "layer's share of the saved tensors", f"{act.total_bytes(self.layer_saved):,} B − {share:,} B",
                     size, self.per_stage(size), Life("micro-batch", BWD_LAYER_FIRST, only=(BWD_LAYER_FIRST,)))

    def _autocast_partly_recomputed(self, per_layer_elements: int, bits: int) -> None:
        """Autocast's copies with some layers recomputed: a kept layer's matmuls keep theirs until its backward, a
        recomputed layer's stay in autocast's cache until the forward's region ends and are made again in backward."""
        dtype, recomputed = self.setup.precision.activations, self.recomputed
        one = tensor_bytes(per_layer_elements, bits)
        kept = recomputed.layers - recomputed.count
        self.add("autocast.layers", "temporary", f"{dtype} copies of the kept layers' matmul weights, kept by the "
                 "matmuls until each layer's backward", f"{kept} × {per_layer_elements:,} × {bits} bit ÷ 8",
                 kept * one, self.per_stage(kept * one), Life("micro-batch", FWD_LAYER_FIRST, self.bwd_end, ramp=ACTS))
        size = recomputed.count * one
        self.add("autocast.recomputed_layers", "temporary", f"{dtype} copies of the recomputed layers' matmul weights "
                 "in autocast's cache, until the forward's autocast region ends",
                 f"{recomputed.count} × {per_layer_elements:,} × {bits} bit ÷ 8", size, self.per_stage(size),
                 Life("micro-batch", FWD_LAYER_FIRST, FWD_LOSS if self.kind.last else self.fwd_end, ramp=FORWARDED))
        self.add("autocast.recompute", "temporary", f"{dtype} copies one recomputed layer makes again in backward",
                 f"{per_layer_elements:,} × {bits} bit ÷ 8", one, self.per_stage(one),
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
        if self.recomputed.partial:
            self._autocast_partly_recomputed(per_layer_elements, bits)
        elif self.recomputed.all:
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
