"""The architecture a Megatron-LM command line describes, as fact 'model', with Megatron-LM's defaults where a flag
is absent (megatron/training/arguments.py and megatron/core/transformer/transformer_config.py).

--ffn-hidden-size defaults to 4h, or with --swiglu to int(4h × 2/3 ÷ 64) × 64; --num-query-groups counts only with
--group-query-attention; --normalization LayerNorm; --position-embedding-type learned_absolute; linear layers have
biases unless --disable-bias-linear; embeddings are tied unless --untie-embeddings-and-output-weights;
--hidden-dropout and --attention-dropout 0.1; --make-vocab-size-divisible-by 128 (the vocabulary is padded to a
multiple of it × the tensor-parallel degree); --max-position-embeddings defaults to --seq-length.
"""

from __future__ import annotations

from typing import Any, Final

from app.configs.common import PATH, Reading, preset_for_model_id
from app.configs.megatron_flags import Flags

GPT2_VOCAB: Final = 50257  # GPT2BPETokenizer's vocab.json, the tokenizer of Megatron-LM's GPT examples
NEEDED: Final = ("num-layers", "hidden-size", "num-attention-heads")

Arch = dict[str, Any]
Keys = dict[str, str | None]


def architecture(f: Flags, r: Reading, tensor: int) -> int | None:
    """The architecture from the flags, as fact 'model'; its number of layers (None without one)."""
    given = [name for name in NEEDED if f.has(name)]
    if not given:
        _no_architecture(f, r)
        return None
    missing = [name for name in NEEDED if name not in given]
    if missing:
        raise r.error(f.key(missing[0]), f"is missing: Megatron-LM needs {', '.join('--' + n for n in NEEDED)}")
    layers, hidden, heads = (f.integer(name) for name in NEEDED)
    assert layers is not None and hidden is not None and heads is not None  # all three are given
    arch: Arch = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads}
    keys: Keys = {"num_hidden_layers": "--num-layers", "hidden_size": "--hidden-size",
                  "num_attention_heads": "--num-attention-heads"}
    _attention_heads(f, r, arch, keys)
    _mlp(f, r, arch, keys, hidden)
    _norm_and_positions(f, r, arch, keys)
    _embeddings_and_biases(f, arch, keys)
    _dropouts(f, r, arch, keys)
    _lengths(f, r, arch, keys)
    arch["vocab_size"] = _vocab(f, r, tensor, keys)
    _flags_read(f, r, arch, keys)
    r.said("model", arch, "--num-layers", layers, field="",
           note="the architecture from the flags; Megatron-LM's defaults where a flag is absent")
    return layers


def _flags_read(f: Flags, r: Reading, arch: Arch, keys: Keys) -> None:
    """Each flag an architecture field came from, as read alongside the model (a switch as true)."""
    for field in arch:
        key = keys.get(field)
        if key:
            raw = f.values.get(key[2:])
            r.also(key, True if raw is None else raw, f"model.{field}")


def _no_architecture(f: Flags, r: Reading) -> None:
    for name in ("num-query-groups", "ffn-hidden-size", "kv-channels", "vocab-size", "normalization",
                 "position-embedding-type", "swiglu", "untie-embeddings-and-output-weights"):
        if f.has(name):
            r.ignore(f.key(name), "without --num-layers, --hidden-size and --num-attention-heads there is no "
                                  "architecture to apply it to")
            f.used.add(name)


def _attention_heads(f: Flags, r: Reading, arch: Arch, keys: Keys) -> None:
    """Grouped-query heads (only with --group-query-attention) and the head size."""
    if f.switch("group-query-attention"):
        groups = f.integer("num-query-groups")
        if groups is None:
            raise r.error("--num-query-groups", "is missing: --group-query-attention needs it")
        arch["num_key_value_heads"] = groups
        keys["num_key_value_heads"] = "--num-query-groups"
        r.also("--group-query-attention", True, "model.num_key_value_heads")
    elif f.has("num-query-groups"):
        f.text("num-query-groups")
        r.ignore("--num-query-groups", "Megatron-LM reads it only with --group-query-attention")
    channels = f.integer("kv-channels")
    if channels is not None:
        arch["head_dim"] = channels
        keys["head_dim"] = "--kv-channels"


def _mlp(f: Flags, r: Reading, arch: Arch, keys: Keys, hidden: int) -> None:
    """The MLP's activation and width (4h, or rounded 8h/3 with --swiglu)."""
    mlp = "gelu"
    for switch, kind in (("swiglu", "swiglu"), ("squared-relu", "relu"), ("quick-geglu", "geglu")):
        if f.switch(switch):
            mlp = kind
            r.also(f.key(switch), True, "model.mlp", "squared ReLU counted as ReLU (same tensors)"
                   if switch == "squared-relu" else "")
    f.switch("openai-gelu")
    arch["mlp"] = mlp
    ffn = f.integer("ffn-hidden-size")
    if ffn is None:
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if mlp == "swiglu" else 4 * hidden
        r.assume("model.intermediate_size", ffn, "no --ffn-hidden-size: Megatron-LM's default, " +
                 ("int(4h × 2/3 ÷ 64) × 64 with --swiglu" if mlp == "swiglu" else "4 × hidden size"))
    else:
        keys["intermediate_size"] = "--ffn-hidden-size"
    arch["intermediate_size"] = ffn


