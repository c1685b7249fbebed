"""A whole Hugging Face layer, embedding and head: the rooms put together per family, with the rotary tables
and the router's auxiliary loss."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.core.architecture import Architecture
from app.core.families import family_of
from app.core.finetuning import Role, embeddings_train, head_trains
from app.core.saved.attention import _hf_attention, _hf_qk_norms, attention_kernel
from app.core.saved.classifier import classifier_embedding, classifier_head
from app.core.saved.common import (
    COMPLEX64_BYTES,
    FP32_BYTES,
    INDEX_BYTES,
    ActivationSetup,
    SavedTensor,
    _Adapters,
    _Saved,
)
from app.core.saved.hf_parts import _hf_adapters, _hf_linear_input, _hf_norm
from app.core.saved.mlp import _hf_mlp, _layer_tuning


def _hf_layer(arch: Architecture, setup: ActivationSetup, role: Role = "full", *,
              dense: bool = False, local: bool = False) -> list[SavedTensor]:
    """One decoder layer as Hugging Face's modules save it (see module docstring): the attention block
    (`_layer_attention`), the MLP block (`_layer_mlp`) and any extra norms.

    `role` says how the layer takes part in backward (finetuning.layer_role). With frozen weights
    autograd keeps only what the gradients still needed ask for: a frozen linear layer keeps no
    input (no weight gradient), a frozen norm no normalised tensor; in the lowest trainable layer
    the input needs no gradient, so its first norm keeps nothing for it; a layer with nothing
    trainable at or below it keeps nothing at all. Adapters add what `_hf_adapters` says. `local`: one of the
    ``sliding_window_layers`` (where a family's two kinds of layer differ beyond the mask: Llama 4's).
    """
    saved = _Saved(setup)
    if role == "off":
        return saved.items
    tuning, form = _LayerTuning.of(arch, setup, role), _LayerForm.of(arch)
    _layer_attention(saved, arch, setup, tuning, form, local=local)
    mlp_grad = tuning.through("attn.q", "attn.k", "attn.v", "attn.qkv", "attn.o")
    _layer_mlp(saved, arch, setup, tuning, form, grad=mlp_grad, dense=dense)
    for index in range(2, arch.norms_per_layer):
        # Extra norms (Gemma 2's post-attention and post-feedforward norms) feed the residual add,
        # which keeps nothing, so only their internals count.
        _hf_norm(saved, f"extra_norm{index}", arch, setup, weight_grad=tuning.weights, input_grad=True)
    return saved.items


@dataclass(frozen=True)
class _LayerTuning:
    """How a layer trains (`_layer_tuning`): whether its weights do, whether its input needs a gradient, the
    family's module names and the adapted weights (internal name -> shape)."""

    weights: bool
    input_grad: bool
    names: Mapping[str, str]
    adapted: dict[str, tuple[int, ...]]
    gpt2_modules: bool  # GPT-2's attention and MLP both name their output projection c_proj

    @classmethod
    def of(cls, arch: Architecture, setup: ActivationSetup, role: Role) -> _LayerTuning:
        return cls(*_layer_tuning(arch, setup, role), gpt2_modules=family_of(arch).gpt2_modules)

    def adapters_on(self, *modules: str) -> _Adapters:
        """The adapters on these modules, each by its module's name (with its block's where GPT-2's repeat)."""
        return tuple((self._label(m), self.adapted[m][1]) for m in modules if m in self.adapted)

    def _label(self, module: str) -> str:
        name = self.names.get(module, module)
        if module in ("attn.o", "mlp.down") and self.gpt2_modules:
            return f"{name} ({module.split('.')[0]})"
        return name

    def through(self, *modules: str) -> bool:
        """Whether a gradient passes through here: the layer's input needs one, its weights train, or one of these
        modules is adapted."""
        return self.input_grad or self.weights or any(m in self.adapted for m in modules)


@dataclass(frozen=True)
class _LayerForm:
    """How a family lays out a decoder layer's blocks: its norms and what reads each norm's output."""

    pre_norms: bool  # each block's input normalised (OLMo 2 normalises each block's output instead: `post`)
    parallel: bool  # attention and the MLP read the layer's input
    one_norm: bool  # Phi: one norm's output feeds both blocks
    mlp_consumers: int  # the MLP's linears that read its input
    attn_consumers: int  # the linears that read the attention's normalised input

    @classmethod
    def of(cls, arch: Architecture) -> _LayerForm:
        mlp_consumers = 1 if (arch.fused_gate_up or not arch.is_gated) else 2
        parallel = family_of(arch).parallel_blocks
        one_norm = parallel and arch.norms_per_layer == 1
        return cls(pre_norms=arch.norm_placement == "pre", parallel=parallel, one_norm=one_norm,
                   mlp_consumers=mlp_consumers,
                   attn_consumers=(1 if arch.fused_qkv else 3) + (mlp_consumers if one_norm else 0))


