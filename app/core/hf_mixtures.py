"""Readers of the mixtures of experts whose configuration classes are their own: DeepSeek-V3, DeepSeek-V2, gpt-oss
and Qwen2-MoE, each with its class's field names and defaults in transformers 5.24."""

from __future__ import annotations

from typing import Any

from app.core.architecture import TOPK_METHODS, Architecture
from app.core.config_defaults import (
    DEEPSEEK_V2_DEFAULTS,
    DEEPSEEK_V2_ROUTED_SCALING,
    DEEPSEEK_V3_DEFAULTS,
    DEEPSEEK_V3_ROUTED_SCALING,
    GPT_OSS_DEFAULTS,
    GPT_OSS_SLIDING_WINDOW_PATTERN,
    GPT_OSS_SWIGLU,
    QWEN2_MOE_DEFAULTS,
)
from app.core.errors import DomainError
from app.core.hf_decoder import window_layers
from app.core.hf_reader import ConfigReader, output_router_logits, short_value


def deepseek_v3_architecture(reader: ConfigReader) -> Architecture:
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


def deepseek_v2_architecture(reader: ConfigReader) -> Architecture:
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


def gpt_oss_architecture(reader: ConfigReader) -> Architecture:
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


def qwen2_moe_architecture(reader: ConfigReader) -> Architecture:
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
