"""One record per model family: the traits of its Hugging Face modules that the saved tensors, the backward moments,
fine-tuning and the setup's rules read. Nothing else in the core asks which model type an architecture is; it asks
its family (`family_of`) for the trait.

An architecture given field by field (no model type) is modelled as Llama, or as Mixtral when it is a mixture.
Where a trait was measured, the measurement is in docs/VALIDATION.md under the family's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:  # the architecture reads its family's parameters (`lm_head_bias`)
    from app.core.architecture import Architecture

Router = Literal["softmax", "gpt-oss", "deepseek-v2", "deepseek-v3", "llama4"]
LinearNames = Literal["llama", "gpt2", "phi3", "starcoder2", "phi", "gpt_neox"]


@dataclass(frozen=True)
class SequenceClassifier:
    """An encoder with a sequence-classification head (transformers 5.24's BertForSequenceClassification and
    RobertaForSequenceClassification): word, token-type and learned position embeddings summed, then a LayerNorm and
    dropout; bidirectional layers whose two LayerNorms follow their residual adds (no final norm); a head over the
    first token's hidden state, a dense h -> h with tanh and a classifier h -> num_labels, and a cross entropy over
    the labels in the logits' own dtype. Where the two differ:"""

    # BertPooler's dense reads ``hidden_states[:, 0]``, a view, so it keeps the whole last hidden state (b x s x h);
    # RobertaClassificationHead drops the first token's state before its dense, which keeps the b x h dropped copy.
    pooled_view: bool
    # RobertaEmbeddings numbers the positions from the token ids (a new b x s int64 tensor, and the token types
    # gathered by it b x s); BertEmbeddings slices its 1 x max_position_embeddings buffer (the whole buffer kept)
    # and gathers the token types 1 x s.
    positions_from_tokens: bool


# The labels a sequence classifier's config.json implies when it names none (PretrainedConfig's num_labels default).
DEFAULT_LABELS: Final = 2
BERT_HEAD: Final = SequenceClassifier(pooled_view=True, positions_from_tokens=False)
ROBERTA_HEAD: Final = SequenceClassifier(pooled_view=False, positions_from_tokens=True)


@dataclass(frozen=True)
class ModulePaths:
    """Where a causal LM's modules sit in transformers 5.24's module tree (``named_modules()``), the qualified names
    that peft matches a target_modules expression against: the list of decoder layers, the attention block of a layer
    (the MLP is ``mlp`` in each of them), the other modules in a layer (norms, activations, dropouts: those of every
    family of the layout, configured either way) and those outside the layers; printed from small models built from
    configs (validation/lora_targets.py)."""

    layers: str
    attention: str
    within: tuple[str, ...]
    outside: tuple[str, ...]


LLAMA_PATHS: Final = ModulePaths(
    "model.layers", "self_attn",
    ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm",
     "post_self_attn_layernorm", "post_mlp_layernorm", "resid_attn_dropout", "resid_mlp_dropout", "self_attn.q_norm",
     "self_attn.k_norm", "mlp.act_fn", "mlp.activation_fn", "mlp.act"),
    ("model.embed_tokens", "model.norm", "model.rotary_emb", "lm_head"))
PHI_PATHS: Final = ModulePaths(
    "model.layers", "self_attn",
    ("input_layernorm", "resid_dropout", "self_attn.q_layernorm", "self_attn.k_layernorm", "mlp.activation_fn"),
    ("model.embed_tokens", "model.rotary_emb", "model.embed_dropout", "model.final_layernorm", "lm_head"))
GPT2_PATHS: Final = ModulePaths(
    "transformer.h", "attn", ("ln_1", "ln_2", "attn.attn_dropout", "attn.resid_dropout", "mlp.act", "mlp.dropout"),
    ("transformer.wte", "transformer.wpe", "transformer.drop", "transformer.ln_f", "lm_head"))
GPT_NEOX_PATHS: Final = ModulePaths(
    "gpt_neox.layers", "attention",
    ("input_layernorm", "post_attention_layernorm", "post_attention_dropout", "post_mlp_dropout", "mlp.act"),
    ("gpt_neox.embed_in", "gpt_neox.emb_dropout", "gpt_neox.final_layer_norm", "gpt_neox.rotary_emb", "lm_head"))
FALCON_PATHS: Final = ModulePaths(
    "transformer.h", "self_attention",
    ("input_layernorm", "post_attention_layernorm", "ln_attn", "ln_mlp", "self_attention.attention_dropout",
     "mlp.act"),
    ("transformer.word_embeddings", "transformer.ln_f", "transformer.rotary_emb", "lm_head"))