def _layer_attention(saved: _Saved, arch: Architecture, setup: ActivationSetup, tuning: _LayerTuning,
                     form: _LayerForm, *, local: bool = False) -> None:
    """A layer's attention block: its norm (before it, or after it with `post` norms), the input of the query, key
    and value projections and their adapters, the attention itself (`_layer_attention_core`) where anything in or
    below it needs a gradient, and the output projection's adapters."""
    weights, input_grad = tuning.weights, tuning.input_grad
    attn_in = tuning.adapters_on("attn.q", "attn.k", "attn.v", "attn.qkv")
    if form.pre_norms:
        _hf_norm(saved, "attn_norm", arch, setup, weight_grad=weights, input_grad=input_grad)
    if weights:
        _hf_linear_input(saved, "attn.qkv_input", form.attn_consumers, arch, setup)
    _hf_adapters(saved, attn_in, setup.stream_bytes, input_kept=weights, input_grad=input_grad, name="attn.qkv_input",
                 arch=arch, setup=setup)
    attention_records = input_grad or weights or bool(attn_in)
    if attention_records:
        _layer_attention_core(saved, arch, setup, tuning, local=local)
    attn_out = tuning.adapters_on("attn.o")
    if attn_out:
        kernel_keeps_output = attention_records and attention_kernel(arch, setup) not in ("eager", "math")
        _hf_adapters(saved, attn_out, setup.half_bytes, input_kept=weights or kernel_keeps_output,
                     input_grad=attention_records, name="attn.out_proj_input", arch=arch, setup=setup)
    if not form.pre_norms:
        _hf_norm(saved, "attn_post_norm", arch, setup, weight_grad=weights, input_grad=attention_records)


def _layer_attention_core(saved: _Saved, arch: Architecture, setup: ActivationSetup, tuning: _LayerTuning, *,
                          local: bool = False) -> None:
    """Between the projections and the output projection: GLM-4's per-layer rotary tables, the q and k norms and
    the attention, where Q, K and V each need a gradient as their projection or a fused one does."""

    def grad(module: str) -> bool:
        return tuning.through(module, "attn.qkv")

    if family_of(arch).rotary_per_layer:
        # This layer's interleaved cos and sin (1 x s x d_rot each), which the rotary multiplies keep.
        saved.add("rope.cos_sin (this layer's)", 2 * setup.seq_len * arch.rope_size, setup.stream_bytes, "none")
    if arch.qk_norm:
        _hf_qk_norms(saved, arch, setup, weight_grad=tuning.weights, input_grads=(grad("attn.q"), grad("attn.k")))
    if family_of(arch).llama4_attention:
        _llama4_qk_scaling(saved, arch, setup, local=local, grads=(grad("attn.q"), grad("attn.k")))
    _hf_attention(saved, arch, setup, out_proj_input=tuning.weights,
                  grads=(grad("attn.q"), grad("attn.k"), grad("attn.v")))


def _llama4_qk_scaling(saved: _Saved, arch: Architecture, setup: ActivationSetup, *, local: bool,
                       grads: tuple[bool, bool] = (True, True)) -> None:
    """Llama4TextAttention.forward (modeling_llama4.py, transformers 5.24). A rotating layer with ``use_qk_norm``
    L2-normalises the rotated Q and K (Llama4TextL2Norm, no weight): each norm keeps its fp32 input (n × heads × d)
    and its fp32 reciprocal RMS (n × heads). A layer without positions and with ``attn_temperature_tuning`` scales
    Q by ``log1p(floor((p + 1) / floor_scale)) · attn_scale + 1``, an fp32 factor per position (s, broadcast over
    the batch), which the multiply keeps. Each only where Q's or K's projection output needs a gradient (`grads`:
    in the lowest trainable layer, only an adapted projection's does). Measured on CPU: docs/VALIDATION.md, "More
    families" and "Fine-tuning"."""
    n, d = setup.tokens, arch.head_size
    if local and arch.extra("use_qk_norm"):
        for (name, heads), needed in zip((("q", arch.num_attention_heads), ("k", arch.kv_heads)), grads, strict=True):
            if needed:
                saved.add(f"attn.{name}_l2norm.input_fp32", n * heads * d, FP32_BYTES, "tensor")
                saved.add(f"attn.{name}_l2norm.rstd", n * heads, FP32_BYTES, "tensor")
    elif not local and arch.extra("attn_temperature_tuning") and grads[0]:
        saved.add("attn.temperature_scales", setup.seq_len, FP32_BYTES, "none")


