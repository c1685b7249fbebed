"""The working sets of a dense layer's backward: attention's (fused kernels and the math path) and the
MLP's, as measured on CPU."""

from __future__ import annotations

from app.core import activations as act
from app.core.contributors.base import (
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    FWD_LAYER_FIRST,
    FWD_LAYER_LAST,
    StageBase,
    finetunes,
    mlp_backward_modelled,
)
from app.core.families import family_of
from app.core.timeline import Life
from app.core.units import ceil_div, tensor_bytes


class Backward(StageBase):
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
        if family_of(arch).gpt2_modules:  # softmax in the scores' own dtype, no cast to take a gradient of
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
        if self.recomputed.top:  # the top layer's forward, the one that holds the most
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
        recomputed = self.recomputed.top  # the top layer's backward is the one counted
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
        lowest = self.recomputed.is_recomputed(0)
        split = full and self.recomputed.partial and lowest != recomputed and self.kind.layers > 1
        if size > 0:
            # With adapters, the lowest layer's backward holds less than this (measured below it on CPU and on the H200
            # by about n × h): counted where the backward starts, which under adapters always holds more.
            life = (Life("micro-batch", BWD_LAYER_LAST, self.bwd_end) if full and not split
                    else Life("micro-batch", BWD_LAYER_LAST, only=(BWD_LAYER_LAST,)))
            self.add("mlp.backward", "temporary", "One layer's MLP backward: the gradients of its n × I tensors, less "
                     "the layer's gradients not yet written",
                     f"{terms} − {grads - written:,} B of gradients written later", size, self.per_stage(size), life)
        if split:  # the lowest layer recomputed and the top one kept, or the other way round
            self._lowest_mlp_backward(grads, lowest, post_norm)

    def _lowest_mlp_backward(self, grads: int, recomputed: bool, post_norm: bool) -> None:
        """`_mlp_backward` at the lowest layer's backward, where some layers are recomputed and that layer's policy
        differs from the top one's (measured on CPU: docs/VALIDATION.md, "Recomputing some layers")."""
        if post_norm:
            size, terms, written, _ = self._post_norm_full_backward(grads, recomputed)
        else:
            size, terms, written, _ = self._mlp_working_set(grads, recomputed, full=True, post_norm=post_norm)
        if size <= 0:
            return
        self.add("mlp.backward.lowest", "temporary", "The lowest layer's MLP backward: the gradients of its n × I "
                 "tensors, less the layer's gradients not yet written",
                 f"{terms} − {grads - written:,} B of gradients written later", size, self.per_stage(size),
                 Life("micro-batch", BWD_LAYER_FIRST, only=(BWD_LAYER_FIRST,)))

    def _mlp_working_set(self, grads: int, recomputed: bool, *, full: bool,
                         post_norm: bool) -> tuple[int, str, int, int]:
        """`_mlp_backward` except full training with a norm after the MLP: (bytes beyond the event's other lines, the
        formula, the layer's gradients written by then, the working set)."""
        arch, setup, training = self.arch, self.setup, self.training
        n, h, inter, w = setup.tokens, arch.hidden_size, arch.ffn_size, setup.half_bytes
        factors = 2 if full else 3
        if full and not arch.is_gated and arch.hidden_act != "gelu_new":
            # An activation of one kernel (StarCoder2's gelu_pytorch_tanh), not GPT-2's five operations: the gradient
            # of one n × I tensor (measured on CPU, bf16 and fp32, I/h 4 and 6, under recomputation).
            factors = 1
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
        gemma3 = family_of(arch).sandwich_norms
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