def _norm_and_positions(f: Flags, r: Reading, arch: Arch, keys: Keys) -> None:
    """The normalization, and the position embedding: learned, or none in the embedding table (RoPE and the rest)."""
    norm = f.choice("normalization", ("LayerNorm", "RMSNorm"))
    arch["norm"] = "rmsnorm" if norm == "RMSNorm" else "layernorm"
    if norm:
        keys["norm"] = "--normalization"
    position = f.choice("position-embedding-type", ("learned_absolute", "rope", "yarn", "mrope", "relative", "none"))
    if f.switch("use-rotary-position-embeddings"):
        position = position or "rope"
        r.also("--use-rotary-position-embeddings", True, "model.position_embedding")
    if f.switch("no-position-embedding"):
        position = "none"
        r.also("--no-position-embedding", True, "model.position_embedding")
    arch["position_embedding"] = "learned" if position in (None, "learned_absolute") else "rope"
    if position:
        keys["position_embedding"] = "--position-embedding-type" if f.has("position-embedding-type") else None
        if position in ("relative", "none", "yarn", "mrope"):
            r.assume("model.position_embedding", "rope", f"position embedding {position}: no parameters in the "
                                                         "embedding table, as RoPE")


def _embeddings_and_biases(f: Flags, arch: Arch, keys: Keys) -> None:
    """Tied embeddings, and biases on the linear layers, unless switched off."""
    arch["tie_word_embeddings"] = not f.switch("untie-embeddings-and-output-weights")
    if not arch["tie_word_embeddings"]:
        keys["tie_word_embeddings"] = "--untie-embeddings-and-output-weights"
    bias = not f.switch("disable-bias-linear")
    f.switch("add-bias-linear")
    arch["attention_bias"] = arch["mlp_bias"] = bias
    if not bias:
        keys["attention_bias"] = keys["mlp_bias"] = "--disable-bias-linear"
    if f.switch("add-qkv-bias") and not bias:
        arch["qkv_bias"] = True
        keys["qkv_bias"] = "--add-qkv-bias"


def _dropouts(f: Flags, r: Reading, arch: Arch, keys: Keys) -> None:
    for name, field in (("hidden-dropout", "dropout"), ("attention-dropout", "attention_dropout")):
        value = f.number(name)
        if value is None:
            value = 0.1
            r.assume(f"model.{field}", 0.1, f"no --{name}: Megatron-LM's default, 0.1")
        else:
            keys[field] = f"--{name}"
        arch[field] = value


def _lengths(f: Flags, r: Reading, arch: Arch, keys: Keys) -> None:
    """The longest position the model takes: --max-position-embeddings, else --seq-length."""
    seq = f.integer("seq-length")
    positions = f.integer("max-position-embeddings")
    if positions is None:
        positions = seq or 4096
        r.assume("model.max_position_embeddings", positions, "no --max-position-embeddings: Megatron-LM uses "
                                                             "--seq-length")
    else:
        keys["max_position_embeddings"] = "--max-position-embeddings"
    arch["max_position_embeddings"] = positions


def _vocab(f: Flags, r: Reading, tensor: int, keys: Keys) -> int:
    divisible = f.integer("make-vocab-size-divisible-by") or 128
    multiple = divisible * tensor
    vocab = f.integer("vocab-size")
    tokenizer = f.text("tokenizer-type")
    model = f.text("tokenizer-model")
    preset = preset_for_model_id(model)[0] if model is not None else None
    source = ""
    if vocab is not None:
        keys["vocab_size"] = "--vocab-size"
        source = "--vocab-size"
    elif preset:
        from app import core

        vocab = core.get_preset(preset).architecture.vocab_size
        source = f"the tokenizer of {model} (preset {preset}), not opened"
        r.ignore("--tokenizer-model", f"{PATH}: its vocabulary size is the preset {preset}'s")
    else:
        vocab = GPT2_VOCAB
        source = (f"--tokenizer-type {tokenizer}: its vocabulary is in a file that is not opened; GPT-2's "
                  f"{GPT2_VOCAB:,} assumed" if tokenizer else f"no --vocab-size: GPT-2's {GPT2_VOCAB:,} assumed "
                  "(GPT2BPETokenizer, Megatron-LM's GPT examples)")
        if model is not None:
            r.ignore("--tokenizer-model", f"{PATH}: no preset has this name, so its vocabulary size is unknown")
    padded = -(-vocab // multiple) * multiple
    if tokenizer:
        r.ignore("--tokenizer-type", "the tokenizer's vocabulary size is read from --vocab-size or assumed")
    why = f"{source}, padded to a multiple of {divisible} × tensor-parallel degree {tensor} = {multiple}: {padded:,}"
    if source == "--vocab-size" and padded == vocab:
        return vocab
    r.assume("model.vocab_size", padded, why)
    return padded