def _layer_mlp(saved: _Saved, arch: Architecture, setup: ActivationSetup, tuning: _LayerTuning, form: _LayerForm, *,
               grad: bool, dense: bool) -> None:
    """A layer's MLP block (`grad`: whether its input needs a gradient): its input (`_layer_mlp_input`), the MLP or
    mixture of experts (`_hf_mlp`) where anything in or below it needs a gradient, the down projection's adapters,
    and its norm after it with `post` norms."""
    weights = tuning.weights
    mlp_in = _layer_mlp_input(saved, arch, setup, tuning, form, grad=grad, dense=dense)
    wrapped = "moe.experts.gate_up" in tuning.adapted and not dense  # the router and experts adapted (experts_wrapped)
    mlp_records = grad or weights or bool(mlp_in) or wrapped
    if mlp_records:
        _hf_mlp(saved, arch, setup, down_input=weights, dense=dense, wrapped=wrapped,
                shared_adapters=(tuning.adapters_on("moe.shared.gate", "moe.shared.up", "moe.shared_gate"),
                                 tuning.adapters_on("moe.shared.down")))
    _hf_adapters(saved, tuning.adapters_on("mlp.down"), setup.half_bytes, input_kept=weights, input_grad=mlp_records,
                 name="mlp.down_input", arch=arch, setup=setup)
    if not form.pre_norms:
        _hf_norm(saved, "mlp_post_norm", arch, setup, weight_grad=weights, input_grad=mlp_records)


def _layer_mlp_input(saved: _Saved, arch: Architecture, setup: ActivationSetup, tuning: _LayerTuning,
                     form: _LayerForm, *, grad: bool, dense: bool) -> _Adapters:
    """The MLP's input: its norm before it (unless Phi's one norm feeds both blocks), the input its linears keep,
    and the adapters that read it, which it returns."""
    weights = tuning.weights
    mlp_in = tuning.adapters_on("mlp.gate", "mlp.up", "mlp.gate_up")
    if form.pre_norms and not form.one_norm:
        # GPT-NeoX's second norm reads the layer's input too, which the first norm keeps already.
        _hf_norm(saved, "mlp_norm", arch, setup, weight_grad=weights, input_grad=grad, input_kept=form.parallel)
    if weights and (dense or not arch.is_moe) and not form.one_norm:  # a MoE block's router keeps its input (_hf_moe)
        _hf_linear_input(saved, "mlp.input", form.mlp_consumers, arch, setup)
    _hf_adapters(saved, mlp_in, setup.stream_bytes, input_kept=weights, input_grad=grad, name="mlp.input",
                 arch=arch, setup=setup)
    return mlp_in