@dataclass(frozen=True)
class Family:
    model_type: str | None
    custom: bool = False  # an architecture given field by field, with no model type
    # Modules
    gpt2_modules: bool = False  # GPT-2's: Conv1D linears, gelu_new, learned positions, scores kept in their dtype
    linear_names: LinearNames = "llama"  # the linear modules' names, as fine-tuning's target_modules give them
    module_paths: ModulePaths | None = LLAMA_PATHS  # None: not known here
    # The backward of its MLP without a gate measured (trained in full, no dropout): GPT-2's, StarCoder2's
    ungated_backward_measured: bool = False
    sandwich_norms: bool = False  # a norm before and after each block (Gemma 3, GLM-4)
    # Attention and the MLP in parallel, both reading the layer's input, their outputs added to it: from one norm's
    # output (norms_per_layer 1: PhiDecoderLayer, modeling_phi.py) or from a norm each over the same input, which the
    # two LayerNorms keep once (GPTNeoXLayer with use_parallel_residual, modeling_gpt_neox.py).
    parallel_blocks: bool = False
    lm_head_bias: bool = False  # the output layer has a bias of V (PhiForCausalLM.lm_head)
    # V is a chunk of the fused QKV projection's output (GPTNeoXAttention.forward: ``qkv.chunk(3, dim=-1)``,
    # modeling_gpt_neox.py), so a kernel that keeps V as given keeps that whole storage, (a + 2g)·d a token: sdpa, and
    # eager's second matmul at micro-batch 1, where folding batch and heads stays a view (above 1 it copies V).
    value_in_fused_qkv: bool = False
    # Norms and rotary embeddings.
    # RMSNorm multiplies by its weight in fp32 before casting back, so the normalised tensor it keeps is fp32:
    # Gemma's by (1 + weight), a new fp32 vector that the multiply keeps too (modeling_gemma.py, GemmaRMSNorm;
    # Gemma3RMSNorm likewise), OLMo 2's and gpt-oss's by the weight itself (Olmo2RMSNorm, GptOssRMSNorm).
    fp32_normalised: bool = False
    one_plus_weight: bool = False
    # LayerNorm written as fp32 operations, with a weight and no bias (CohereLayerNorm, modeling_cohere.py and
    # modeling_cohere2.py): it centres its fp32 input twice (for the variance and for the output), and keeps both
    # centred copies, the reciprocal standard deviation, the normalised tensor and the weight's fp32 cast, all fp32.
    fp32_layernorm: bool = False
    # The rotary embedding returns cos and sin in fp32, not cast to the activations' dtype (modeling_olmo2.py,
    # Olmo2RotaryEmbedding.forward; apply_rotary_pos_emb casts the rotated Q and K back).
    fp32_rotary: bool = False
    # The sliding-window layers rotate with a base of their own, a second cos/sin pair (Gemma 3:
    # rope_local_base_freq); gpt-oss's two kinds of layer share one.
    local_rotary: bool = False
    # cos and sin d/2 wide, the frequencies once: gpt-oss rotates the two halves of each head with them
    # (modeling_gpt_oss.py, GptOssRotaryEmbedding.forward and _apply_rotary_emb).
    half_rotary: bool = False
    # The frequencies as complex numbers, d/2 complex64 per position in place of cos and sin (modeling_deepseek_v2.py,
    # DeepseekV2RotaryEmbedding.forward: torch.polar).
    complex_rotary: bool = False
    # No sdpa path in transformers (``_supports_sdpa = False``: gpt-oss, whose sinks sdpa cannot take); asked for
    # sdpa, the estimate models the eager attention that from_pretrained then picks.
    eager_under_sdpa: bool = False
    # The rotary multiply turns a prefix of each head (partial_rotary_factor) and torch.cat joins it to the rest, so
    # Q and K leave it contiguous as (b, a, s, d): sdpa's output follows Q's layout there, and the attention's
    # ``transpose(1, 2).contiguous()`` copies it for the output projection, which keeps the copy
    # (modeling_glm4.py, apply_rotary_pos_emb; modeling_phi.py, PhiAttention.forward).
    rotary_cat: bool = False
    # Each layer interleaves cos and sin afresh (``cos[..., : d // 2].repeat_interleave(2)``) and its multiplies keep
    # those copies; the model's own cos and sin are kept by nothing (modeling_glm4.py, apply_rotary_pos_emb).
    rotary_per_layer: bool = False
    # Only the sliding-window layers rotate Q and K; the others attend without positions (Cohere2Attention.forward,
    # modeling_cohere2.py: ``if self.sliding_window is not None: apply_rotary_pos_emb``).
    rotary_on_sliding_only: bool = False
    # Falcon's own attention (FalconAttention, modeling_falcon.py): K and V indexed out of the fused QKV output (two
    # int64 indices kept), a mask always materialised for sdpa, eager's softmax in the activations' dtype, and
    # multi-query K and V handed to sdpa with their one head (`saved.falcon`).
    falcon_attention: bool = False
    # Eager attention's softmax over the scores in their own dtype (BERT's and RoBERTa's eager_attention_forward,
    # without an attention mask; Llama 4's, modeling_llama4.py): half precision, but fp32 under CUDA autocast.
    softmax_in_scores_dtype: bool = False
    # An encoder with a sequence-classification head in place of the language model's output layer (None: a decoder).
    classifier: SequenceClassifier | None = None
    # Q and K L2-normalised (no weight) after the rotary multiply on the rotating layers alone, where the config's
    # use_qk_norm says; the other layers' queries scaled by an fp32 factor per position where its
    # attn_temperature_tuning says (Llama4TextAttention.forward, modeling_llama4.py).
    llama4_attention: bool = False
    # Mixtures of experts
    # "llama4": every expert runs on every token, scaled by its sigmoid score, zero off the top k (Llama4TextMoe).
    router: Router = "softmax"
    # The experts multiply by the router's fp32 weights as they are (Mixtral, DeepSeek; a custom mixture is modelled
    # as Mixtral); Qwen3-MoE casts them to the activations' dtype first.
    fp32_routing: bool = False
    # DeepSeek's mixtures (DeepseekV2Moe, DeepseekV3MoE): a router whose linear runs in fp32, and a shared MLP built
    # even with n_shared_experts 0.
    deepseek_experts: bool = False
    moe_backward_measured: bool = False  # the MoE block's backward working set, measured (Mixtral, Qwen3-MoE)
    backward_by_moment: bool = False  # the layer's backward counted moment by moment (gpt-oss)
    moe_autocast_measured: bool = False  # a mixture measured under torch.autocast
    # Fine-tuning with peft 0.21's all-linear
    peft_wraps_experts: bool = False  # adapts the router and the stacked experts' parameters (ParamWrapper)
    peft_leaves_shared: bool = False  # ... but leaves the shared experts and the dense layers' MLPs (DeepSeek)
    peft_linear_only: bool = False  # adapts the nn.Linear modules alone (gpt-oss, Qwen2-MoE)
    # torch.compile (inductor) of its decoder layers measured (app/core/saved/compiled.py)
    compile_measured: bool = False
    # LitGPT's GPT model (implementation litgpt) builds this family's layer as transformers does, but for the
    # attention's torch.cat and the quantized output layer (saved.common, IMPLEMENTATION_CHOICES)
    litgpt: bool = False


