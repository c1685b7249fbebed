"""Llama 4's language model (Llama4ForCausalLM, modeling_llama4.py, transformers 5.24), read from a ``llama4_text``
config.json or the ``text_config`` of a ``llama4`` one, with Llama4TextConfig's field names and defaults."""

from __future__ import annotations

from app.core.architecture import Architecture
from app.core.config_defaults import CONFIG_DEFAULTS, DEFAULT_MAX_POSITIONS
from app.core.errors import DomainError
from app.core.hf_reader import ConfigReader, short_value


def llama4_text_architecture(reader: ConfigReader) -> Architecture:
    """Llama 4 as Llama4ForCausalLM builds it: grouped-query attention (biases on all four projections where
    ``attention_bias``), rotary positions as complex numbers on the layers ``no_rope_layers`` marks 1 (without it all
    but every ``no_rope_layer_interval``-th), which alone attend within chunks of ``attention_chunk_size`` and, where
    ``use_qk_norm``, L2-normalise Q and K after rotating them (Llama4TextL2Norm, no weight); the other layers attend
    to every earlier token without positions, their queries scaled by position where ``attn_temperature_tuning``.
    Every layer's MLP is Llama4TextMoe: a router over ``num_local_experts`` whose top ``num_experts_per_tok`` logits
    pass a sigmoid, every expert (of width ``intermediate_size``) run on every token scaled by its score, and a shared
    expert of the same width.

    Refused, not modelled: dense layers among the mixtures (``moe_layers`` or ``interleave_moe_layer_step`` leaving
    some out: Maverick's layout, whose dense MLPs are ``intermediate_size_mlp`` wide), a null
    ``attention_chunk_size`` (its rotating layers then attend in full), ``layer_types`` other than the rotating
    layers' chunks, attention dropout, and ``output_router_logits`` (the class returns the logits and adds no loss).
    Not read, because they change no parameter and no saved tensor: ``rope_parameters``, ``rms_norm_eps``,
    ``floor_scale``, ``attn_scale`` and ``router_jitter_noise`` (unused by the class)."""
    d = CONFIG_DEFAULTS["llama4_text"]
    layers = reader.layers("num_hidden_layers", d["num_hidden_layers"])
    heads = reader.int("num_attention_heads", d["num_attention_heads"])
    act = reader.str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise DomainError(reader._field("hidden_act"), f"unsupported activation {act!r}")
    _all_layers_mixtures(reader, layers)
    chunk = _chunk_size(reader, d["attention_chunk_size"])
    rotating = _rotating_layers(reader, layers, d["no_rope_layer_interval"])
    if reader.float("attention_dropout", 0.0) > 0:
        raise DomainError(reader._field("attention_dropout"), "Llama 4's attention dropout is not modelled")
    if reader.bool("output_router_logits", False):
        raise DomainError(reader._field("output_router_logits"), "Llama 4's returned router logits are not modelled "
                                                                 "(Llama4ForCausalLM adds no load-balancing loss)")
    expert = reader.int("intermediate_size", d["intermediate_size"])
    return Architecture(
        num_hidden_layers=layers,
        hidden_size=reader.int("hidden_size", d["hidden_size"]),
        num_attention_heads=heads,
        num_key_value_heads=reader.int("num_key_value_heads", d["num_key_value_heads"]),
        head_dim=reader.optional_int("head_dim", d["head_dim"]),
        intermediate_size=reader.int("intermediate_size_mlp", d["intermediate_size_mlp"]),
        vocab_size=reader.int("vocab_size", d["vocab_size"]),
        max_position_embeddings=reader.int("max_position_embeddings", DEFAULT_MAX_POSITIONS["llama4_text"]),
        tie_word_embeddings=reader.bool("tie_word_embeddings", False),
        attention_bias=reader.bool("attention_bias", False),
        mlp="swiglu",
        num_local_experts=reader.int("num_local_experts", d["num_local_experts"]),
        num_experts_per_tok=reader.int("num_experts_per_tok", d["num_experts_per_tok"]),
        moe_intermediate_size=expert,
        norm_topk_prob=False,
        shared_expert_intermediate_size=expert,
        sliding_window=chunk,
        sliding_window_layers=rotating,
        model_type="llama4_text",
        hidden_act=act,
        extras=(("use_qk_norm", float(reader.bool("use_qk_norm", True))),
                ("attn_temperature_tuning", float(reader.bool("attn_temperature_tuning", True)))),
    )


def _chunk_size(reader: ConfigReader, default: int) -> int:
    """``attention_chunk_size``: missing, the class's default; an explicit null turns chunking off, which is refused
    (the rotating layers would attend in full)."""
    if "attention_chunk_size" in reader.config and reader.config["attention_chunk_size"] is None:
        raise DomainError(reader._field("attention_chunk_size"), "Llama 4 without chunked attention (its rotating "
                                                                 "layers attending in full) is not modelled")
    return reader.int("attention_chunk_size", default)


def _all_layers_mixtures(reader: ConfigReader, layers: int) -> None:
    """Llama4TextConfig.__post_init__: ``moe_layers``, or every ``interleave_moe_layer_step``-th layer from the
    step's own; only a mixture in every layer is modelled."""
    moe_layers = reader.config.get("moe_layers")
    if moe_layers is not None:
        if not isinstance(moe_layers, list) or len(moe_layers) != layers \
                or any(isinstance(index, bool) or not isinstance(index, int) for index in moe_layers) \
                or set(moe_layers) != set(range(layers)):
            raise DomainError(reader._field("moe_layers"), "Llama 4 with dense layers among the mixtures is not "
                                                           f"modelled; every layer 0 to {layers - 1} must be one, got "
                                                           f"{short_value(moe_layers)}")
        return
    step = reader.int("interleave_moe_layer_step", 1)
    if step != 1:
        raise DomainError(reader._field("interleave_moe_layer_step"), "Llama 4 with dense layers among the "
                                                                      f"mixtures is not modelled; must be 1, got {step}")


def _rotating_layers(reader: ConfigReader, layers: int, interval: int) -> int:
    """The layers that rotate Q and K and attend within chunks: ``no_rope_layers`` (1: rotate; at least one entry a
    layer), or all but every ``no_rope_layer_interval``-th; ``layer_types``, where given, must say the same."""
    flags = reader.config.get("no_rope_layers")
    if flags:
        if not isinstance(flags, list) or len(flags) < layers or any(flag not in (0, 1) for flag in flags):
            raise DomainError(reader._field("no_rope_layers"), f"must list 0 or 1 for each of the {layers} layers, "
                                                               f"got {short_value(flags)}")
        rotate = [bool(flag) for flag in flags[:layers]]
    else:
        step = reader.int("no_rope_layer_interval", interval)
        if step < 1:
            raise DomainError(reader._field("no_rope_layer_interval"), f"must be at least 1, got {step}")
        rotate = [(index + 1) % step != 0 for index in range(layers)]
    kinds = ["chunked_attention" if flag else "full_attention" for flag in rotate]
    given = reader.str_list("layer_types")
    if given is not None and given != kinds:
        raise DomainError(reader._field("layer_types"), "Llama 4's layer types other than chunked attention on the "
                                                        "rotating layers and full attention on the rest are not "
                                                        "modelled")
    return sum(rotate)