def _hf_embedding(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """First stage: token ids (embedding backward), position ids or the shared rotary cos/sin, embedding dropout."""
    classifier = family_of(arch).classifier
    if classifier is not None:
        return classifier_embedding(arch, setup, classifier)
    saved = _Saved(setup)
    n, s, h = setup.tokens, setup.seq_len, arch.hidden_size
    if embeddings_train(setup.finetuning):  # the embedding's weight gradient needs them
        saved.add("embed.token_ids", n, INDEX_BYTES, "none")
    if arch.position_embedding == "learned":
        if embeddings_train(setup.finetuning):  # for the position table's gradient
            saved.add("embed.position_ids", s, INDEX_BYTES, "none")
    elif not family_of(arch).rotary_per_layer and _some_layer_rotates(arch):  # GLM-4's layers keep their own
        # cos and sin, computed once per forward and kept by every layer's rotary multiply; Gemma 3 computes a
        # pair for each kind of layer (its sliding-window layers rotate with another base), in the stream's dtype;
        # gpt-oss's are half a head wide.
        local = family_of(arch).local_rotary and 0 < arch.sliding_window_layers < arch.num_hidden_layers
        pairs = 2 if local else 1
        columns = arch.rope_size // 2 if family_of(arch).half_rotary else arch.rope_size
        width = FP32_BYTES if family_of(arch).fp32_rotary else setup.stream_bytes
        if family_of(arch).complex_rotary:
            # DeepSeek-V2's freqs_cis, 1 x s x d_r/2 complex64, which each layer's complex multiply keeps
            # (apply_rotary_emb: the fp32 view_as_complex of Q's and K's rotary parts times freqs_cis).
            saved.add("rope.freqs_cis_complex64", s * columns // 2, COMPLEX64_BYTES, "none")
        else:
            saved.add("rope.cos_sin", pairs * 2 * s * columns, width, "none")
    if arch.extra("embedding_dropout", arch.dropout) > 0:  # Phi's and StarCoder2's own probability, where read
        saved.mask("embed.dropout_mask", n * h, setup.stream_bytes, "sequence")
    return saved.items


def _some_layer_rotates(arch: Architecture) -> bool:
    """Whether any layer keeps the rotary cos and sin: not where only the sliding-window layers rotate and there are
    none (Cohere2 with every layer attending in full, or a null ``sliding_window``)."""
    return not family_of(arch).rotary_on_sliding_only or arch.sliding_window_layers > 0


def _hf_head(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """Last stage: the final norm, the output layer's input, and the loss.

    The loss (transformers' ForCausalLMLoss) upcasts the logits to fp32 and calls cross_entropy,
    whose log_softmax keeps its fp32 output (N x V) and whose nll_loss keeps the int64 labels.
    The labels are shifted by padding them to s + 1 positions and taking ``[..., 1:].contiguous()``:
    a copy of N labels, except at micro-batch 1, where the slice is already contiguous and stays a
    view of the padded storage of s + 1 labels.
    """
    classifier = family_of(arch).classifier
    if classifier is not None:
        return classifier_head(arch, setup, classifier)
    saved = _Saved(setup)
    n, v = setup.tokens, arch.vocab_size
    labels = n + 1 if setup.micro_batch_size == 1 else n
    ft = setup.finetuning
    _hf_norm(saved, "final_norm", arch, setup, weight_grad=ft.method == "full", input_grad=True)
    if arch.output_router_logits:
        _hf_router_aux_loss(saved, arch, setup)
    if setup.loss == "fused-linear":
        # Liger's fused linear cross entropy keeps its input's and its weight's gradients instead (the ledger's
        # loss.grad_input and loss.grad_weight), not the input, the log-probabilities or the labels.
        return saved.items
    if head_trains(arch, ft):
        _hf_linear_input(saved, "lm_head.input", 1, arch, setup)
    if arch.extra("final_logit_softcapping"):
        saved.add("logits.softcap_tanh", n * v, setup.half_bytes, "tensor")
    saved.add("loss.log_softmax_fp32", n * v, FP32_BYTES, "tensor")
    saved.add("loss.labels", labels, INDEX_BYTES, "none")
    return saved.items


def _hf_router_aux_loss(saved: _Saved, arch: Architecture, setup: ActivationSetup) -> None:
    """The load-balancing loss that ``output_router_logits`` adds (load_balancing_loss_func, modeling_mixtral.py,
    transformers 5.24; Qwen2-MoE, Qwen3-MoE and gpt-oss copy it), for n tokens, E experts, k per token and L_s
    sparse layers (the layers with a router).

    For each sparse layer's router logits (n × E, the activations' dtype) the loop keeps softmax's output
    (n × E, same dtype) and the int64 indices of its top-k (n × k; topk is differentiable, so autograd keeps
    them although only the indices are used); the per-expert counts (torch.histc) carry no gradient. The final
    ``tokens_per_expert * router_prob_per_expert`` keeps the fp32 fraction of tokens per expert (E) once. No
    attention mask (the causal-LM batches trainmem models); with one, the loss keeps it as n fp32 once more.
    Switch Transformer's loss (Fedus et al. 2021, equations 4-6), L_s · n · (E · a + 8k) + 4E bytes.
    Measured on CPU (tests/core/test_router_aux_loss.py, docs/VALIDATION.md).

    Under autocast the router logits are half precision (the router's F.linear). CPU autocast leaves softmax alone
    (no AutocastCPU kernel for aten::softmax.int, torch 2.13), so its output stays half precision (measured); CUDA
    autocast runs a softmax given no dtype in fp32 (aten/src/ATen/autocast_mode.h, AT_FORALL_FP32_SET_OPT_DTYPE),
    so there it keeps n × E fp32 per layer (not measured: no GPU in the harness).
    """
    n, e, k, wa = setup.tokens, arch.num_local_experts, arch.num_experts_per_tok, setup.half_bytes
    sparse = arch.num_hidden_layers - arch.dense_layers
    probs_bytes = FP32_BYTES if setup.autocast and setup.device == "cuda" else wa
    saved.add("moe_aux.router_probs", sparse * n * e, probs_bytes, "none")
    saved.add("moe_aux.topk_indices", sparse * n * k, INDEX_BYTES, "none")
    saved.add("moe_aux.tokens_per_expert_fp32", e, FP32_BYTES, "none")


def _hf_logits_workspace(arch: Architecture, setup: ActivationSetup) -> list[SavedTensor]:
    """Transient around the loss: the logits the model returns, and two fp32 N x V gradients in backward.

    The output keeps the logits in the matmul's dtype while the step runs; the backward of
    nll_loss writes an fp32 gradient of the log-probabilities and log_softmax's backward another.
    """
    saved = _Saved(setup)
    n, v = setup.tokens, arch.vocab_size
    saved.add("logits", n * v, setup.half_bytes, "tensor")
    saved.add("loss.grad_log_probs_fp32", n * v, FP32_BYTES, "tensor")
    saved.add("loss.grad_logits_fp32", n * v, FP32_BYTES, "tensor")
    return saved.items
