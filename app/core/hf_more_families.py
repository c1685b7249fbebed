"""Readers of the families measured after the first (docs/VALIDATION.md, "More families"): StarCoder2, Phi, GPT-NeoX,
GLM-4.5, Cohere, Cohere2 and Falcon, each with its configuration class's field names and defaults in transformers 5.24."""

from __future__ import annotations

from collections.abc import Mapping

from app.core.architecture import Architecture
from app.core.config_defaults import (
    COHERE2_SLIDING_WINDOW,
    COHERE2_SLIDING_WINDOW_PATTERN,
    CONFIG_DEFAULTS,
    DEFAULT_MAX_POSITIONS,
    GLM4_PARTIAL_ROTARY,
    GPT_NEOX_PARTIAL_ROTARY,
    PHI_PARTIAL_ROTARY,
)
from app.core.errors import DomainError
from app.core.hf_reader import ConfigReader, output_router_logits, window_layers
from app.core.model_kinds import GELU_NAMES


def partial_rotary_factor(reader: ConfigReader, default: float) -> float:
    """The share of each head the rotary embedding turns, at the top level of config.json or in ``rope_parameters``
    (where transformers 5.24's configs keep it)."""
    params = reader.config.get("rope_parameters")
    if isinstance(params, Mapping) and params.get("partial_rotary_factor") is not None:
        inner = ConfigReader(params, reader._field("rope_parameters"))
        value, field = inner.float("partial_rotary_factor", default), inner._field("partial_rotary_factor")
    else:
        value, field = reader.float("partial_rotary_factor", default), reader._field("partial_rotary_factor")
    if not 0.0 < value <= 1.0:
        raise DomainError(field, f"must be a share of the head in (0, 1], got {value:g}")
    return value


