"""The loss's buffers: the logits, their fp32 upcast and gradients (whole or chunked), Liger's fused
linear cross entropy, and a mixture's router logits that the loop keeps."""

from __future__ import annotations

from app.core import activations as act
from app.core.classifier_tensors import logits_shape, upcasts_logits
from app.core.contributors.base import (
    BWD_HEAD,
    BWD_LOSS,
    FORWARDED,
    FWD_LAYER_FIRST,
    FWD_LOSS,
    StageBase,
    _ceil_text,
    _next_power_of_2,
)
from app.core.finetuning import head_trains
from app.core.setup import (
    LOOPS,
    effective_loop,
)
from app.core.timeline import Life
from app.core.units import ceil_div


class Loss(StageBase):
    def _loss_buffers(self) -> None:
        if not self.kind.last:
            return
        arch, setup, training = self.arch, self.setup, self.training
        rows, width, dims = logits_shape(arch, setup)
        v_rank = ceil_div(rows * width, self.parallelism.tensor)
        half = setup.half_bytes
        dims = _ceil_text(dims, self.parallelism.tensor)  # the vocabulary split over tensor-parallel ranks
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
        if not upcasts_logits(arch, setup):  # a classifier's cross entropy over its logits as they are
            self._loss_gradients(dims, per * half, half)
            return
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

    def _loss_gradients(self, dims: str, size: int, width: int) -> None:
        """The cross entropy's two gradients over logits it does not upcast (a classifier's, in their dtype)."""
        for key, label, phases in (("loss.grad_log_probs", "Gradient of the log-probabilities (nll_loss backward)",
                                    (BWD_LOSS,)),
                                   ("loss.grad_logits", "Gradient of the logits (log_softmax backward)", (BWD_HEAD,))):
            self.add(key, "temporary", label, f"{width} B × {dims}", size, self.per_stage(size),
                     Life("micro-batch", BWD_LOSS, phases[-1]))

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
