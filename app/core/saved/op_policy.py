"""torchtitan's op-level selective recomputation ("op"), as its 2025 releases define it.

Each transformer block runs under a non-reentrant checkpoint with a selective-checkpoint policy
(torch.utils.checkpoint.create_selective_checkpoint_contexts): the outputs of aten.mm and of the fused attention
kernels (aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention) are saved, except
every second aten.mm of the block's forward (a counter per block: the 2nd, 4th, 6th … are recomputed); everything else
is recomputed in backward (pytorch/torchtitan 81c1243, torchtitan/models/llama3/infra/parallelize.py, `_save_list`
and `_apply_ac_to_transformer_block`). Later releases moved the list (`_op_sac_save_list`, 018740b7) and then chose
tensors by name (torchtitan/distributed/activation_checkpoint.py, 01db32e9): this models the counted-matmul policy.

What a layer keeps, measured on CPU with Hugging Face's Llama, Mistral and Qwen2 layers (validation/op_sac.py and
validation/op_sac.md, to the byte in 12 cases):
* its input, kept by the checkpoint;
* the output of each odd-numbered aten.mm: a linear without a bias is an aten.mm (F.linear on a 3-D input decomposes
  to view, mm, _unsafe_view), one with a bias an aten.addmm, which the policy neither saves nor counts. In order q, k,
  v, o, gate, up, down, Llama saves q, v, gate and down; Qwen2, whose q, k and v have biases, saves o and up;
* the attention kernel's output and its fp32 log-sum-exp.
In backward the layer is rebuilt as under full recomputation, the saved outputs reused rather than made again;
recomputation stops once the last tensor backward needs is rebuilt (torch.utils.checkpoint's early stop), so a saved
output of the block's last matmul, which backward never reads, stays beside the rebuild until the layer's backward
ends (measured: Llama's down_proj output).
"""

from __future__ import annotations

from app.core.architecture import Architecture
from app.core.saved.attention import attention_kernel
from app.core.saved.common import FP32_BYTES, MEM_EFFICIENT_LSE_ALIGN, ActivationSetup, SavedTensor, Split, _Saved
from app.core.units import ceil_div

# The kernels whose outputs the policy saves: sdpa's fused ones (eager attention and sdpa's math path are recomputed)
FUSED_KERNELS = ("flash", "memory-efficient")


def _linears(arch: Architecture) -> list[tuple[str, int, bool]]:
    """The block's linears in forward order: (name, output width, whether it is an aten.mm, i.e. has no bias)."""
    q, kv = arch.num_attention_heads * arch.head_size, arch.kv_heads * arch.head_size
    qkv_mm = not (arch.attention_bias or arch.qkv_bias)
    mlp_mm = not arch.mlp_bias
    return [("q_proj", q, qkv_mm), ("k_proj", kv, qkv_mm), ("v_proj", kv, qkv_mm),
            ("o_proj", arch.hidden_size, not arch.attention_bias), ("gate_proj", arch.ffn_size, mlp_mm),
            ("up_proj", arch.ffn_size, mlp_mm), ("down_proj", arch.hidden_size, mlp_mm)]


def _saved_matmuls(arch: Architecture) -> list[tuple[str, int]]:
    """The linears whose outputs the policy saves: the odd-numbered aten.mm calls."""
    matmuls = [(name, width) for name, width, is_mm in _linears(arch) if is_mm]
    return [item for number, item in enumerate(matmuls, start=1) if number % 2]


def op_layer_activations(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    """What one layer keeps from its forward to its backward under the policy."""
    saved = _Saved(setup)
    n = setup.tokens
    saved.add("layer.input", n * arch.hidden_size, setup.stream_bytes, "sequence")
    for name, width in _saved_matmuls(arch):
        split: Split = "sequence" if name in ("o_proj", "down_proj") else "tensor"
        saved.add(f"op.{name}.output", n * width, setup.half_bytes, split)
    kernel = attention_kernel(arch, setup)
    if kernel in FUSED_KERNELS:
        b, s, a = setup.micro_batch_size, setup.seq_len, arch.num_attention_heads
        saved.add("op.attn.output", n * a * arch.head_size, setup.half_bytes, "tensor")
        queries = s if kernel == "flash" else ceil_div(s, MEM_EFFICIENT_LSE_ALIGN) * MEM_EFFICIENT_LSE_ALIGN
        saved.add("op.attn.logsumexp", b * a * queries, FP32_BYTES, "tensor")
    return tuple(saved.items)


def op_rebuild(arch: Architecture, setup: ActivationSetup, full: tuple[SavedTensor, ...]) -> tuple[SavedTensor, ...]:
    """What one layer's backward rebuilds beyond what it kept: everything it saves without recomputation but its
    input and the saved outputs, and the last matmul's saved output, which stays unused beside them."""
    kept = {item.name: item.bytes for item in op_layer_activations(arch, setup)}
    cached = sum(size for name, size in kept.items() if name != "layer.input")
    rebuilt = [SavedTensor("op.rebuilt", max(sum(item.bytes for item in full) - cached, 0))]
    matmuls = [name for name, _, is_mm in _linears(arch) if is_mm]
    last = f"op.{matmuls[-1]}.output" if matmuls else ""
    if last in kept:
        rebuilt.append(SavedTensor("op.unused_last_output", kept[last]))
    return tuple(rebuilt)


def op_recomputed_params(arch: Architecture) -> int:
    """The weights of the block's linears whose outputs the policy recomputes (each output element costs 2 FLOPs per
    weight in its row): the biased ones and the even-numbered aten.mm calls."""
    h, q = arch.hidden_size, arch.num_attention_heads * arch.head_size
    inputs = {"q_proj": h, "k_proj": h, "v_proj": h, "o_proj": q, "gate_proj": h, "up_proj": h,
              "down_proj": arch.ffn_size}
    saved = {name for name, _ in _saved_matmuls(arch)}
    return sum(inputs[name] * width for name, width, _ in _linears(arch) if name not in saved)