FAMILIES: Final[dict[str | None, Family]] = {family.model_type: family for family in (
    Family(None, custom=True, litgpt=True, fp32_routing=True, moe_backward_measured=True, moe_autocast_measured=True, peft_wraps_experts=True),
    Family("gpt2", gpt2_modules=True, linear_names="gpt2", module_paths=GPT2_PATHS, ungated_backward_measured=True),
    Family("llama", compile_measured=True, litgpt=True),
    Family("mistral", compile_measured=True, litgpt=True),
    Family("qwen2", compile_measured=True, litgpt=True),
    Family("qwen3"),
    Family("phi3", linear_names="phi3"),
    Family("gemma", fp32_normalised=True, one_plus_weight=True, compile_measured=True),
    Family("gemma2", fp32_normalised=True, one_plus_weight=True),
    Family("gemma3_text", fp32_normalised=True, one_plus_weight=True, sandwich_norms=True, local_rotary=True),
    Family("olmo2", fp32_normalised=True, fp32_rotary=True),
    Family("mixtral", fp32_routing=True, moe_backward_measured=True, moe_autocast_measured=True,
           peft_wraps_experts=True),
    Family("qwen3_moe", moe_backward_measured=True, moe_autocast_measured=True, peft_wraps_experts=True),
    Family("qwen2_moe", moe_autocast_measured=True, peft_linear_only=True),
    Family("deepseek_v2", router="deepseek-v2", complex_rotary=True, fp32_routing=True, deepseek_experts=True,
           peft_wraps_experts=True, peft_leaves_shared=True),
    Family("deepseek_v3", router="deepseek-v3", fp32_routing=True, deepseek_experts=True, peft_wraps_experts=True,
           peft_leaves_shared=True),
    Family("granite"),  # Llama's modules; its four multipliers are Python floats, which keep nothing
    Family("starcoder2", linear_names="starcoder2", ungated_backward_measured=True),
    Family("phi", linear_names="phi", module_paths=PHI_PATHS, parallel_blocks=True, lm_head_bias=True, rotary_cat=True),
    Family("gpt_neox", linear_names="gpt_neox", module_paths=GPT_NEOX_PATHS, parallel_blocks=True, rotary_cat=True, value_in_fused_qkv=True),
    Family("glm4", rotary_cat=True, rotary_per_layer=True, sandwich_norms=True),
    # GLM-4.5's mixture: DeepSeek-V3's router and experts (Glm4MoeTopkRouter, Glm4MoeMoE in modeling_glm4_moe.py).
    Family("glm4_moe", router="deepseek-v3", fp32_routing=True, deepseek_experts=True, rotary_cat=True,
           peft_wraps_experts=True, peft_leaves_shared=True),
    # Command R (cohere) and Command R7B / A (cohere2): one LayerNorm feeding attention and the MLP side by side
    # (CohereDecoderLayer, Cohere2DecoderLayer).
    Family("cohere", parallel_blocks=True, fp32_layernorm=True),
    Family("cohere2", parallel_blocks=True, fp32_layernorm=True, rotary_on_sliding_only=True),
    # Falcon-7B, -40B and -180B: attention and an MLP without a gate side by side, from one LayerNorm or two over the
    # same input (FalconDecoderLayer), and GPT-NeoX's module names (query_key_value, dense, dense_h_to_4h...).
    Family("falcon", linear_names="gpt_neox", module_paths=FALCON_PATHS, parallel_blocks=True, falcon_attention=True),
    Family("bert", classifier=BERT_HEAD, module_paths=None, softmax_in_scores_dtype=True),
    Family("roberta", classifier=ROBERTA_HEAD, module_paths=None, softmax_in_scores_dtype=True),
    # Llama 4 (Llama4ForCausalLM): the rotating layers alone attend within chunks (the window: `rotary_on_sliding_only`),
    # their rotary frequencies complex numbers as DeepSeek-V2's.
    Family("llama4_text", complex_rotary=True, rotary_on_sliding_only=True, softmax_in_scores_dtype=True,
           llama4_attention=True, router="llama4"),
    Family("gpt_oss", fp32_normalised=True, half_rotary=True, eager_under_sdpa=True, router="gpt-oss",
           backward_by_moment=True, moe_autocast_measured=True, peft_linear_only=True),
)}
# A model type read from a config that no record names: modelled with no trait of its own.
_PLAIN: Final = Family("", module_paths=None)


