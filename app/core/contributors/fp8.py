"""FP8 training's casts and scales: torchao's and Transformer Engine's recipes."""

from __future__ import annotations

from app.core import activations as act
from app.core.architecture import layer_tensors
from app.core.contributors.base import (
    BWD_LAYER_FIRST,
    BWD_LAYER_LAST,
    FWD_LAYER_FIRST,
    FWD_LAYER_LAST,
    TE_MODULE,
    StageBase,
)
from app.core.optimizers import FP32_BITS
from app.core.setup import (
    FP8_RECIPES,
    TransformerEngineFp8,
)
from app.core.timeline import Life
from app.core.units import ceil_div


class Fp8(StageBase):
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
