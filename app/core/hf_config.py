"""Architectures from a Hugging Face ``config.json``, with each model type's own field names and defaults.

Defaults are those of the model type's configuration class in transformers (e.g.
``LlamaConfig.num_key_value_heads`` falls back to ``num_attention_heads``; ``GPT2Config.n_inner``
to ``4 * n_embd``; ``GemmaConfig.tie_word_embeddings`` is True).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final, Literal

from app.core.architecture import TOPK_METHODS, Architecture
from app.core.config_defaults import (
    CONFIG_DEFAULTS,
    DEEPSEEK_V2_DEFAULTS,
    DEEPSEEK_V2_ROUTED_SCALING,
    DEEPSEEK_V3_DEFAULTS,
    DEEPSEEK_V3_ROUTED_SCALING,
    DEFAULT_MAX_POSITIONS,
    GEMMA3_SLIDING_WINDOW,
    GEMMA3_SLIDING_WINDOW_PATTERN,
    GLM4_PARTIAL_ROTARY,
    GPT_OSS_DEFAULTS,
    GPT_OSS_SLIDING_WINDOW_PATTERN,
    GPT_OSS_SWIGLU,
    QWEN2_MOE_DEFAULTS,
)
from app.core.errors import DomainError
from app.core.hf_more_families import (
    cohere2_architecture,
    cohere_architecture,
    falcon_architecture,
    glm4_moe_architecture,
    gpt_neox_architecture,
    partial_rotary_factor,
    phi_architecture,
    starcoder2_architecture,
)
from app.core.hf_reader import FIELD_PREFIX, ConfigReader, output_router_logits, short_value, window_layers
from app.core.model_kinds import GELU_NAMES, MAX_MODEL_TYPE_CHARS, STANDARD_FIELDS, not_a_decoder

SUPPORTED_MODEL_TYPES: Final = ("gpt2", "llama", "mistral", "qwen2", "gemma", "gemma2", "phi3", "mixtral", "qwen3",
                                 "qwen3_moe", "qwen2_moe", "gemma3_text", "gemma3", "olmo2", "deepseek_v2", "deepseek_v3",
                                 "gpt_oss", "granite", "glm4", "starcoder2", "phi",
                                 "gpt_neox", "glm4_moe", "cohere", "cohere2", "falcon")

GEMMA_TYPES: Final = ("gemma", "gemma2", "gemma3_text")









def architecture_from_hf_config(config: Mapping[str, Any]) -> Architecture:
    """Build an Architecture from a parsed ``config.json``; unsupported types and missing fields raise DomainError."""
    if not isinstance(config, Mapping):
        raise DomainError(FIELD_PREFIX, "must be a JSON object (the contents of config.json)")
    model_type = config.get("model_type")
    if model_type is None:
        raise DomainError(f"{FIELD_PREFIX}.model_type", "config.json has no 'model_type'")
    if model_type not in SUPPORTED_MODEL_TYPES:
        return _unknown_decoder(config, model_type)
    reader = ConfigReader(config)
    if model_type == "gemma3":
        reader, model_type = _gemma3_text_config(config), "gemma3_text"
    try:
        if model_type == "gpt2":
            return _gpt2(reader)
        if model_type == "deepseek_v3":
            return _deepseek_v3(reader)
        if model_type == "deepseek_v2":
            return _deepseek_v2(reader)
        if model_type == "gpt_oss":
            return _gpt_oss(reader)
        if model_type == "qwen2_moe":
            return _qwen2_moe(reader)
        if model_type == "glm4":
            return _glm4(reader)
        if model_type == "starcoder2":
            return starcoder2_architecture(reader)
        if model_type == "phi":
            return phi_architecture(reader)
        if model_type == "gpt_neox":
            return gpt_neox_architecture(reader)
        if model_type == "glm4_moe":
            return glm4_moe_architecture(reader)
        if model_type == "cohere":
            return cohere_architecture(reader)
        if model_type == "cohere2":
            return cohere2_architecture(reader)
        if model_type == "falcon":
            return falcon_architecture(reader)
        return _llama_family(reader, model_type)
    except DomainError as error:
        if error.field.startswith(FIELD_PREFIX):
            raise
        # Architecture validation names fields as model.<name>; point it at the config instead.
        raise DomainError(error.field.replace("model.", f"{reader.prefix}.", 1), error.message) from None


def _unknown_decoder(config: Mapping[str, Any], model_type: Any) -> Architecture:
    """A model type with no record: estimated as a Llama-style decoder from its config's standard sizes, where it is
    a decoder-only language model and carries them (`families.stand_in_warnings` says so in the answer); otherwise
    refused with what is missing or why it is not one."""
    field = f"{FIELD_PREFIX}.model_type"
    supported = f"the model types with a record: {', '.join(SUPPORTED_MODEL_TYPES)}"
    if not isinstance(model_type, str) or not 0 < len(model_type) <= MAX_MODEL_TYPE_CHARS:
        raise DomainError(field, f"must be the model type's name, a string of 1 to {MAX_MODEL_TYPE_CHARS} characters, "
                                 f"got {short_value(model_type)}")
    why = not_a_decoder(config)
    if why:
        raise DomainError(field, f"model_type {model_type!r} is {why}: with no record of its own it cannot be "
                                 f"estimated as a Llama-style decoder; {supported}")
    missing = [name for name in STANDARD_FIELDS if config.get(name) is None]
    if missing:
        raise DomainError(f"{FIELD_PREFIX}.{missing[0]}",
                          f"model_type {model_type!r} has no record here, so it is estimated as a Llama-style "
                          f"decoder from {', '.join(STANDARD_FIELDS)}; config.json lacks {', '.join(missing)}. "
                          f"Give them, or use {supported}")
    try:
        return _llama_family(ConfigReader(config), model_type)
    except DomainError as error:
        if error.field.startswith(FIELD_PREFIX):
            raise
        raise DomainError(error.field.replace("model.", f"{FIELD_PREFIX}.", 1), error.message) from None


def _gemma3_text_config(config: Mapping[str, Any]) -> ConfigReader:
    """The language model of a Gemma 3 ``config.json`` (model_type ``gemma3``): its ``text_config``.

    What is counted is what Gemma3ForCausalLM counts for that text_config: the language model that
    transformers builds inside Gemma3ForConditionalGeneration. The SigLIP vision tower and the multimodal
    projector are not counted (419,816,304 parameters for google/gemma-3-4b-pt, measured:
    Gemma3ForConditionalGeneration minus Gemma3ForCausalLM on the meta device, transformers 5.24), nor are the
    image tokens' activations: a text-only fine-tune (vision tower frozen or dropped) is what is modelled.
    """
    text = config.get("text_config")
    prefix = f"{FIELD_PREFIX}.text_config"
    if text is None:  # Gemma3Config(text_config=None) builds Gemma3TextConfig() with every default
        text = {}
    if not isinstance(text, Mapping):
        raise DomainError(prefix, "must be a JSON object (the language model's configuration)")
    return ConfigReader(text, prefix)


def _gpt2(reader: ConfigReader) -> Architecture:
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


def _deepseek_v3(reader: ConfigReader) -> Architecture:
    """DeepSeek-V3 as DeepseekV3ForCausalLM builds it (modeling_deepseek_v3.py, transformers 5.24).

    Multi-head latent attention, ``first_k_dense_replace`` dense layers, then mixtures of ``n_routed_experts``
    experts with ``n_shared_experts`` shared ones and group-limited sigmoid routing. The multi-token
    prediction module (``num_nextn_predict_layers``, DeepSeek-V3's layer 61 in the checkpoint) is not part of
    that class, which skips its weights on loading: it is not counted, nor its activations. ``scoring_func``,
    ``topk_method`` and ``moe_layer_freq`` are not read: the class always scores with a sigmoid, routes by
    group and makes every layer after the first k sparse. ``q_lora_rank`` null means a plain q_proj.
    """
    d = DEEPSEEK_V3_DEFAULTS
    return Architecture(
        **_deepseek_common(reader, d, DEEPSEEK_V3_ROUTED_SCALING),
        num_local_experts=reader.int("n_routed_experts" if reader.config.get("n_routed_experts") is not None
                                     else "num_local_experts", d["n_routed_experts"]),
        num_experts_per_tok=reader.int("num_experts_per_tok", d["num_experts_per_tok"]),
        norm_topk_prob=reader.bool("norm_topk_prob", True),
        n_group=reader.int("n_group", d["n_group"]),
        topk_group=reader.int("topk_group", d["topk_group"]),
        model_type="deepseek_v3",
    )


def _deepseek_common(reader: ConfigReader, d: dict[str, int], routed_scaling: float) -> dict[str, Any]:
    """The fields DeepSeek-V2's and V3's configs read alike (defaults `d`): the layers, multi-head latent attention
    (``q_lora_rank`` null meaning a plain q_proj), the dense and expert MLP widths, the shared experts and the dense
    first layers."""
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    act = reader.str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    q_lora = None if "q_lora_rank" in reader.config and reader.config["q_lora_rank"] is None \
        else reader.int("q_lora_rank", d["q_lora_rank"])
    return {
        "num_hidden_layers": reader.layers("num_hidden_layers", d["num_hidden_layers"]),
        "hidden_size": reader.int("hidden_size", d["hidden_size"]),
        "num_attention_heads": heads,
        # MLA expands keys and values to every head; the configs' None falls back to the query heads.
        "num_key_value_heads": reader.int("num_key_value_heads", heads),
        "intermediate_size": reader.int("intermediate_size", d["intermediate_size"]),
        "vocab_size": reader.int("vocab_size", d["vocab_size"]),
        "max_position_embeddings": reader.int("max_position_embeddings", d["max_position_embeddings"]),
        "tie_word_embeddings": reader.bool("tie_word_embeddings", False),
        "attention_bias": reader.bool("attention_bias", False),
        "mlp": "swiglu",
        "attention_dropout": reader.float("attention_dropout", 0.0),
        "moe_intermediate_size": reader.int("moe_intermediate_size", d["moe_intermediate_size"]),
        "n_shared_experts": reader.int("n_shared_experts", d["n_shared_experts"]),
        "first_k_dense_replace": reader.int("first_k_dense_replace", d["first_k_dense_replace"]),
        "q_lora_rank": q_lora,
        "kv_lora_rank": reader.int("kv_lora_rank", d["kv_lora_rank"]),
        "qk_nope_head_dim": reader.int("qk_nope_head_dim", d["qk_nope_head_dim"]),
        "qk_rope_head_dim": reader.int("qk_rope_head_dim", d["qk_rope_head_dim"]),
        "v_head_dim": reader.int("v_head_dim", d["v_head_dim"]),
        "hidden_act": act,
        "extras": (("routed_scaling_factor", reader.float("routed_scaling_factor", routed_scaling)),),
    }


def _deepseek_v2(reader: ConfigReader) -> Architecture:
    """DeepSeek-V2 and DeepSeek-V2-Lite as DeepseekV2ForCausalLM builds them (modeling_deepseek_v2.py,
    transformers 5.24).

    Multi-head latent attention as DeepSeek-V3's (a plain q_proj where ``q_lora_rank`` is null, as in V2-Lite),
    ``first_k_dense_replace`` dense layers, then mixtures of ``n_routed_experts`` experts beside ``n_shared_experts``
    shared ones. DeepseekV2TopkRouter scores the experts with a softmax and picks k = ``num_experts_per_tok`` by
    ``topk_method``: ``greedy`` over all experts (``n_group`` and ``topk_group`` unread), or
    ``group_limited_greedy`` within the ``topk_group`` best of ``n_group`` groups, each scored by its best expert;
    any other method leaves the class without routing weights and is refused. The k weights are never renormalised
    (the class does not read ``norm_topk_prob``) and are multiplied by ``routed_scaling_factor``, a Python number
    (kept as read; it changes no memory). ``mlp_bias`` gives the dense and shared MLPs biases, which the estimate
    does not model beside experts, so it is refused. Not read, because they change no parameter and no saved tensor:
    ``scoring_func``, ``moe_layer_freq`` (the class makes every layer after the first k sparse), ``aux_loss_alpha``
    and ``seq_aux`` (the class computes no auxiliary loss), ``rope_scaling``/``rope_theta`` (YaRN rescales the
    rotary angles and the attention's scale), and ``head_dim``, which DeepseekV2Config overwrites with
    ``qk_rope_head_dim``. ``output_router_logits`` is not read either: the router logits it returns are not kept
    for backward.
    """
    d = DEEPSEEK_V2_DEFAULTS
    if reader.bool("mlp_bias", False):
        raise DomainError(reader._field("mlp_bias"), "biases on DeepSeek-V2's dense and shared MLPs are not modelled")
    method = reader.str("topk_method", "greedy")
    if method not in TOPK_METHODS:
        raise DomainError(reader._field("topk_method"), f"must be one of {', '.join(TOPK_METHODS)} "
                                                        f"(DeepseekV2TopkRouter's), got {method!r}")
    grouped = method == "group_limited_greedy"
    return Architecture(
        **_deepseek_common(reader, d, DEEPSEEK_V2_ROUTED_SCALING),
        # DeepseekV2Config maps num_experts to n_routed_experts.
        num_local_experts=reader.int("n_routed_experts" if reader.config.get("num_experts") is None
                                     else "num_experts", d["n_routed_experts"]),
        num_experts_per_tok=reader.int("num_experts_per_tok"),
        norm_topk_prob=False,
        n_group=reader.int("n_group") if grouped else 1,
        topk_group=reader.int("topk_group") if grouped else 1,
        topk_method=method,
        model_type="deepseek_v2",
    )


def _sliding_window(reader: ConfigReader, model_type: str, layers: int) -> tuple[int | None, int]:
    """Gemma 3's local attention: the window and how many layers use it (Gemma3TextConfig.__post_init__)."""
    if model_type != "gemma3_text":
        return None, 0
    if reader.bool("use_bidirectional_attention", False):
        raise DomainError(reader._field("use_bidirectional_attention"), "bidirectional attention is not modelled")
    pattern = GEMMA3_SLIDING_WINDOW_PATTERN
    if reader.str_list("layer_types") is None:
        pattern = reader.int("sliding_window_pattern", GEMMA3_SLIDING_WINDOW_PATTERN)
        if pattern < 1:
            raise DomainError(reader._field("sliding_window_pattern"), f"must be at least 1, got {pattern}")
    return window_layers(reader, layers, pattern=pattern, window=GEMMA3_SLIDING_WINDOW)


def _gpt_oss(reader: ConfigReader) -> Architecture:
    """gpt-oss as GptOssForCausalLM builds it (modeling_gpt_oss.py, transformers 5.24).

    Every layer a mixture of ``num_local_experts`` experts with biases, ``num_experts_per_tok`` of them per token,
    chosen by a router with a bias; grouped-query attention with biases on all four projections and a learned
    sink logit per head; sliding-window and full-attention layers alternating (``layer_types``). The experts'
    activation is a clamped SwiGLU, ``(clamp(up, ±limit) + 1) · g · sigmoid(alpha · g)`` with
    ``g = clamp(gate, max=limit)``, whatever ``hidden_act`` says (GptOssExperts._apply_gate); ``swiglu_alpha`` and
    ``swiglu_limit`` are kept as read (GptOssConfig's 1.702 and 7.0 by default). Not read, because they change no
    parameter and no saved tensor: the rotary scaling (``rope_scaling``/``rope_parameters``, YaRN), ``rope_theta``,
    ``router_aux_loss_coef`` (the auxiliary loss is off unless ``output_router_logits``) and
    ``quantization_config``: the published checkpoints store the experts' matrices in MXFP4 (4-bit values with a
    shared 8-bit scale per 32), but training loads them dequantized to the training dtype (transformers'
    Mxfp4Config(dequantize=True), or bf16 weights converted once), so the same parameters are counted at the
    precision the estimate trains in. A null ``head_dim`` falls back to hidden_size / num_attention_heads and a
    null ``num_key_value_heads`` to num_attention_heads, as GptOssConfig.__post_init__ does.
    """
    d = GPT_OSS_DEFAULTS
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    hidden = reader.int("hidden_size", d["hidden_size"])
    layers = reader.layers("num_hidden_layers", d["num_hidden_layers"])
    head_dim = None if "head_dim" in reader.config and reader.config["head_dim"] is None \
        else reader.int("head_dim", d["head_dim"])
    kv_heads = heads if "num_key_value_heads" in reader.config and reader.config["num_key_value_heads"] is None \
        else reader.int("num_key_value_heads", d["num_key_value_heads"])
    # GptOssConfig keeps a null sliding_window, and its sliding layers then attend to all earlier tokens.
    null_window = "sliding_window" in reader.config and reader.config["sliding_window"] is None
    window, sliding = window_layers(reader, layers, pattern=GPT_OSS_SLIDING_WINDOW_PATTERN,
                                     window=None if null_window else d["sliding_window"])
    extras = tuple((name, reader.float(name, default)) for name, default in GPT_OSS_SWIGLU.items())
    return Architecture(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", d["max_position_embeddings"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", False),
        attention_bias=reader.bool("attention_bias", True),
        mlp_bias=True,
        mlp="swiglu",
        attention_dropout=reader.float("attention_dropout", 0.0),
        # GptOssConfig maps num_experts to num_local_experts, which its to_dict() writes.
        num_local_experts=reader.int("num_experts" if reader.config.get("num_experts") is not None
                                     else "num_local_experts", d["num_local_experts"]),
        num_experts_per_tok=reader.int("num_experts_per_tok", d["num_experts_per_tok"]),
        # A softmax over the k logits the router picked: the weights sum to 1 with nothing to renormalise.
        norm_topk_prob=False,
        router_bias=True,
        attention_sinks=True,
        output_router_logits=output_router_logits(reader),
        sliding_window=window,
        sliding_window_layers=sliding,
        model_type="gpt_oss",
        hidden_act=reader.str("hidden_act", "silu"),
        extras=extras,
    )


def _qwen2_moe(reader: ConfigReader) -> Architecture:
    """Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) as Qwen2MoeForCausalLM builds it (modeling_qwen2_moe.py,
    transformers 5.24).

    Attention as Qwen2's, with biases on the query, key and value projections (``qkv_bias``, True by default) and
    none on the output. Layer i is a mixture of ``num_experts`` experts of ``moe_intermediate_size``, k =
    ``num_experts_per_tok`` per token chosen by a softmax router (renormalised only with ``norm_topk_prob``, False by
    default), beside one shared expert of ``shared_expert_intermediate_size`` whose output a sigmoid gate
    (``shared_expert_gate``, a linear h -> 1) scales, when i is not in ``mlp_only_layers`` and (i + 1) is a
    multiple of ``decoder_sparse_step``; the other layers have a dense MLP of ``intermediate_size`` (every layer
    with ``num_experts`` 0). The estimate counts a mixture's dense layers as its first ones (DeepSeek-V3's
    layout), so a config whose dense layers are not the first k is refused, naming the key that makes it so.
    Sliding-window attention (``use_sliding_window``, off in both published checkpoints) is refused: Qwen2-MoE's
    rule for which layers use it is not modelled. Not read, because they change no parameter and no saved tensor:
    ``rope_theta``/``rope_scaling``, ``router_aux_loss_coef`` (the auxiliary loss is off unless
    ``output_router_logits``) and ``rms_norm_eps``. ``head_dim``, which Qwen2MoeConfig does not declare, is used
    where a config.json gives it, as Qwen2MoeAttention reads it.
    """
    d = QWEN2_MOE_DEFAULTS
    layers = reader.layers("num_hidden_layers", d["num_hidden_layers"])
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    act = reader.str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    if reader.bool("use_sliding_window", False) or "sliding_attention" in (reader.str_list("layer_types") or []):
        raise DomainError(reader._field("use_sliding_window"), "Qwen2-MoE's sliding-window layers are not modelled")
    experts = reader.int("num_experts" if reader.config.get("num_experts") is not None else "num_local_experts",
                         d["num_experts"])
    dense = _qwen2_moe_dense_layers(reader, layers) if experts else layers
    moe = experts > 0 and dense < layers
    return Architecture(
        num_hidden_layers=layers,
        hidden_size=reader.int("hidden_size", d["hidden_size"]),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", d["num_key_value_heads"]),
        head_dim=reader.optional_int("head_dim", None),
        intermediate_size=reader.int("intermediate_size", d["intermediate_size"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", d["max_position_embeddings"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", False),
        qkv_bias=reader.bool("qkv_bias", True),
        mlp="swiglu",
        attention_dropout=reader.float("attention_dropout", 0.0),
        num_local_experts=experts if moe else 0,
        num_experts_per_tok=reader.int("num_experts_per_tok", d["num_experts_per_tok"]) if moe else 2,
        moe_intermediate_size=reader.int("moe_intermediate_size", d["moe_intermediate_size"]) if moe else None,
        norm_topk_prob=reader.bool("norm_topk_prob", False) if moe else True,
        first_k_dense_replace=dense if moe else 0,
        shared_expert_intermediate_size=(reader.int("shared_expert_intermediate_size",
                                                    d["shared_expert_intermediate_size"]) if moe else None),
        shared_expert_gate=moe,
        output_router_logits=output_router_logits(reader) if moe else False,
        model_type="qwen2_moe",
        hidden_act=act,
    )




def _qwen2_moe_dense_layers(reader: ConfigReader, layers: int) -> int:
    """How many layers keep a dense MLP (Qwen2MoeDecoderLayer: those in ``mlp_only_layers`` and those whose
    index + 1 is not a multiple of ``decoder_sparse_step``), refused unless they are the first k."""
    step = reader.int("decoder_sparse_step", QWEN2_MOE_DEFAULTS["decoder_sparse_step"])
    if step < 1:
        raise DomainError(reader._field("decoder_sparse_step"), f"must be at least 1, got {step}")
    only = reader.config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise DomainError(reader._field("mlp_only_layers"), f"must be a list of layer indices, got {short_value(only)}")
    only_set = set(only)
    dense = [i for i in range(layers) if i in only_set or (i + 1) % step]
    if dense != list(range(len(dense))):
        by_step = [i for i in range(layers) if (i + 1) % step]
        key = "mlp_only_layers" if by_step == list(range(len(by_step))) else "decoder_sparse_step"
        raise DomainError(reader._field(key), f"makes layers {_layer_list(dense)} dense; the estimate models a "
                                              "mixture's dense layers as its first ones only")
    return len(dense)


def _layer_list(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return shown + (", ..." if len(indices) > 8 else "")


def _gated_mlp(act: str) -> Literal["swiglu", "geglu"]:
    """The gated MLP an activation makes: SwiGLU with silu, GeGLU with a gelu."""
    if act == "silu" or act == "swish":
        return "swiglu"
    if act in GELU_NAMES:
        return "geglu"
    raise DomainError(f"{FIELD_PREFIX}.hidden_act", f"unsupported activation {act!r}")


def _softcaps(reader: ConfigReader, model_type: str) -> list[tuple[str, float]]:
    """Gemma 2 caps the attention scores and the logits. Gemma 3 caps the logits only: Gemma3Attention keeps
    attn_logit_softcapping but does not pass it to the attention function (modeling_gemma3.py, transformers 5.24)."""
    extras: list[tuple[str, float]] = []
    for name in {"gemma2": ("attn_logit_softcapping", "final_logit_softcapping"),
                 "gemma3_text": ("final_logit_softcapping",)}.get(model_type, ()):
        value = reader.float(name, 0.0)
        if value < 0 or value != value or value == float("inf"):
            raise DomainError(f"{FIELD_PREFIX}.{name}", f"must be a positive cap on the scores, or null for none; "
                                                        f"got {value:g}")
        if value:
            extras.append((name, value))
    return extras


def _llama_family(reader: ConfigReader, model_type: str) -> Architecture:
    defaults = CONFIG_DEFAULTS.get(model_type, {})
    heads = reader.int("num_attention_heads", defaults.get("num_attention_heads"))
    layers = reader.layers("num_hidden_layers", defaults.get("num_hidden_layers"))
    gemma = model_type in GEMMA_TYPES
    act = reader.str("hidden_activation", "") or reader.str("hidden_act", "gelu_pytorch_tanh" if gemma else "silu")
    mlp = _gated_mlp(act)
    extras = _softcaps(reader, model_type)
    head_dim = reader.optional_int("head_dim", 256 if gemma else 128 if model_type == "qwen3"
                                   else defaults.get("head_dim"))
    sliding_window, sliding_layers = _sliding_window(reader, model_type, layers)
    moe = model_type in ("mixtral", "qwen3_moe")
    if model_type == "qwen3_moe":
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
        tie_word_embeddings=reader.bool("tie_word_embeddings", gemma),
        attention_bias=reader.bool("attention_bias", False),
        qkv_bias=True if model_type == "qwen2" else None,
        mlp_bias=reader.bool("mlp_bias", False),
        mlp=mlp,
        norm="rmsnorm",
        norms_per_layer=4 if model_type in ("gemma2", "gemma3_text") else 2,
        norm_placement="post" if model_type == "olmo2" else "pre",
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
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"),
        output_router_logits=output_router_logits(reader) if moe else False,
        qk_norm_over="projection" if model_type == "olmo2" else "head",
        sliding_window=sliding_window,
        sliding_window_layers=sliding_layers,
        model_type=model_type,
        hidden_act=act,
        extras=tuple(extras),
    )


def _glm4(reader: ConfigReader) -> Architecture:
    """GLM-4-0414 as Glm4ForCausalLM builds it (modeling_glm4.py, transformers 5.24): Llama's layer with four
    RMSNorms (before and after attention and the MLP: Glm4DecoderLayer's post_self_attn_layernorm and
    post_mlp_layernorm), biases on the query, key and value projections (``attention_bias``, True by default) and none
    on the output, the gate and up projections as one ``gate_up_proj``, and rotary positions on the first
    ``partial_rotary_factor`` of each head (0.5 unless given; top level or in ``rope_parameters``). Not read, because
    they change no parameter and no saved tensor: ``rope_theta`` and ``rms_norm_eps``."""
    base = _llama_family(reader, "glm4")
    factor = partial_rotary_factor(reader, GLM4_PARTIAL_ROTARY)
    return replace(base, norms_per_layer=4, qkv_bias=reader.bool("attention_bias", True), attention_bias=False,
                   fused_gate_up=True, extras=(*base.extras, ("partial_rotary_factor", factor)))