def family_of(arch: Architecture) -> Family:
    return FAMILIES.get(arch.model_type, _PLAIN)


def stand_in_warnings(arch: Architecture) -> list[str]:
    """What an architecture read from a config.json of a model type with no record stands on (hf_config's
    `_unknown_decoder`): the Llama-style decoder it is estimated as, and what that leaves out; and what an encoder is
    estimated as (its sequence-classification head, whatever head its config's architectures name)."""
    if family_of(arch).classifier is not None:
        labels = int(arch.extra("num_labels", DEFAULT_LABELS))
        return [f"{arch.model_type} is estimated as transformers' sequence classifier ({labels} labels: a dense layer "
                "and tanh over the first token, then the classifier), trained in full on sequences without padding "
                "(no attention mask); another head (masked language modelling, tokens) is not counted."]
    if arch.model_type is None or arch.model_type in FAMILIES or arch.model_type == "gemma3":
        return []
    kv = arch.num_key_value_heads or arch.num_attention_heads
    return [f"model_type {arch.model_type!r} has no record here: it is estimated as a Llama-style decoder from its "
            f"config's sizes (pre-norm RMSNorm, rotary positions, attention with {arch.num_attention_heads} heads and "
            f"{kv} key/value heads, a gated MLP of gate, up and down projections with {arch.hidden_act or 'silu'}). "
            f"What {arch.model_type} does differently (extra multipliers, biases or norms, an MLP without a gate, "
            "its own kernels) is not counted, and none of it was measured."]
