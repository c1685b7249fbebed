"""Activation memory, tensor by tensor: what each layer saves for the backward pass.

The accounting follows Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models" (arXiv:2205.05198), section 4: list every tensor an operator keeps for its
gradient, once per storage, and add up their bytes. Two implementations are modelled because the
same architecture saves different tensors depending on the code that runs it:

``megatron``
    Fused kernels as in Megatron-LM: 16-bit softmax, 1-byte dropout masks, fused bias-GeLU and
    bias-dropout-add, fused rotary embeddings. For the GPT architecture (LayerNorm, GeLU MLP of 4h,
    multi-head attention, dropout > 0) with 16-bit activations, one layer saves exactly Table 2's
    ``sbh(34 + 5as/h)`` bytes; with tensor parallelism ``sbh(10 + 24/t + 5as/(ht))``, with sequence
    parallelism ``sbh(34/t + 5as/(ht))``, with selective recompute ``sbh(10 + 24/t)`` or
    ``34sbh/t``, and with full recompute ``2sbh``.

``transformers``
    Hugging Face modules as written (modeling_llama.py, modeling_gpt2.py, ...). Where they differ
    from Megatron, the reason is given next to the tensor: RMSNorm upcasts its input to fp32 and
    keeps it; eager attention keeps an fp32 softmax and its half-precision cast; grouped key and
    value heads are repeated to full width before the eager matmuls; SiLU, GeLU and the gate
    product each keep an intermediate-width tensor; GPT-2's ``gelu_new`` is composed of Python
    operations that keep four intermediate-width tensors; the loss keeps fp32 log-probabilities.

Notation: b micro-batch, s sequence, h hidden, a query heads, g key/value heads, d head size,
I intermediate size, V vocabulary, t tensor-parallel degree, N = b*s tokens.

`device` selects whose kernels decide what is saved: ``cuda`` (the product's target: dropout keeps a
1-byte mask, CUDA autocast runs softmax in fp32) or ``cpu`` (used to validate against CPU
measurements: dropout keeps its mask at the width of the tensor it drops).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from app.core.architecture import Architecture
from app.core.finetuning import Role
from app.core.saved.attention import attention_kernel
from app.core.saved.common import (
    ATTENTION_CHOICES,
    ATTENTIONS,
    BOOL_BYTES,
    CHECKPOINTING,
    CHECKPOINTING_CHOICES,
    FP32_BYTES,
    IMPLEMENTATION_CHOICES,
    IMPLEMENTATIONS,
    INDEX_BYTES,
    KERNELS,
    ActivationSetup,
    Attention,
    Checkpointing,
    Choice,
    Compile,
    Device,
    Implementation,
    Kernel,
    SavedTensor,
    Split,
    _Saved,
    choices,
)
from app.core.saved.compiled import COMPILE_CHOICES, COMPILES, compiled_layer
from app.core.saved.hf_layer import _hf_embedding, _hf_head, _hf_layer, _hf_logits_workspace
from app.core.saved.megatron import (
    _megatron_embedding,
    _megatron_head,
    _megatron_layer,
    _megatron_logits_workspace,
    megatron_fp8_layer,
    te_scale_bytes,
)
from app.core.saved.mla import _hf_mla_layer, _refuse_unmodelled_mla
from app.core.saved.op_policy import op_layer_activations, op_rebuild

# The names the rest of the core reads as act.<name>, defined in the rooms (app/core/saved/).
__all__ = [
    "ATTENTIONS", "ATTENTION_CHOICES", "ActivationSetup", "Attention", "CHECKPOINTING", "CHECKPOINTING_CHOICES",
    "COMPILES", "COMPILE_CHOICES", "Checkpointing", "Choice", "Compile", "Device", "FP32_BYTES", "FULL_ATTENTION_MASK",
    "IMPLEMENTATIONS", "IMPLEMENTATION_CHOICES", "Implementation", "KERNELS", "Kernel", "SavedTensor", "Split",
    "attention_kernel", "checkpoint_held_activations", "checkpointed_layer_activations", "choices",
    "embedding_activations", "head_activations", "layer_activations", "logits_workspace", "megatron_fp8_layer",
    "recompute_workspace", "sliding_window_layer", "te_scale_bytes", "total_bytes",
]


def layer_activations(arch: Architecture, setup: ActivationSetup, role: Role = "full", *,
                      dense: bool = False, local: bool = False) -> tuple[SavedTensor, ...]:
    """Every tensor one layer keeps for backward, for one micro-batch, without recomputation.

    For a mixture of experts, a sparse layer; ``dense`` asks for one of its first ``first_k_dense_replace``
    layers (``arch.dense_layers`` of them), whose MLP is dense. Under ``compile="inductor"``: what the partitioner
    keeps (`compiled_layer`; the rules refuse it where it was not measured). ``local``: one of the
    ``sliding_window_layers`` (`sliding_window_layer`).
    """
    if setup.compile == "inductor":
        return compiled_layer(arch, setup)
    if arch.is_mla:
        _refuse_unmodelled_mla(arch, setup)
        return tuple(_hf_mla_layer(arch, setup, role, dense=dense))
    if setup.implementation == "megatron":
        return tuple(_megatron_layer(arch, setup))
    return tuple(_hf_layer(arch, setup, role, dense=dense, local=local))


def _window_masked(arch: Architecture, setup: ActivationSetup) -> bool:
    """Whether transformers hands sdpa the sliding window as a mask: sdpa with sliding-window layers and a
    sequence at least as long as the window (masking_utils._ignore_causal_mask_sdpa, transformers 5.24, skips the mask
    only below it; measured at a sequence equal to the window: docs/VALIDATION.md, "More families")."""
    return bool(arch.sliding_window_layers and arch.sliding_window is not None and setup.seq_len >= arch.sliding_window
                and setup.implementation != "megatron" and setup.attention == "sdpa")


def sliding_window_layer(arch: Architecture, setup: ActivationSetup, role: Role = "full") -> tuple[SavedTensor, ...]:
    """Every tensor one of the ``sliding_window_layers`` keeps for backward, for one micro-batch.

    A sliding-window layer computes the same tensors as a full-attention one; only the mask differs. Eager
    attention adds the mask to the scores (an add keeps nothing) and a fused kernel given the window needs no
    mask, so they keep the same (`layer_activations`). sdpa is the exception once the sequence reaches the
    window (Gemma 3 in transformers 5.24; measured on CPU and on a GPU: docs/VALIDATION.md): transformers
    then passes the window as a b x 1 x s x s boolean mask, which sdpa converts to the query's dtype and the
    kernel keeps for its backward (one per layer). A mask rules out sdpa's grouped-query path
    (integrations/sdpa_attention.py, use_gqa_in_sdpa), so K and V are repeated to all a heads first
    (repeat_kv) and the kernel keeps the repeated ones: (a - g) heads more, except with one K/V head, where the
    repeat is a view of it (expand, then a reshape that merges a dimension of one). On CUDA a mask rules out
    the flash kernel, and the repeated K/V leave nothing grouped, so the memory-efficient kernel runs in every
    dtype (its log-sum-exp padded to 32 queries): in fp32, in place of the math path the grouped full-attention
    layers take. On CPU the math path (attention dropout) adds the mask to its scores and repeats K/V anyway.
    """
    if not _window_masked(arch, setup):
        return layer_activations(arch, setup, role, local=True)
    kernel = attention_kernel(arch, setup)
    if kernel == "eager" or (setup.device == "cpu" and kernel == "math"):
        return layer_activations(arch, setup, role, local=True)
    masked = setup if setup.device == "cpu" else replace(setup, attention="memory-efficient")
    saved = _Saved(masked)
    b, s, n = setup.micro_batch_size, setup.seq_len, setup.tokens
    a, g, d = arch.num_attention_heads, arch.kv_heads, arch.head_size
    saved.add("attn.sliding_window_mask", b * s * s, setup.half_bytes, "none", core=True)
    if 1 < g < a:
        saved.add("attn.key_value_repeated", 2 * n * (a - g) * d, setup.half_bytes, "tensor")
    return layer_activations(arch, masked, role, local=True) + tuple(saved.items)


def checkpointed_layer_activations(
    arch: Architecture, setup: ActivationSetup, checkpointing: Checkpointing,
    *, full: tuple[SavedTensor, ...] | None = None,
) -> tuple[SavedTensor, ...]:
    """What one layer keeps under a recomputation policy.

    * ``none``: everything (`layer_activations`);
    * ``selective``: everything but core attention, recomputed in backward (Korthikanti et al.
      2022, section 5: sbh(10 + 24/t) with TP, 34sbh/t with SP);
    * ``op``: torchtitan's op-level policy (`app.core.saved.op_policy`): the input, every other matmul's output and
      the attention kernel's outputs;
    * ``full``: only the layer's input, 2sbh at 16 bits (/t with SP), the whole layer is recomputed.
    """
    if checkpointing == "none":
        return full if full is not None else layer_activations(arch, setup)
    if checkpointing == "selective":
        full = full if full is not None else layer_activations(arch, setup)
        return tuple(item for item in full if not item.core_attention)
    if checkpointing == "op":
        return op_layer_activations(arch, setup)
    saved = _Saved(setup)
    saved.add("layer.input", setup.tokens * arch.hidden_size, setup.stream_bytes, "sequence")
    return tuple(saved.items)


FULL_ATTENTION_MASK: Final = "checkpoint.full_attention_mask"


def checkpoint_held_activations(
    arch: Architecture, setup: ActivationSetup, checkpointing: Checkpointing
) -> tuple[SavedTensor, ...]:
    """Model-level tensors that full recomputation keeps alive from forward to backward (``transformers``).

    torch.utils.checkpoint (non-reentrant, as transformers calls it) keeps each layer's keyword
    arguments in the recomputation closure until that layer's backward. They are shared by all
    layers, so they count once: the rotary cos and sin (already counted with the embedding), the
    position ids the rotary models pass to every layer (1 x s int64; GPT-2's are kept by its
    position embedding anyway), and with eager attention the additive causal mask transformers
    materialises for it, b x 1 x s x s in the residual stream's dtype. Without recomputation nothing
    keeps the mask or the position ids after the forward pass.
    """
    if setup.implementation == "megatron" or checkpointing not in ("full", "op"):
        return ()
    saved = _Saved(setup)
    b, s = setup.micro_batch_size, setup.seq_len
    if arch.position_embedding == "rope":
        saved.add("checkpoint.position_ids", s, INDEX_BYTES, "none")
    if attention_kernel(arch, setup) == "eager":
        saved.add("checkpoint.causal_mask", b * s * s, setup.stream_bytes, "none")
        if 0 < arch.sliding_window_layers < arch.num_hidden_layers:
            # one mask per kind of layer, the sliding-window layers' and the full-attention layers' (the ledger
            # keeps the second until the lowest full-attention layer's backward: `_Stage._full_attention_mask`)
            saved.add(FULL_ATTENTION_MASK, b * s * s, setup.stream_bytes, "none")
    if _window_masked(arch, setup):
        # sdpa past the window: the sliding-window layers' boolean mask (b x 1 x s x s), made once per forward
        # and handed to each of them (measured on an H200 with Gemma 3 1B at 32,768 tokens: docs/VALIDATION.md)
        saved.add("checkpoint.sliding_window_mask", b * s * s, BOOL_BYTES, "none")
    return tuple(saved.items)


def recompute_workspace(arch: Architecture, setup: ActivationSetup, checkpointing: Checkpointing,
                        *, full: tuple[SavedTensor, ...] | None = None) -> tuple[SavedTensor, ...]:
    """Transient during backward under recomputation: the tensors one layer rebuilds at a time."""
    if checkpointing == "none":
        return ()
    full = full if full is not None else layer_activations(arch, setup)
    if checkpointing == "selective":
        return tuple(item for item in full if item.core_attention)
    if checkpointing == "op":
        return op_rebuild(arch, setup, full)
    return full


def embedding_activations(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    if setup.implementation == "megatron":
        return tuple(_megatron_embedding(arch, setup))
    return tuple(_hf_embedding(arch, setup))


def head_activations(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    if setup.implementation == "megatron":
        return tuple(_megatron_head(arch, setup))
    return tuple(_hf_head(arch, setup))


def logits_workspace(arch: Architecture, setup: ActivationSetup) -> tuple[SavedTensor, ...]:
    if setup.implementation == "megatron":
        return tuple(_megatron_logits_workspace(arch, setup))
    return tuple(_hf_logits_workspace(arch, setup))


def total_bytes(items: tuple[SavedTensor, ...] | list[SavedTensor]) -> int:
    return sum(item.bytes for item in items)
