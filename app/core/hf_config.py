"""Architectures from a Hugging Face ``config.json``, with each model type's own field names and defaults.

Defaults are those of the model type's configuration class in transformers (e.g.
``LlamaConfig.num_key_value_heads`` falls back to ``num_attention_heads``; ``GPT2Config.n_inner``
to ``4 * n_embd``; ``GemmaConfig.tie_word_embeddings`` is True).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from app.core.architecture import Architecture
from app.core.errors import DomainError

SUPPORTED_MODEL_TYPES: Final = ("gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "phi3", "mixtral", "qwen3",
                                 "qwen3_moe")
FIELD_PREFIX: Final = "model.hf_config"

# max_position_embeddings when config.json omits it: each configuration class's default in
# transformers (LlamaConfig 2048, MistralConfig 4096 * 32, Qwen2Config 32768, GemmaConfig and
# Gemma2Config 8192, Phi3Config 4096). It shapes no parameter of these rotary models; it only
# decides when a sequence is longer than the model supports.
DEFAULT_MAX_POSITIONS: Final = {"llama": 2048, "mistral": 131072, "qwen2": 32768, "gemma": 8192, "gemma2": 8192, "phi3": 4096,
                                "mixtral": 131072, "qwen3": 32768, "qwen3_moe": 32768}

# Activation names Hugging Face uses (transformers/activations.py ACT2FN) mapped to our MLP kinds
# for the two-matrix MLP of GPT-2; gated models use them inside SwiGLU/GeGLU.
GELU_NAMES: Final = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate", "quick_gelu")


# Config numbers beyond this are no model's (the architecture's own ranges are far smaller); refusing
# them early keeps huge integers out of float conversion.
MAX_CONFIG_NUMBER: Final = 10**18


def _short(value: Any) -> str:
    """A value for an error message, cut short (a pasted config may hold anything)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "an integer of more than 30 digits"
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def _field(self, name: str) -> str:
        return f"{FIELD_PREFIX}.{name}"

    def optional_int(self, name: str, default: int | None) -> int | None:
        value = self.config.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise DomainError(self._field(name), f"must be an integer, got {_short(value)}")
        return value

    def int(self, name: str, default: int | None = None) -> int:
        value = self.optional_int(name, default)
        if value is None:
            raise DomainError(self._field(name), f"config.json has no {name!r}, which this model type needs")
        return value

    def bool(self, name: str, default: bool) -> bool:
        value = self.config.get(name, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise DomainError(self._field(name), f"must be true or false, got {value!r}")
        return value

    def float(self, name: str, default: float) -> float:
        value = self.config.get(name, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DomainError(self._field(name), f"must be a number, got {_short(value)}")
        if isinstance(value, int) and abs(value) > MAX_CONFIG_NUMBER:
            raise DomainError(self._field(name), f"must be at most {MAX_CONFIG_NUMBER:,} in size")
        return float(value)

    def str(self, name: str, default: str) -> str:
        value = self.config.get(name, default)
        if value is None:
            return default
        if not isinstance(value, str):
            raise DomainError(self._field(name), f"must be a string, got {value!r}")
        return value


def architecture_from_hf_config(config: Mapping[str, Any]) -> Architecture:
    """Build an Architecture from a parsed ``config.json``; unsupported types and missing fields raise DomainError."""
    if not isinstance(config, Mapping):
        raise DomainError(FIELD_PREFIX, "must be a JSON object (the contents of config.json)")
    model_type = config.get("model_type")
    if model_type is None:
        raise DomainError(f"{FIELD_PREFIX}.model_type", "config.json has no 'model_type'")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise DomainError(
            f"{FIELD_PREFIX}.model_type",
            f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    reader = _Reader(config)
    try:
        if model_type == "gpt2":
            return _gpt2(reader)
        return _llama_family(reader, model_type)
    except DomainError as error:
        if error.field.startswith(FIELD_PREFIX):
            raise
        # Architecture validation names fields as model.<name>; point it at the config instead.
        raise DomainError(error.field.replace("model.", f"{FIELD_PREFIX}.", 1), error.message) from None


def _gpt2(reader: _Reader) -> Architecture:
    hidden = reader.int("n_embd", 768)
    act = reader.str("activation_function", "gelu_new")
    if act not in GELU_NAMES and act != "relu":
        raise DomainError(f"{FIELD_PREFIX}.activation_function", f"unsupported activation {act!r}")
    return Architecture(
        num_hidden_layers=reader.int("n_layer", 12),
        hidden_size=hidden,
        num_attention_heads=reader.int("n_head", 12),
        intermediate_size=reader.int("n_inner", 4 * hidden),
        vocab_size=reader.int("vocab_size", 50257),
        max_position_embeddings=reader.int("n_positions", 1024),
        tie_word_embeddings=reader.bool("tie_word_embeddings", True),
        attention_bias=True,
        mlp_bias=True,
        mlp="relu" if act == "relu" else "gelu",
        norm="layernorm",
        norms_per_layer=2,
        position_embedding="learned",
        dropout=max(reader.float("resid_pdrop", 0.1), reader.float("embd_pdrop", 0.1)),
        attention_dropout=reader.float("attn_pdrop", 0.1),
        fused_qkv=True,
        model_type="gpt2",
        hidden_act=act,
    )


def _llama_family(reader: _Reader, model_type: str) -> Architecture:
    heads = reader.int("num_attention_heads")
    gemma = model_type in ("gemma", "gemma2")
    act = reader.str("hidden_activation", "") or reader.str("hidden_act", "gelu_pytorch_tanh" if gemma else "silu")
    mlp: Literal["swiglu", "geglu"]
    if act == "silu" or act == "swish":
        mlp = "swiglu"
    elif act in GELU_NAMES:
        mlp = "geglu"
    else:
        raise DomainError(f"{FIELD_PREFIX}.hidden_act", f"unsupported activation {act!r}")
    extras: list[tuple[str, float]] = []
    if model_type == "gemma2":
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            value = reader.float(name, 0.0)
            if value:
                extras.append((name, value))
    head_dim = reader.optional_int("head_dim", 256 if gemma else 128 if model_type == "qwen3" else None)
    moe = model_type in ("mixtral", "qwen3_moe")
    if model_type == "qwen3_moe":
        # Qwen3MoeConfig: sparse every decoder_sparse_step layers except mlp_only_layers; all sparse by default.
        if reader.int("decoder_sparse_step", 1) != 1 or reader.config.get("mlp_only_layers"):
            raise DomainError(f"{FIELD_PREFIX}.mlp_only_layers", "dense layers among the sparse ones are not "
                                                                  "modelled yet")
    return Architecture(
        num_hidden_layers=reader.int("num_hidden_layers"),
        hidden_size=reader.int("hidden_size"),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", heads),
        head_dim=head_dim,
        intermediate_size=reader.int("intermediate_size"),
        vocab_size=reader.int("vocab_size"),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS[model_type]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", gemma),
        attention_bias=reader.bool("attention_bias", False),
        qkv_bias=True if model_type == "qwen2" else None,
        mlp_bias=reader.bool("mlp_bias", False),
        mlp=mlp,
        norm="rmsnorm",
        norms_per_layer=4 if model_type == "gemma2" else 2,
        position_embedding="rope",
        dropout=reader.float("resid_pdrop", 0.0) if model_type == "phi3" else 0.0,
        attention_dropout=reader.float("attention_dropout", 0.0),
        fused_qkv=model_type == "phi3",
        fused_gate_up=model_type == "phi3",
        # MixtralConfig: num_local_experts 8, num_experts_per_tok 2, intermediate_size each expert's width;
        # Qwen3MoeConfig: num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768, norm_topk_prob False.
        # (transformers' Qwen3MoeConfig maps num_experts to num_local_experts, which its to_dict() writes.)
        num_local_experts=(reader.int("num_local_experts", 8) if model_type == "mixtral"
                           else reader.int("num_experts" if reader.config.get("num_experts") is not None
                                           else "num_local_experts", 128) if moe else 0),
        num_experts_per_tok=reader.int("num_experts_per_tok", 2 if model_type == "mixtral" else 8) if moe else 2,
        moe_intermediate_size=reader.int("moe_intermediate_size", 768) if model_type == "qwen3_moe" else None,
        norm_topk_prob=reader.bool("norm_topk_prob", False) if model_type == "qwen3_moe" else True,
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        model_type=model_type,
        hidden_act=act,
        extras=tuple(extras),
    )