def starcoder2_architecture(reader: ConfigReader) -> Architecture:
    """StarCoder2 as Starcoder2ForCausalLM builds it (modeling_starcoder2.py, transformers 5.24): grouped-query
    attention with rotary positions, LayerNorms with biases, an MLP without a gate (c_fc, ``hidden_act``, c_proj) and
    biases on every linear layer but the output layer (``use_bias``). Every layer attends within ``sliding_window``
    where it is set. ``residual_dropout`` drops the attention's and the MLP's outputs, ``embedding_dropout`` the
    embeddings. Not read, because they change no parameter and no saved tensor: ``rope_theta`` and
    ``norm_epsilon``."""
    d = CONFIG_DEFAULTS["starcoder2"]
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    layers = reader.layers("num_hidden_layers", d["num_hidden_layers"])
    act = reader.str("hidden_act", "gelu_pytorch_tanh")
    if act not in GELU_NAMES and act != "relu":
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    bias = reader.bool("use_bias", True)
    window = reader.optional_int("sliding_window", None)
    return Architecture(
        num_hidden_layers=layers,
        hidden_size=reader.int("hidden_size", d["hidden_size"]),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", d["num_key_value_heads"]),
        head_dim=reader.optional_int("head_dim", None),
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS["starcoder2"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", True),
        attention_bias=bias,
        mlp_bias=bias,
        mlp="relu" if act == "relu" else "gelu",
        norm="layernorm",
        position_embedding="rope",
        dropout=reader.float("residual_dropout", 0.0),
        attention_dropout=reader.float("attention_dropout", 0.0),
        sliding_window=window,
        sliding_window_layers=layers if window is not None else 0,
        model_type="starcoder2",
        hidden_act=act,
        extras=(("embedding_dropout", _probability(reader, "embedding_dropout")),),
    )


def _probability(reader: ConfigReader, name: str) -> float:
    value = reader.float(name, 0.0)
    if not 0.0 <= value < 1.0:
        raise DomainError(reader._field(name), f"must be a probability in [0, 1), got {value:g}")
    return value


def phi_architecture(reader: ConfigReader) -> Architecture:
    """Phi-1, Phi-1.5 and Phi-2 as PhiForCausalLM builds them (modeling_phi.py, transformers 5.24): one LayerNorm a
    layer whose output feeds attention and the MLP side by side (PhiDecoderLayer adds both to the layer's input),
    biases on the query, key, value and output projections (``dense``), on the MLP without a gate (fc1,
    ``hidden_act`` gelu_new, fc2) and on the output layer, and rotary positions on the first
    ``partial_rotary_factor`` of each head (0.5 unless given). ``resid_pdrop`` drops the attention's and the MLP's
    outputs, ``embd_pdrop`` the embeddings. The LayerNorms over Q and K (``qk_layernorm``, false in the published
    checkpoints) are not modelled and are refused. Not read, because they change no parameter and no saved tensor:
    ``rope_theta`` and ``layer_norm_eps``."""
    d = CONFIG_DEFAULTS["phi"]
    if reader.bool("qk_layernorm", False):
        raise DomainError(reader._field("qk_layernorm"), "Phi's LayerNorms over Q and K are not modelled")
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    act = reader.str("hidden_act", "gelu_new")
    if act not in GELU_NAMES and act != "relu":
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    return Architecture(
        num_hidden_layers=reader.layers("num_hidden_layers", d["num_hidden_layers"]),
        hidden_size=reader.int("hidden_size", d["hidden_size"]),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", heads),
        head_dim=reader.optional_int("head_dim", None),
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS["phi"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", False),
        attention_bias=True,
        mlp_bias=True,
        mlp="relu" if act == "relu" else "gelu",
        norm="layernorm",
        norms_per_layer=1,
        position_embedding="rope",
        dropout=reader.float("resid_pdrop", 0.0),
        attention_dropout=reader.float("attention_dropout", 0.0),
        model_type="phi",
        hidden_act=act,
        extras=(("embedding_dropout", _probability(reader, "embd_pdrop")),
                ("partial_rotary_factor", partial_rotary_factor(reader, PHI_PARTIAL_ROTARY))),
    )


def gpt_neox_architecture(reader: ConfigReader) -> Architecture:
    """GPT-NeoX-20B and Pythia as GPTNeoXForCausalLM builds them (modeling_gpt_neox.py, transformers 5.24): attention
    and the MLP side by side, each after a LayerNorm of the layer's input (``use_parallel_residual``, true in every
    published checkpoint; false is refused), the query, key and value in one ``query_key_value`` projection, biases
    on every linear layer but the output layer (``attention_bias`` for attention's), an MLP without a gate
    (dense_h_to_4h, ``hidden_act``, dense_4h_to_h), and rotary positions on the first ``partial_rotary_factor`` of
    each head (``rotary_pct``, 0.25 unless given). ``hidden_dropout`` drops the embeddings and the attention's and
    the MLP's outputs. Not read, because they change no parameter and no saved tensor: ``rope_theta``
    (``rotary_emb_base``), ``layer_norm_eps`` and ``classifier_dropout`` (a classification head's)."""
    d = CONFIG_DEFAULTS["gpt_neox"]
    if not reader.bool("use_parallel_residual", True):
        raise DomainError(reader._field("use_parallel_residual"), "GPT-NeoX's sequential layers are not modelled")
    act = reader.str("hidden_act", "gelu")
    if act not in GELU_NAMES and act != "relu":
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    factor = (reader.float("rotary_pct", GPT_NEOX_PARTIAL_ROTARY) if reader.config.get("rotary_pct") is not None
              else partial_rotary_factor(reader, GPT_NEOX_PARTIAL_ROTARY))
    return Architecture(
        num_hidden_layers=reader.layers("num_hidden_layers", d["num_hidden_layers"]),
        hidden_size=reader.int("hidden_size", d["hidden_size"]),
        num_attention_heads=reader.int("num_attention_heads", d["num_attention_heads"]),
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS["gpt_neox"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", False),
        attention_bias=reader.bool("attention_bias", True),
        mlp_bias=True,
        mlp="relu" if act == "relu" else "gelu",
        norm="layernorm",
        position_embedding="rope",
        dropout=_probability(reader, "hidden_dropout"),
        attention_dropout=reader.float("attention_dropout", 0.0),
        fused_qkv=True,
        model_type="gpt_neox",
        hidden_act=act,
        extras=(("partial_rotary_factor", factor),),
    )


def glm4_moe_architecture(reader: ConfigReader) -> Architecture:
    """GLM-4.5 and GLM-4.5-Air as Glm4MoeForCausalLM builds them (modeling_glm4_moe.py, transformers 5.24): Llama's
    grouped-query attention with biases on the query, key and value projections (``attention_bias``) and none on the
    output, rotary positions on the first ``partial_rotary_factor`` of each head (0.5 unless given), an RMSNorm over
    each head of Q and K where ``use_qk_norm``, the first ``first_k_dense_replace`` layers dense, then DeepSeek-V3's
    mixture: a sigmoid router in fp32 with a correction bias, group-limited (``n_group``, ``topk_group``),
    ``n_routed_experts`` experts of ``moe_intermediate_size`` beside ``n_shared_experts`` shared ones. The multi-token
    prediction layers (``num_mtp_layers``) are not part of the class, nor counted. Not read, because they change no
    parameter and no saved tensor: ``rope_theta`` and ``rms_norm_eps``; ``routed_scaling_factor`` is kept as read."""
    d = CONFIG_DEFAULTS["glm4_moe"]
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    hidden = reader.int("hidden_size", d["hidden_size"])
    act = reader.str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    return Architecture(
        num_hidden_layers=reader.layers("num_hidden_layers", d["num_hidden_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", d["num_key_value_heads"]),
        # Glm4MoeAttention: getattr(config, "head_dim", hidden_size // num_attention_heads), rounded down.
        head_dim=reader.optional_int("head_dim", max(1, hidden // heads)),
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS["glm4_moe"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", False),
        qkv_bias=reader.bool("attention_bias", False),
        mlp="swiglu",
        attention_dropout=reader.float("attention_dropout", 0.0),
        num_local_experts=reader.int("n_routed_experts", d["n_routed_experts"]),
        num_experts_per_tok=reader.int("num_experts_per_tok", d["num_experts_per_tok"]),
        moe_intermediate_size=reader.int("moe_intermediate_size", d["moe_intermediate_size"]),
        norm_topk_prob=reader.bool("norm_topk_prob", True),
        n_shared_experts=reader.int("n_shared_experts", d["n_shared_experts"]),
        first_k_dense_replace=reader.int("first_k_dense_replace", d["first_k_dense_replace"]),
        n_group=reader.int("n_group", 1),
        topk_group=reader.int("topk_group", 1),
        qk_norm=reader.bool("use_qk_norm", False),
        output_router_logits=output_router_logits(reader),
        model_type="glm4_moe",
        hidden_act=act,
        extras=(("routed_scaling_factor", reader.float("routed_scaling_factor", 1.0)),
                ("partial_rotary_factor", partial_rotary_factor(reader, GLM4_PARTIAL_ROTARY))),
    )


def cohere_architecture(reader: ConfigReader) -> Architecture:
    """Command R as CohereForCausalLM builds it (modeling_cohere.py, transformers 5.24): one LayerNorm a layer, with a
    weight and no bias, computed in fp32 (CohereLayerNorm), whose output feeds attention and the MLP side by side
    (CohereDecoderLayer adds both to the layer's input), grouped-query attention with rotary positions, cos and sin
    interleaved (``repeat_interleave``) and Q and K rotated in fp32, a gated MLP of ``hidden_act`` (silu), biases on
    attention only where ``attention_bias``, and the output layer tied to the embedding unless
    ``tie_word_embeddings`` is false. The LayerNorms over each head of Q and K (``use_qk_norm``: Command R+) are not
    modelled and are refused. Not read, because they change no parameter and no saved tensor: ``logit_scale`` (a
    Python float multiplying the logits), ``rope_theta`` and ``layer_norm_eps``."""
    if reader.bool("use_qk_norm", False):
        raise DomainError(reader._field("use_qk_norm"), "Cohere's LayerNorms over each head of Q and K are not "
                                                        "modelled")
    return _cohere_common(reader, "cohere", head_dim=None, window=(None, 0))


def cohere2_architecture(reader: ConfigReader) -> Architecture:
    """Command R7B and Command A as Cohere2ForCausalLM builds them (modeling_cohere2.py, transformers 5.24): Cohere's
    layer (`cohere_architecture`) where the layers ``layer_types`` names ``sliding_attention`` (without it all but
    every ``sliding_window_pattern``-th, 4 unless given) attend within ``sliding_window`` (4096 unless given) and alone
    rotate Q and K; the others attend to every earlier token without positions. A null ``sliding_window`` beside
    sliding-window layers is refused: the class cannot build their mask (masking_utils'
    create_sliding_window_causal_mask raises). ``head_dim`` is hidden_size // num_attention_heads whatever config.json
    says (Cohere2Config.__post_init__)."""
    d = CONFIG_DEFAULTS["cohere2"]
    layers = reader.layers("num_hidden_layers", d["num_hidden_layers"])
    pattern = COHERE2_SLIDING_WINDOW_PATTERN
    if reader.str_list("layer_types") is None:
        pattern = reader.int("sliding_window_pattern", COHERE2_SLIDING_WINDOW_PATTERN)
        if pattern < 1:
            raise DomainError(reader._field("sliding_window_pattern"), f"must be at least 1, got {pattern}")
    window = window_layers(reader, layers, pattern=pattern, window=COHERE2_SLIDING_WINDOW)
    if window[1] and "sliding_window" in reader.config and reader.config["sliding_window"] is None:
        raise DomainError(reader._field("sliding_window"), "must be a number of tokens: Cohere2's sliding-window "
                                                           "layers cannot attend without one")
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    return _cohere_common(reader, "cohere2", head_dim=max(1, reader.int("hidden_size", d["hidden_size"]) // heads),
                          window=window)


def _cohere_common(reader: ConfigReader, model_type: str, *, head_dim: int | None,
                   window: tuple[int | None, int]) -> Architecture:
    d = CONFIG_DEFAULTS[model_type]
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    act = reader.str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    return Architecture(
        num_hidden_layers=reader.layers("num_hidden_layers", d["num_hidden_layers"]),
        hidden_size=reader.int("hidden_size", d["hidden_size"]),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", heads),
        head_dim=head_dim if head_dim is not None else reader.optional_int("head_dim", None),
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS[model_type]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", True),
        attention_bias=reader.bool("attention_bias", False),
        mlp="swiglu",
        norm="layernorm",
        norms_per_layer=1,
        position_embedding="rope",
        attention_dropout=reader.float("attention_dropout", 0.0),
        sliding_window=window[0],
        sliding_window_layers=window[1],
        model_type=model_type,
        hidden_act=act,
    )


def falcon_architecture(reader: ConfigReader) -> Architecture:
    """Falcon-7B, -40B, -180B and Falcon2-11B as FalconForCausalLM builds them (modeling_falcon.py, transformers 5.24):
    attention and an MLP without a gate (dense_h_to_4h, ``activation``, dense_4h_to_h) side by side, the query, key and
    value in one ``query_key_value`` projection, rotary positions on the whole head, biases on every linear layer but
    the output layer where ``bias``, LayerNorms with biases, the output layer tied to the embedding unless
    ``tie_word_embeddings`` is false. Falcon-7B's layout (``multi_query``): one key/value head and one LayerNorm a
    layer. ``new_decoder_architecture`` (Falcon-40B, -180B, Falcon2-11B): ``num_kv_heads`` key/value heads and
    ``num_ln_in_parallel_attn`` LayerNorms of the layer's input (2 unless given). Refused, as not modelled: ALiBi
    (``alibi``: falcon-rw), sequential blocks (``parallel_attn`` false), multi-head attention without the new
    decoder architecture, the new one with a single key/value head, and dropout (``hidden_dropout``). Not read,
    because it changes no parameter and no saved tensor with rotary positions: ``attention_dropout`` (used by ALiBi's
    path only); nor ``rope_theta`` and ``layer_norm_epsilon``."""
    d = CONFIG_DEFAULTS["falcon"]
    for name, why in (("alibi", "Falcon's ALiBi positions are not modelled"),):
        if reader.bool(name, False):
            raise DomainError(reader._field(name), why)
    if not reader.bool("parallel_attn", True):
        raise DomainError(reader._field("parallel_attn"), "Falcon's sequential attention and MLP are not modelled")
    if reader.float("hidden_dropout", 0.0):
        raise DomainError(reader._field("hidden_dropout"), "Falcon's dropout of the summed blocks is not modelled")
    new = reader.bool("new_decoder_architecture", False)
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    kv_heads = _falcon_kv_heads(reader, heads, new=new)
    # FalconConfig.__post_init__ takes the older n_embed for hidden_size where given.
    hidden = reader.int("n_embed" if reader.config.get("n_embed") is not None else "hidden_size", d["hidden_size"])
    act = reader.str("activation", "gelu")
    if act not in GELU_NAMES and act != "relu":
        raise DomainError(reader._field("activation"), f"unsupported activation {act!r}")
    bias = reader.bool("bias", False)
    return Architecture(
        num_hidden_layers=reader.layers("num_hidden_layers", d["num_hidden_layers"]),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=reader.int("ffn_hidden_size", 4 * hidden),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS["falcon"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", True),
        attention_bias=bias,
        mlp_bias=bias,
        mlp="relu" if act == "relu" else "gelu",
        norm="layernorm",
        norms_per_layer=reader.int("num_ln_in_parallel_attn", 2) if new else 1,
        position_embedding="rope",
        fused_qkv=True,
        model_type="falcon",
        hidden_act=act,
    )


def _falcon_kv_heads(reader: ConfigReader, heads: int, *, new: bool) -> int:
    """The key/value heads FalconAttention projects: ``num_kv_heads`` (heads unless given) with the new decoder
    architecture, one with ``multi_query``; the rest is refused (see `falcon_architecture`)."""
    if not new:
        if not reader.bool("multi_query", True):
            raise DomainError(reader._field("multi_query"), "Falcon's multi-head attention without "
                                                            "new_decoder_architecture is not modelled")
        return 1
    kv_heads = reader.int("num_kv_heads", heads)
    if kv_heads == 1 and heads > 1:
        raise DomainError(reader._field("num_kv_heads"), "one key/value head with new_decoder_architecture is not "
                                                         "modelled")
    return kv_heads
