"""GPT-2's reader, and the one reader of the Llama-style decoders (Llama, Mistral, Qwen2 and Qwen3, Gemma 1 to 3,
Phi-3, Mixtral, Qwen3-MoE, OLMo 2, Granite, GLM-4 and any model type with no record), which reads what each of their
configuration classes does differently from its `DecoderTraits` (their values are in `hf_records`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from app.core.architecture import Architecture, NormPlacement, QkNormScope
from app.core.config_defaults import (
    CONFIG_DEFAULTS,
    DEFAULT_MAX_POSITIONS,
    GEMMA3_SLIDING_WINDOW,
    GEMMA3_SLIDING_WINDOW_PATTERN,
    GLM4_PARTIAL_ROTARY,
)
from app.core.errors import DomainError
from app.core.hf_more_families import partial_rotary_factor
from app.core.hf_reader import FIELD_PREFIX, ConfigReader, output_router_logits, window_layers
from app.core.model_kinds import GELU_NAMES


@dataclass(frozen=True)
class Experts:
    """A mixture's fields as its configuration class names them, with its defaults (MixtralConfig, Qwen3MoeConfig)."""

    num_local_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int | None = None  # read with this default; None: each expert intermediate_size wide
    norm_topk_prob: bool | None = None  # read with this default; None: not a field, the k weights renormalised
    # ``num_experts`` read where set, as the class maps it to num_local_experts (which its to_dict() writes).
    num_experts_alias: bool = False
    # ``decoder_sparse_step`` and ``mlp_only_layers`` read, and any dense layer among the sparse ones refused.
    sparse_step: bool = False


@dataclass(frozen=True)
class DecoderTraits:
    """What one model type's configuration class and modules do differently from Llama's, as the common decoder reader
    reads it. The defaults are Llama's (LlamaConfig, LlamaDecoderLayer)."""

    hidden_act: str = "silu"  # the activation where config.json names none
    head_dim: int | None = None  # where config.json has none; None: CONFIG_DEFAULTS', else hidden_size / heads
    tie_word_embeddings: bool = False  # where config.json does not say
    qkv_bias: bool | None = None  # biases on the query, key and value projections whatever attention_bias says
    norms_per_layer: int = 2
    norm_placement: NormPlacement = "pre"
    dropout_key: str | None = None  # the key of the dropout on the attention's and the MLP's outputs; None: none
    fused_qkv: bool = False  # one qkv_proj
    fused_gate_up: bool = False  # one gate_up_proj
    qk_norm: bool = False
    qk_norm_over: QkNormScope = "head"
    softcaps: tuple[str, ...] = ()  # the soft caps read, each kept where set
    sliding_layers: bool = False  # Gemma 3's sliding-window layers (Gemma3TextConfig.__post_init__)
    experts: Experts | None = None  # None: a dense MLP


