"""A mixture of experts' backward and dispatch: the routed tokens' buffers, gpt-oss's layer backward moment
by moment, and experts wrapped for fine-tuning."""

from __future__ import annotations

from app.core import activations as act
from app.core.architecture import layer_tensors
from app.core.contributors.base import (
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    FWD_LAYER_FIRST,
    FWD_LAYER_LAST,
    StageBase,
    finetunes,
    moe_backward_modelled,
)
from app.core.families import family_of
from app.core.finetuning import experts_wrapped
from app.core.timeline import Life
from app.core.units import tensor_bytes


class Experts(StageBase):
    def _moe_backward(self) -> None:
        """A mixture-of-experts layer's backward working set, trained in full or with LoRA on the attention, in half
        precision (Hugging Face's Mixtral and Qwen3-MoE blocks, `_hf_moe` in saved/experts.py), at each layer's
        backward: the largest of three moments, each beyond the event's other lines (which count the layer's gradients written).

        First, before any of the layer's gradients is written: the gradients of the routed tokens' weighted outputs
        and of the combine, three n·k × h tensors in the routing weights' dtype (fp32 for Mixtral, the activations'
        for Qwen3-MoE, `Family.fp32_routing`), beside the layer's output gradient (n × h); without recomputation,
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
        recomputed = self.recomputed.top  # the top layer's backward is the one counted
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

    def _gpt_oss_backward(self) -> None:
        """gpt-oss's layer backward trained in full (GptOssDecoderLayer: eager attention with sinks, GptOssExperts
        with biases and the clamped GLU), in half precision: the largest of its moments (`_gpt_oss_moments`, and
        under recomputation `_gpt_oss_rebuilt_moments`), each beyond the layer's kept (or rebuilt) tensors and the
        gradients of the layers whose backward has ended (the `GRADS_DONE` ramp). Measured on CPU
        (docs/VALIDATION.md, "gpt-oss"): k from 1 to 4, I/h 0.5 to 4, 4 to 8 experts, 256 to 1,024 tokens and 128 to
        512 positions, with and without recomputation, each layer event within 0.07%; the attention's moments at
        1,024 and 2,048 positions within 0.33 n·h·w bytes."""
        moments = self._gpt_oss_moments()
        if self.recomputed.top:  # the top layer's backward is the one counted
            moments |= self._gpt_oss_rebuilt_moments()
        name = max(moments, key=lambda key: moments[key][0])
        size, terms = moments[name]
        if size <= 0:
            return
        self.add("moe.backward", "temporary", f"One gpt-oss layer's backward at its largest moment ({name}), beyond "
                 "its kept tensors and the gradients of the layers before it", terms,
                 size, self.per_stage(size), Life("micro-batch", BWD_LAYER_LAST, self.bwd_end))

    def _gpt_oss_moments(self) -> dict[str, tuple[int, str]]:
        """gpt-oss's layer backward moment by moment (`_gpt_oss_backward`), each as (bytes, formula):

        - The routed tokens' gradients, before any of the layer's gradients is written: three n·k × h tensors
          beside the layer's output gradient (`_routed_gradients`; the routing weights are in the activations'
          dtype), and under recomputation n × h more: 3 n·k·h·w + n·h·w (+ n·h·w).
        - Inside the experts' MLP backward, as Mixtral's trained in full (`_experts_mlp_backward`): 2 n·k·I·w −
          n·k·h·w + n·h·w with the down projections' gradient written.
        - The post-attention norm's backward, in fp32, once the experts' tensors are freed and their gradients
          written: five fp32 n × h tensors, less the tensors the mixture kept and an n × h one.
        - The attention's softmax backward, once the norm's tensors are freed too and the output projection's
          gradient written: two b·a·s·(s + 1) tensors (the probabilities with the sinks' column), in place of the
          fp32 gradient of the probabilities other eager attention makes (`_attention_backward`)."""
        n, h, _, w, _ = self._routing()
        b, s, a = self.setup.micro_batch_size, self.setup.seq_len, self.arch.num_attention_heads
        experts, mixture = self._gradient_bytes_of("moe."), self._kept_bytes_of("moe.")
        routed, routed_terms = self._routed_gradients()
        later, down, later_terms = self._experts_mlp_backward(full=True)
        out_proj = self._gradient_bytes_of("attn.o.")
        norm_kept = self._kept_bytes_of("mlp_norm.")
        return {
            "routed": (routed + n * h * w, f"{routed_terms} + {n:,} × {h:,} × {w} B") if self.recomputed.top
            else (routed, routed_terms),
            "experts": (later + down, f"{later_terms} + {down:,} B of the down projections' gradient"),
            "norm": (5 * n * h * act.FP32_BYTES + experts - mixture - n * h * w,
                     f"5 × {n:,} × {h:,} × 4 B + {experts:,} B of the mixture's gradients − {mixture:,} B it kept − "
                     f"{n:,} × {h:,} × {w} B"),
            "attention": (2 * b * a * s * (s + 1) * w + experts + out_proj - mixture - norm_kept,
                          f"2 × {b} × {a} × {s:,} × {s + 1:,} × {w} B + {experts + out_proj:,} B of "
                          f"gradients − {mixture + norm_kept:,} B kept"),
        }

    def _gpt_oss_rebuilt_moments(self) -> dict[str, tuple[int, str]]:
        """gpt-oss's layer backward under recomputation, two moments more (`_gpt_oss_backward`), as (bytes, formula):
        the experts' MLP backward before the down projections' gradient is written, 3 n·k·I·w + 2 n·h·w; and the
        rebuilt attention's softmax, which holds more for long sequences: the scores (b·a·s²), the scores with the
        sinks' column and less their maximum at once, before what is kept from the probabilities on is rebuilt,
        beside the routed tokens' first gradient (n·k × h) and 2 n × h."""
        n, h, k, w, _ = self._routing()
        setup, arch = self.setup, self.arch
        b, s, a, inter = setup.micro_batch_size, setup.seq_len, arch.num_attention_heads, arch.expert_size
        kept = self._kept_bytes_of("moe.", "mlp_norm.", "attn.softmax_with_sink", "attn.out_proj_input")
        return {
            "experts, early": (3 * n * k * inter * w + 2 * n * h * w,
                               f"3 × {n:,} × {k} × {inter:,} × {w} B + 2 × {n:,} × {h:,} × {w} B"),
            "attention, rebuilt": (
                b * a * s * s * w + 2 * b * a * s * (s + 1) * w + n * k * h * w + 2 * n * h * w - kept,
                f"{b} × {a} × {s:,}² × {w} B + 2 × {b} × {a} × {s:,} × {s + 1:,} × {w} B + {n:,} × {k} × {h:,} × "
                f"{w} B + 2 × {n:,} × {h:,} × {w} B − {kept:,} B kept from the probabilities on"),
        }

    def _gradient_bytes_of(self, *prefixes: str) -> int:
        """The gradients of one layer's parameters whose names start with one of `prefixes`, unsharded."""
        bits = self.training.precision.bits("gradients")
        return sum(tensor_bytes(x.elements, bits) for x in layer_tensors(self.arch) if x.name.startswith(prefixes))

    def _kept_bytes_of(self, *prefixes: str) -> int:
        """What one layer keeps (`layer_saved`) under names that start with one of `prefixes`."""
        return sum(x.bytes for x in self.layer_saved if x.name.startswith(prefixes))

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
        (r: fp32 for Mixtral and DeepSeek-V3, the activations' for Qwen3-MoE, `Family.fp32_routing`)."""
        arch, w = self.arch, self.setup.half_bytes
        r = act.FP32_BYTES if family_of(arch).fp32_routing else w
        return self.setup.tokens, arch.hidden_size, arch.num_experts_per_tok, w, r

    def _routed_gradients(self) -> tuple[int, str]:
        """A mixture-of-experts layer's backward before any of its weights' gradients: three n·k × h tensors in the
        routing weights' dtype beside the layer's output gradient (n × h), in bytes, and its formula
        (`_moe_backward`)."""
        n, h, k, w, r = self._routing()
        return 3 * n * k * h * r + n * h * w, f"3 × {n:,} × {k} × {h:,} × {r} B + {n:,} × {h:,} × {w} B"

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
