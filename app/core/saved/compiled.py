"""A decoder layer compiled by torch.compile (inductor): what AOTAutograd's partitioner saves for backward.

Under torch.compile the forward and backward of a compiled region are traced as one joint graph, which AOTAutograd
splits with its default partitioner for inductor, ``min_cut_rematerialization_partition`` (pytorch/pytorch
cf30153c4c131c8164ee7798e5022d810682e2cb, torch 2.13.0's commit, torch/_functorch/partitioners.py): a minimum cut
between forward and backward over the tensors' sizes, under rules that keep some ops from being recomputed: the
matmuls and fused attention kernels (``get_default_op_list``: ``compute_intensive_ops``; ops outside
``recomputable_ops`` under ``ban_recompute_not_in_allowlist``), reductions (``ban_recompute_reductions``) and what a
backward kernel must read whole (``ban_recompute_materialized_backward``). The pointwise ops, casts and views between
them are recomputed inside the backward's fused kernels. The forward keeps the cut's tensors; the compiled
autograd.Function saves them with ``ctx.save_for_backward``. Which rule decides each tensor is not traced here: the
measured cut below is what the rule follows.

What that leaves of a Hugging Face layer (pre-norm RMSNorm, a gated MLP, a fused attention kernel), measured on CPU
with each decoder layer compiled as torchtune's ``compile_model`` compiles them (validation/compiled.py, Llama,
Mistral, Qwen2 and Gemma, bf16 and fp32, to the byte):

* each RMSNorm: its input in the residual stream's dtype (eager keeps an fp32 upcast), the fp32 reciprocal RMS per
  token, and its weighted output, the projections' input (eager keeps the normalised tensor before the weight too);
* attention as the fused kernel keeps it in eager: Q and K after the rotary embedding, V, the output and the fp32
  log-sum-exp (`_hf_attention`);
* the MLP: the gate and up projections' outputs and their product, the down projection's input (eager keeps the
  activation's output as well).

The rotary multiply, the casts, the activation function and the residual adds are recomputed in backward from these.
"""

from __future__ import annotations

from typing import Final

from app.core.architecture import Architecture
from app.core.saved.attention import _hf_attention
from app.core.saved.common import FP32_BYTES, ActivationSetup, Choice, SavedTensor, _Saved, choices

COMPILE_CHOICES: Final = choices(
    Choice("none", "None (eager)", "each op runs as written and keeps what its backward asks for"),
    Choice("inductor", "torch.compile (inductor)", "each decoder layer compiled, as torchtune's compile: True does: "
           "the partitioner keeps the norms' inputs instead of their fp32 copies and recomputes pointwise ops (the "
           "activation, the casts) in backward. Its cost: compiling at start-up and again for each new shape, no "
           "extra matmuls"),
)
COMPILES: Final = tuple(COMPILE_CHOICES)


def _compiled_norm(saved: _Saved, prefix: str, output: str, arch: Architecture, setup: ActivationSetup) -> None:
    """An RMSNorm and the output its projections read: the input (stream dtype), the fp32 1/RMS, the output."""
    n, h = setup.tokens, arch.hidden_size
    saved.add(f"{prefix}.input", n * h, setup.stream_bytes, "sequence")
    saved.add(f"{prefix}.rstd", n, FP32_BYTES, "sequence")
    saved.add(output, n * h, setup.half_bytes, "sequence")


def compiled_layer(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    """What one compiled decoder layer keeps for backward, for one micro-batch, without recomputation."""
    saved = _Saved(setup)
    n, inter = setup.tokens, arch.ffn_size
    _compiled_norm(saved, "attn_norm", "attn.qkv_input", arch, setup)
    _hf_attention(saved, arch, setup)
    _compiled_norm(saved, "mlp_norm", "mlp.input", arch, setup)
    for name in ("mlp.gate", "mlp.up", "mlp.product"):
        saved.add(name, n * inter, setup.half_bytes, "tensor")
    return tuple(saved.items)