def gpt2_architecture(reader: ConfigReader) -> Architecture:
    """GPT-2 as GPT2LMHeadModel builds it, with GPT2Config's field names and defaults."""
    hidden = reader.int("n_embd", 768)
    act = reader.str("activation_function", "gelu_new")
    if act not in GELU_NAMES and act != "relu":
        raise DomainError(f"{FIELD_PREFIX}.activation_function", f"unsupported activation {act!r}")
    return Architecture(
        num_hidden_layers=reader.layers("n_layer", 12),
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


def decoder_architecture(reader: ConfigReader, model_type: str, traits: DecoderTraits) -> Architecture:
    """A Llama-style decoder of `model_type` (whose defaults CONFIG_DEFAULTS and DEFAULT_MAX_POSITIONS may hold),
    read with `traits`."""
    defaults = CONFIG_DEFAULTS.get(model_type, {})
    heads = reader.int("num_attention_heads", defaults.get("num_attention_heads"))
    layers = reader.layers("num_hidden_layers", defaults.get("num_hidden_layers"))
    act = reader.str("hidden_activation", "") or reader.str("hidden_act", traits.hidden_act)
    mlp = _gated_mlp(act)
    extras = _softcaps(reader, traits.softcaps)
    head_dim = reader.optional_int("head_dim", defaults.get("head_dim") if traits.head_dim is None
                                   else traits.head_dim)
    sliding_window, sliding_layers = _sliding_window(reader, layers) if traits.sliding_layers else (None, 0)
    if traits.experts is not None and traits.experts.sparse_step:
        # Qwen3MoeConfig: sparse every decoder_sparse_step layers except mlp_only_layers; all sparse by default.
        if reader.int("decoder_sparse_step", 1) != 1 or reader.config.get("mlp_only_layers"):
            raise DomainError(f"{FIELD_PREFIX}.mlp_only_layers", "dense layers among the sparse ones are not "
                                                                  "modelled yet")
    return Architecture(
        num_hidden_layers=layers,
        hidden_size=reader.int("hidden_size", defaults.get("hidden_size")),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", defaults.get("num_key_value_heads", heads)),
        head_dim=head_dim,
        intermediate_size=reader.int("intermediate_size", defaults.get("intermediate_size")),
        vocab_size=reader.int("vocab_size", defaults.get("vocab_size")),
        max_position_embeddings=reader.int("max_position_embeddings",
                                           DEFAULT_MAX_POSITIONS.get(model_type, DEFAULT_MAX_POSITIONS["llama"])),
        tie_word_embeddings=reader.bool("tie_word_embeddings", traits.tie_word_embeddings),
        attention_bias=reader.bool("attention_bias", False),
        qkv_bias=traits.qkv_bias,
        mlp_bias=reader.bool("mlp_bias", False),
        mlp=mlp,
        norm="rmsnorm",
        norms_per_layer=traits.norms_per_layer,
        norm_placement=traits.norm_placement,
        position_embedding="rope",
        dropout=reader.float(traits.dropout_key, 0.0) if traits.dropout_key else 0.0,
        attention_dropout=reader.float("attention_dropout", 0.0),
        fused_qkv=traits.fused_qkv,
        fused_gate_up=traits.fused_gate_up,
        **_expert_fields(reader, traits.experts),
        qk_norm=traits.qk_norm,
        qk_norm_over=traits.qk_norm_over,
        sliding_window=sliding_window,
        sliding_window_layers=sliding_layers,
        model_type=model_type,
        hidden_act=act,
        extras=tuple(extras),
    )


def _expert_fields(reader: ConfigReader, experts: Experts | None) -> dict[str, Any]:
    """A mixture's fields, read in this order; a dense MLP's where `experts` is None."""
    if experts is None:
        return {"num_local_experts": 0, "num_experts_per_tok": 2, "moe_intermediate_size": None,
                "norm_topk_prob": True, "output_router_logits": False}
    aliased = experts.num_experts_alias and reader.config.get("num_experts") is not None
    return {
        "num_local_experts": reader.int("num_experts" if aliased else "num_local_experts", experts.num_local_experts),
        "num_experts_per_tok": reader.int("num_experts_per_tok", experts.num_experts_per_tok),
        "moe_intermediate_size": (None if experts.moe_intermediate_size is None
                                  else reader.int("moe_intermediate_size", experts.moe_intermediate_size)),
        "norm_topk_prob": (True if experts.norm_topk_prob is None
                           else reader.bool("norm_topk_prob", experts.norm_topk_prob)),
        "output_router_logits": output_router_logits(reader),
    }


def _gated_mlp(act: str) -> Literal["swiglu", "geglu"]:
    """The gated MLP an activation makes: SwiGLU with silu, GeGLU with a gelu."""
    if act == "silu" or act == "swish":
        return "swiglu"
    if act in GELU_NAMES:
        return "geglu"
    raise DomainError(f"{FIELD_PREFIX}.hidden_act", f"unsupported activation {act!r}")


def _softcaps(reader: ConfigReader, names: tuple[str, ...]) -> list[tuple[str, float]]:
    """The soft caps on the attention scores or the logits that `names` gives, each kept where set."""
    extras: list[tuple[str, float]] = []
    for name in names:
        value = reader.float(name, 0.0)
        if value < 0 or value != value or value == float("inf"):
            raise DomainError(f"{FIELD_PREFIX}.{name}", f"must be a positive cap on the scores, or null for none; "
                                                        f"got {value:g}")
        if value:
            extras.append((name, value))
    return extras


def _sliding_window(reader: ConfigReader, layers: int) -> tuple[int | None, int]:
    """Gemma 3's local attention: the window and how many layers use it (Gemma3TextConfig.__post_init__)."""
    if reader.bool("use_bidirectional_attention", False):
        raise DomainError(reader._field("use_bidirectional_attention"), "bidirectional attention is not modelled")
    pattern = GEMMA3_SLIDING_WINDOW_PATTERN
    if reader.str_list("layer_types") is None:
        pattern = reader.int("sliding_window_pattern", GEMMA3_SLIDING_WINDOW_PATTERN)
        if pattern < 1:
            raise DomainError(reader._field("sliding_window_pattern"), f"must be at least 1, got {pattern}")
    return window_layers(reader, layers, pattern=pattern, window=GEMMA3_SLIDING_WINDOW)


def glm4_architecture(reader: ConfigReader) -> Architecture:
    """GLM-4-0414 as Glm4ForCausalLM builds it (modeling_glm4.py, transformers 5.24): Llama's layer with four
    RMSNorms (before and after attention and the MLP: Glm4DecoderLayer's post_self_attn_layernorm and
    post_mlp_layernorm), biases on the query, key and value projections (``attention_bias``, True by default) and none
    on the output, the gate and up projections as one ``gate_up_proj``, and rotary positions on the first
    ``partial_rotary_factor`` of each head (0.5 unless given; top level or in ``rope_parameters``). Not read, because
    they change no parameter and no saved tensor: ``rope_theta`` and ``rms_norm_eps``."""
    base = decoder_architecture(reader, "glm4", DecoderTraits())
    factor = partial_rotary_factor(reader, GLM4_PARTIAL_ROTARY)
    return replace(base, norms_per_layer=4, qkv_bias=reader.bool("attention_bias", True), attention_bias=False,
                   fused_gate_up=True, extras=(*base.extras, ("partial_rotary_factor", factor)))
