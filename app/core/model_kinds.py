"""What kind of model a config.json describes, for a model type with no record: the signs that it is not a
decoder-only language model of the kind a Llama-style stand-in counts right (hf_config's `_unknown_decoder`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# Activation names Hugging Face uses (transformers/activations.py ACT2FN) mapped to our MLP kinds
# for the two-matrix MLP of GPT-2; gated models use them inside SwiGLU/GeGLU.
GELU_NAMES: Final = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate", "quick_gelu")

# What a config.json of a model type with no record here must carry to be estimated as a Llama-style decoder.
STANDARD_FIELDS: Final = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
# The classes a decoder-only language model's config.json names in `architectures` (LlamaForCausalLM, GPT2LMHeadModel).
_DECODER_CLASSES: Final = ("ForCausalLM", "LMHeadModel")
MAX_MODEL_TYPE_CHARS: Final = 64
# Model types that are no Llama-style decoder whatever their config says (transformers' names), by kind.
_KINDS: Final = {
    "an encoder": ("xlm-roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2",
                   "modernbert"),
    "an encoder-decoder": ("t5", "mt5", "umt5", "bart", "mbart", "pegasus", "whisper"),
    "a vision model": ("vit",),
    "a vision-language model": ("clip", "siglip"),
    # State-space and recurrent models, alone or in hybrids with attention.
    "a state-space model": ("mamba", "mamba2", "falcon_mamba"),
    "a hybrid of attention and state-space layers": ("jamba", "zamba", "zamba2", "falcon_h1", "bamba"),
    "a recurrent model": ("recurrent_gemma", "rwkv", "xlstm"),
    # Decoders whose MLP has no gate (fc1, activation, fc2), some with attention and MLP in parallel.
    "a decoder with an MLP without a gate": ("gpt_bigcode", "gptj",
                                             "gpt_neo", "codegen", "opt", "bloom", "mpt"),
}
NOT_DECODERS: Final = {model_type: kind for kind, types in _KINDS.items() for model_type in types}
# Keys of a config.json that mark a mixture of experts or state-space layers, which a Llama-style stand-in would
# count as dense attention layers (OLMoE's 6.9B parameters as 0.6B).
_EXPERT_KEYS: Final = ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
                       "moe_intermediate_size", "ffn_config", "moe_layer_freq")
_STATE_SPACE_KEYS: Final = ("mamba_d_state", "mamba_expand", "ssm_cfg", "state_size", "attn_layer_period",
                            "layers_block_type", "block_types", "hybrid_override_pattern", "mamba_d_conv")


def not_a_decoder(config: Mapping[str, Any]) -> str:
    """Why a config.json describes something other than a decoder-only language model, or "" if nothing says so."""
    known = NOT_DECODERS.get(str(config.get("model_type")))
    if known:
        return known
    if config.get("is_encoder_decoder") is True:
        return "an encoder-decoder (is_encoder_decoder)"
    for key in ("vision_config", "text_config", "audio_config"):
        if config.get(key) is not None:
            return f"a multimodal model ({key})"
    classes = config.get("architectures")
    if isinstance(classes, list) and classes and all(isinstance(name, str) for name in classes):
        if not any(name.endswith(_DECODER_CLASSES) for name in classes):
            return f"a model of class {classes[0][:60]!r} (no ...ForCausalLM in architectures)"
    if config.get("type_vocab_size") is not None:
        return "an encoder (type_vocab_size: token type embeddings)"
    for keys, kind in ((_EXPERT_KEYS, "a mixture of experts"), (_STATE_SPACE_KEYS, "a model with state-space layers")):
        found = next((key for key in keys if config.get(key) not in (None, 0, 1)), None)
        if found:
            return f"{kind} ({found}), which a Llama-style stand-in would count as dense attention layers"
    act = config.get("hidden_act", config.get("hidden_activation"))
    if isinstance(act, str) and act in GELU_NAMES:
        return (f"a decoder with the {act} activation, whose MLP may have no gate (as GPT-BigCode's and "
                "Falcon's): a Llama-style stand-in would count it 1.5 times over")
    return ""

