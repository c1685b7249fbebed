"""Megatron-LM's command line (pretrain_gpt.py's flags, as a launch script writes them).

The text is read as words, never run: backslash line continuations are joined, comments dropped, quotes
respected (shlex), and a variable is replaced only by a literal value assigned to it in the same text
(``TP=2`` ... ``--tensor-model-parallel-size $TP``). torchrun's --nproc_per_node and --nnodes give the number
of GPUs, and so the data-parallel degree: world size ÷ (tensor × pipeline × context).

Flag meanings and defaults from Megatron-LM (megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py): --ffn-hidden-size defaults to 4h, or with --swiglu to
int(4h × 2/3 ÷ 64) × 64; --num-query-groups counts only with --group-query-attention; --normalization
LayerNorm; --position-embedding-type learned_absolute; linear layers have biases unless --disable-bias-linear;
embeddings are tied unless --untie-embeddings-and-output-weights; --hidden-dropout and --attention-dropout 0.1;
--make-vocab-size-divisible-by 128 (the vocabulary is padded to a multiple of it × the tensor-parallel degree);
--max-position-embeddings defaults to --seq-length; global batch = micro-batch × data-parallel × micro-batches
per step; --bf16 accumulates and reduces gradients in fp32 (accumulate_allreduce_grads_in_fp32), --fp16 in fp16
unless asked; --optimizer adam is fused Adam with decoupled weight decay (AdamW), sgd has momentum 0.9;
--recompute-activations is --recompute-granularity selective. The memory convention is Megatron-LM's own
(training.framework megatron), except under its FSDP (--use-torch-fsdp2, --use-megatron-fsdp). --fp8-format with
--transformer-impl transformer_engine (the default) is Transformer Engine's FP8 with --fp8-recipe's recipe (delayed
by default; tensorwise and mxfp8 too): training.fp8 te-delayed, te-tensorwise, te-mxfp8.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Final

from app.configs.common import COMMS, FP8, MOE, NO_MEMORY, PATH, Reading, preset_for_model_id
from app.core import DomainError

# Flags that take no value (store_true/store_false). Others take one.
SWITCHES: Final = frozenset("""
group-query-attention sequence-parallel use-distributed-optimizer bf16 fp16 swiglu squared-relu quick-geglu
openai-gelu untie-embeddings-and-output-weights disable-bias-linear add-bias-linear add-qkv-bias use-flash-attn
use-rotary-position-embeddings recompute-activations use-precision-aware-optimizer use-mcore-models
use-legacy-models overlap-grad-reduce overlap-param-gather accumulate-allreduce-grads-in-fp32 use-torch-fsdp2
use-megatron-fsdp no-position-embedding apply-layernorm-1p use-rope-scaling no-masked-softmax-fusion
no-bias-gelu-fusion no-bias-dropout-fusion no-gradient-accumulation-fusion no-bias-swiglu-fusion
no-rope-fusion no-persist-layer-norm no-async-tensor-model-parallel-allreduce tp-comm-overlap fp8-param-gather
first-last-layers-bf16
distribute-saved-activations use-cpu-initialization no-load-optim no-load-rng no-save-optim no-save-rng
use-checkpoint-args use-dist-ckpt async-save ckpt-fully-parallel-save ckpt-fully-parallel-load
log-throughput log-timers-to-tensorboard log-validation-ppl-to-tensorboard log-memory-to-tensorboard
log-params-norm log-num-zeros-in-grad tensorboard-log-interval-dummy no-mmap-bin-files mock-data
calculate-per-token-loss deterministic-mode moe-grouped-gemm check-for-nan-in-loss-and-grad
no-check-for-nan-in-loss-and-grad manual-gc moe-router-pre-softmax cross-entropy-loss-fusion
""".split())
VALUE_FLAGS: Final = frozenset("""
num-layers hidden-size num-attention-heads num-query-groups ffn-hidden-size kv-channels seq-length
max-position-embeddings micro-batch-size global-batch-size tensor-model-parallel-size
pipeline-model-parallel-size context-parallel-size recompute-granularity recompute-method recompute-num-layers
normalization position-embedding-type vocab-size make-vocab-size-divisible-by tokenizer-type tokenizer-model
optimizer sgd-momentum hidden-dropout attention-dropout attention-backend transformer-impl
num-layers-per-virtual-pipeline-stage num-virtual-stages-per-pipeline-rank num-experts
decoder-first-pipeline-num-layers decoder-last-pipeline-num-layers
expert-model-parallel-size fp8-format fp8-recipe fp8-amax-history-len fp8-amax-compute-algo fp8-margin
main-grads-dtype main-params-dtype exp-avg-dtype exp-avg-sq-dtype
data-parallel-sharding-strategy nproc_per_node nproc-per-node nnodes node_rank node-rank master_addr master-addr
master_port master-port rdzv_backend rdzv-backend rdzv_endpoint rdzv-endpoint rdzv_id rdzv-id
""".split())
TORCHRUN: Final = frozenset("""nproc-per-node nnodes node-rank master-addr master-port rdzv-backend rdzv-endpoint
rdzv-id rdzv-conf standalone max-restarts monitor-interval""".split())
LAUNCHER: Final = TORCHRUN - {"nproc-per-node", "nnodes"}
GPT2_VOCAB: Final = 50257  # GPT2BPETokenizer's vocab.json, the tokenizer of Megatron-LM's GPT examples
ASSIGNMENT: Final = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
VARIABLE: Final = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
DISTRIBUTED_OPTIMIZER_NOTE: Final = ("Megatron-LM's distributed optimizer shards the fp32 master weights and the "
                                     "optimizer state over the data-parallel GPUs, as ZeRO stage 1 does")
CONVENTION_NOTE: Final = ("Megatron-LM's convention (docs/source/api-guide/dist_optimizer.md): the optimizer steps from "
                          "fp32 main gradients, kept beside the master copy when the gradient buffer is narrower")
FSDP_WHY: Final = ("Megatron-LM's FSDP (--use-torch-fsdp2, --use-megatron-fsdp) replaces the distributed optimizer "
                   "whose buffers the megatron convention counts, and the fsdp2 convention is for transformers' "
                   "modules: counted with the pytorch convention")
AUTO_ATTENTION: Final = ("Transformer Engine picks a fused kernel (no score matrix) for bf16/fp16 and head sizes it "
                         "supports, else the unfused softmax: modelled as sdpa (flash where it runs, else eager)")
SHARDING: Final = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
DTYPES: Final = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": None}
# --fp8-recipe (TransformerConfig.fp8_recipe, default delayed) -> training.fp8: Transformer Engine's recipes as
# megatron/core/fp8_utils.py, get_fp8_recipe builds them; blockwise and custom are not modelled.
FP8_RECIPE_IDS: Final = {"delayed": "te-delayed", "tensorwise": "te-tensorwise", "mxfp8": "te-mxfp8"}
FP8_RECIPE_CHOICES: Final = ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
FP8_DEFAULT_HISTORY: Final = 1  # TransformerConfig.fp8_amax_history_len


# shlex builds each token a character at a time (cost growing with the square of a token's length) and reads about
# 2 MB/s: Megatron-LM's example launch scripts are under 8 KB, so the text, and what its variables expand to, stop at
# 32 KB (a single 32 KB token costs about 30 ms).
MAX_SCRIPT_BYTES: Final = 32 * 1024


def looks_like(text: str) -> bool:
    """Whether a text reads as Megatron-LM flags (for kind 'auto')."""
    return bool(re.search(r"--(num-layers|hidden-size|tensor-model-parallel-size|micro-batch-size|seq-length)\b",
                          text))


def words(text: str, field: str) -> tuple[list[str], dict[str, str]]:
    """The text's words, with the variables it assigns literally substituted (as the shell would, without running
    anything: a value with a command substitution or arithmetic is left alone); and the variables found."""
    joined = re.sub(r"\\\r?\n", " ", text)
    variables: dict[str, str] = {}

    def expand(value: str) -> str:
        grown = sum(len(variables.get(m.group(1) or m.group(2), "")) for m in VARIABLE.finditer(value))
        if len(value) + grown > MAX_SCRIPT_BYTES:
            raise DomainError(field, f"expands past {MAX_SCRIPT_BYTES:,} characters through its variables")
        return VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)

    if len(text) > MAX_SCRIPT_BYTES:
        raise DomainError(field, f"is longer than {MAX_SCRIPT_BYTES:,} characters: no Megatron-LM launch script is")

    for line in joined.splitlines():
        match = ASSIGNMENT.match(line)
        if not match:
            continue
        raw = match.group(2).strip()
        if "$(" in raw or "`" in raw or raw.startswith("("):
            continue  # command substitution, arithmetic or an array: not a literal
        if raw[:1] in "\"'":
            end = raw.find(raw[0], 1)
            if end < 0:
                continue
            value = raw[1:end]
            variables[match.group(1)] = value if raw[0] == "'" else expand(value)
        else:
            value = re.split(r"[\s;#]", raw, maxsplit=1)[0]
            variables[match.group(1)] = expand(value)
    lexer = shlex.shlex(expand(joined), posix=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError as error:
        raise DomainError(field, f"cannot be read as a command line: {error}") from None
    return tokens, variables


def flags(tokens: list[str]) -> list[tuple[str, str | None]]:
    """(flag without its dashes, value or None), in order."""
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("--") or len(token) <= 2:
            continue
        name, eq, inline = token[2:].partition("=")
        if eq:
            found.append((name, inline))
            continue
        if name in SWITCHES:
            found.append((name, None))
            continue
        value = None
        if i < len(tokens) and not tokens[i].startswith("--") and (name in VALUE_FLAGS or not
                                                                    tokens[i].endswith((".py", ".sh"))):
            value = tokens[i]
            i += 1
            if name not in VALUE_FLAGS:  # an unknown flag may take several values (--rampup-batch-size 16 16 5859375)
                while i < len(tokens) and not tokens[i].startswith("-") and re.fullmatch(r"[\d.eE+-]+", tokens[i]):
                    value += " " + tokens[i]
                    i += 1
        found.append((name, value))
    return found


class _Flags:
    def __init__(self, found: list[tuple[str, str | None]], r: Reading) -> None:
        self.r = r
        self.values: dict[str, str | None] = {}
        self.used: set[str] = set()
        for name, value in found:
            canonical = name.replace("_", "-") if name.replace("_", "-") in TORCHRUN else name
            if canonical in self.values:
                r.ignore(f"--{canonical}", "given again later on the line: the last one counts (argparse)")
            self.values[canonical] = value

    def key(self, name: str) -> str:
        return f"--{name}"

    def has(self, name: str) -> bool:
        return name in self.values

    def switch(self, name: str) -> bool:
        if name not in self.values:
            return False
        self.used.add(name)
        if self.values[name] is not None:
            raise self.r.error(self.key(name), f"takes no value, got {self.values[name]!r}")
        return True

    def text(self, name: str) -> str | None:
        if name not in self.values:
            return None
        self.used.add(name)
        value = self.values[name]
        if value is None:
            raise self.r.error(self.key(name), "needs a value")
        if "$" in value:
            raise self.r.error(self.key(name), f"is the shell variable {value}, whose value is not in the text: "
                                               "write the number, or assign it (NAME=value) in the text")
        return value

    def integer(self, name: str, *, low: int = 1) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        if not re.fullmatch(r"[+-]?\d{1,12}", value):
            raise self.r.error(self.key(name), f"must be an integer, got {value!r}")
        return self.r.integer(self.key(name), int(value), low=low)

    def number(self, name: str) -> float | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            raise self.r.error(self.key(name), f"must be a number, got {value!r}") from None
        if not 0 <= number < 1:
            raise self.r.error(self.key(name), f"must be at least 0 and below 1, got {value}")
        return number

    def choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        value = self.text(name)
        if value is None:
            return None
        return self.r.choice(self.key(name), value, choices)


def _uneven_stages(f: _Flags, r: Reading) -> None:
    """Uneven first and last pipeline stages: Megatron-LM's decoder layers on each (the rest split evenly)."""
    for flag, field_name in (("decoder-first-pipeline-num-layers", "parallelism.first_stage_layers"),
                             ("decoder-last-pipeline-num-layers", "parallelism.last_stage_layers")):
        if f.has(flag):
            r.said(field_name, f.integer(flag), f.key(flag))


def _virtual_stages(f: _Flags, r: Reading, layers: int | None, pipeline: int) -> None:
    """The interleaved schedule: Megatron-LM's chunks per pipeline rank, given directly or as layers per chunk."""
    if f.has("num-virtual-stages-per-pipeline-rank"):
        r.said("parallelism.virtual_stages", f.integer("num-virtual-stages-per-pipeline-rank"),
               f.key("num-virtual-stages-per-pipeline-rank"))
    elif f.has("num-layers-per-virtual-pipeline-stage"):
        chunk = f.integer("num-layers-per-virtual-pipeline-stage") or 1
        if layers:
            r.said("parallelism.virtual_stages", max(1, layers // pipeline // chunk),
                   f.key("num-layers-per-virtual-pipeline-stage"), chunk,
                   note=f"{layers} layers ÷ {pipeline} pipeline ranks ÷ {chunk} layers a chunk")
        else:
            r.ignore(f.key("num-layers-per-virtual-pipeline-stage"), "needs --num-layers to count the chunks")


def read(text: str, r: Reading) -> None:
    tokens, variables = words(text, r.where)
    found = flags(tokens)
    if not found:
        raise r.error("", "has no --flags: expected Megatron-LM's command line (pretrain_gpt.py --num-layers ...)")
    f = _Flags(found, r)
    del variables

    tensor = f.integer("tensor-model-parallel-size") or 1
    pipeline = f.integer("pipeline-model-parallel-size") or 1
    context = f.integer("context-parallel-size") or 1
    r.said("training.implementation", "megatron", "(Megatron-LM)", "pretrain_gpt.py", field="",
           note="Megatron-LM's fused layers")
    for name, value in (("tensor-model-parallel-size", tensor), ("pipeline-model-parallel-size", pipeline)):
        if f.has(name):
            r.said(f"parallelism.{name.split('-')[0]}", value, f.key(name))
    if f.has("context-parallel-size"):
        r.said("parallelism.context", context, f.key("context-parallel-size"))

    layers = _model(f, r, tensor)
    _virtual_stages(f, r, layers, pipeline)
    _uneven_stages(f, r)
    _batch(f, r, tensor * pipeline * context)
    _precision(f, r)
    _optimizer(f, r)
    _recompute(f, r, layers // pipeline if layers else None)
    _attention(f, r)
    _fp8(f, r)
    _sharding(f, r, tensor)
    r.default("training.loop", "plain", "(Megatron-LM)", "Megatron-LM computes the loss inside the model: the "
                                                         "loop's choice does not apply")
    for name in f.values:
        if name in f.used:
            continue
        key = f.key(name)
        if name in LAUNCHER:
            r.ignore(key, "how torchrun starts the processes; no memory of its own")
        elif name in ("num-experts", "expert-model-parallel-size", "expert-tensor-parallel-size") or "moe" in name:
            r.ignore(key, MOE)
        elif "fp8" in name:
            r.ignore(key, FP8)
        elif name in ("data-path", "train-data-path", "valid-data-path", "test-data-path", "vocab-file",
                      "merge-file", "save", "load", "tensorboard-dir", "data-cache-path", "tokenizer-model"):
            r.ignore(key, PATH)
        elif name.startswith(("overlap-", "tp-comm", "no-async", "ddp-", "distributed-timeout")) or "bucket" in name:
            r.ignore(key, COMMS)
        else:
            r.ignore(key)


def _model(f: _Flags, r: Reading, tensor: int) -> int | None:
    """The architecture from the flags, as fact 'model'; its number of layers (None without one)."""
    needed = ("num-layers", "hidden-size", "num-attention-heads")
    given = [name for name in needed if f.has(name)]
    if not given:
        for name in ("num-query-groups", "ffn-hidden-size", "kv-channels", "vocab-size", "normalization",
                     "position-embedding-type", "swiglu", "untie-embeddings-and-output-weights"):
            if f.has(name):
                r.ignore(f.key(name), "without --num-layers, --hidden-size and --num-attention-heads there is no "
                                      "architecture to apply it to")
                f.used.add(name)
        return None
    missing = [name for name in needed if name not in given]
    if missing:
        raise r.error(f.key(missing[0]), f"is missing: Megatron-LM needs {', '.join('--' + n for n in needed)}")
    layers, hidden, heads = (f.integer(name) for name in needed)
    assert layers is not None and hidden is not None and heads is not None  # all three are given
    arch: dict[str, Any] = {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads}
    keys: dict[str, str | None] = {"num_hidden_layers": "--num-layers", "hidden_size": "--hidden-size",
                                   "num_attention_heads": "--num-attention-heads"}
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
    for name, field in (("hidden-dropout", "dropout"), ("attention-dropout", "attention_dropout")):
        value = f.number(name)
        if value is None:
            value = 0.1
            r.assume(f"model.{field}", 0.1, f"no --{name}: Megatron-LM's default, 0.1")
        else:
            keys[field] = f"--{name}"
        arch[field] = value
    seq = f.integer("seq-length")
    positions = f.integer("max-position-embeddings")
    if positions is None:
        positions = seq or 4096
        r.assume("model.max_position_embeddings", positions, "no --max-position-embeddings: Megatron-LM uses "
                                                             "--seq-length")
    else:
        keys["max_position_embeddings"] = "--max-position-embeddings"
    arch["max_position_embeddings"] = positions
    arch["vocab_size"] = _vocab(f, r, tensor, keys)
    for field in arch:
        key = keys.get(field)
        if key:
            raw = f.values.get(key[2:])
            r.also(key, True if raw is None else raw, f"model.{field}")
    r.said("model", arch, "--num-layers", layers, field="",
           note="the architecture from the flags; Megatron-LM's defaults where a flag is absent")
    return layers


def _vocab(f: _Flags, r: Reading, tensor: int, keys: dict[str, str | None]) -> int:
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


def _batch(f: _Flags, r: Reading, model_parallel: int) -> None:
    micro = f.integer("micro-batch-size")
    if micro is None:
        micro = 1
        r.default("training.micro_batch_size", 1, "--micro-batch-size", "no --micro-batch-size: 1 assumed "
                                                                        "(Megatron-LM requires the flag)")
    else:
        r.said("training.micro_batch_size", micro, "--micro-batch-size")
    seq = f.values.get("seq-length")
    if seq is not None:
        r.said("training.seq_len", f.integer("seq-length"), "--seq-length")
    nproc_name = "nproc-per-node"
    nproc = f.integer(nproc_name) if f.has(nproc_name) else None
    nodes = f.integer("nnodes") if f.has("nnodes") else None
    data_key = None
    world = nproc * (nodes or 1) if nproc is not None else None
    if world is not None and world % model_parallel:
        r.ignore(f.key(nproc_name), f"torchrun starts {world} GPUs, not a multiple of tensor × pipeline × context = "
                                    f"{model_parallel}: Megatron-LM would refuse this launch, so the GPU count is "
                                    "not used (set --nproc_per_node and --nnodes for the real job)")
        if nodes is not None:
            r.ignore("--nnodes", "see --nproc-per-node")
        world = None
    if world is not None:
        data = world // model_parallel
        data_key = f.key(nproc_name)
        r.said("parallelism.data", data, data_key, nproc,
               note=f"{world} GPUs (--nproc_per_node × --nnodes) ÷ {model_parallel} (tensor × pipeline × context)")
        if nodes is not None:
            r.also("--nnodes", nodes, "parallelism.data")
        r.assume("parallelism.data", data, f"torchrun's {world} GPUs ÷ (tensor × pipeline × context = "
                                           f"{model_parallel})")
        r.said("parallelism.gpus_per_node", nproc, data_key, nproc)
    else:
        data = 1
        r.default("parallelism.data", 1, "--nproc_per_node", "no usable GPU count (torchrun's --nproc_per_node × "
                                                             "--nnodes): one data-parallel rank assumed")
    global_batch = f.integer("global-batch-size")
    if global_batch is None:
        r.default("training.gradient_accumulation_steps", 1, "--global-batch-size",
                  "no --global-batch-size: Megatron-LM sets it to micro-batch × data-parallel, one micro-batch a step")
        return
    per_step = micro * data
    if global_batch % per_step:
        raise r.error("--global-batch-size", f"{global_batch} is not a multiple of micro-batch × data-parallel = "
                                             f"{micro} × {data} = {per_step} (Megatron-LM refuses it)")
    steps = global_batch // per_step
    if data_key:
        r.said("training.gradient_accumulation_steps", steps, "--global-batch-size", global_batch,
               note=f"global ÷ (micro-batch {micro} × data-parallel {data}): micro-batches per step")
    else:
        r.said("training.gradient_accumulation_steps", steps, "--global-batch-size", global_batch,
               note="global ÷ micro-batch, with one data-parallel rank assumed")
        r.assume("training.gradient_accumulation_steps", steps, f"--global-batch-size {global_batch} ÷ "
                 f"--micro-batch-size {micro} with one data-parallel rank; with d ranks it is {steps} ÷ d")


def _precision(f: _Flags, r: Reading) -> None:
    bf16, fp16 = f.switch("bf16"), f.switch("fp16")
    if bf16 and fp16:
        raise r.error("--fp16", "--bf16 and --fp16 cannot both be given")
    half = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    key = "--bf16" if bf16 else "--fp16" if fp16 else "--bf16"
    grads = "fp32" if bf16 or f.switch("accumulate-allreduce-grads-in-fp32") else half
    master = "fp32"
    states = "fp32"
    if f.switch("use-precision-aware-optimizer"):
        r.also("--use-precision-aware-optimizer", True, "training.precision")
        grad_dtype = f.choice("main-grads-dtype", ("fp32", "bf16"))
        if grad_dtype:
            grads = grad_dtype
            r.also("--main-grads-dtype", grad_dtype, "training.precision")
        param_dtype = f.choice("main-params-dtype", ("fp32", "fp16"))
        if param_dtype:
            master = param_dtype
            r.also("--main-params-dtype", param_dtype, "training.precision")
        avg = f.choice("exp-avg-dtype", ("fp32", "fp16", "bf16", "fp8"))
        avg_sq = f.choice("exp-avg-sq-dtype", ("fp32", "fp16", "bf16", "fp8"))
        if avg or avg_sq:
            if (avg or "fp32") != (avg_sq or "fp32") or "fp8" in (avg, avg_sq):
                r.ignore("--exp-avg-dtype" if avg else "--exp-avg-sq-dtype",
                         "the two Adam moments in different dtypes, or fp8, are not modelled: fp32 assumed")
            else:
                states = avg or avg_sq or "fp32"
                r.also("--exp-avg-dtype" if avg else "--exp-avg-sq-dtype", states, "training.precision")
    elif any(f.has(name) for name in ("main-grads-dtype", "main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype")):
        for name in ("main-grads-dtype", "main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype"):
            if f.has(name):
                f.text(name)
                r.ignore(f.key(name), "Megatron-LM reads it only with --use-precision-aware-optimizer")
    dtypes = {"weights": half, "gradients": grads, "master_weights": None if half == "fp32" else master,
              "optimizer_states": states, "activations": half}
    presets = {"megatron-bf16": ("bf16", "fp32", "fp32", "fp32", "bf16"),
               "fp16-fp32-master": ("fp16", "fp16", "fp32", "fp32", "fp16"),
               "fp32": ("fp32", "fp32", None, "fp32", "fp32"), "bf16-fp32-master": ("bf16", "bf16", "fp32", "fp32", "bf16")}
    value: Any = next((name for name, d in presets.items() if tuple(dtypes.values()) == d), dtypes)
    if bf16 or fp16:
        r.said("training.precision", value, key, True,
               note="bf16 weights, gradients accumulated in fp32, an fp32 master copy" if value == "megatron-bf16"
               else "")
    else:
        r.default("training.precision", value, key, "no --bf16 or --fp16: Megatron-LM trains in fp32")


def _optimizer(f: _Flags, r: Reading) -> None:
    name = f.text("optimizer")
    if name is None or name == "adam":
        value, impl = "adamw", "fused"
        why = "fused Adam with decoupled weight decay (Apex or Transformer Engine FusedAdam, adam_w_mode): AdamW"
        if name is None:
            r.default("training.optimizer", value, "--optimizer", f"Megatron-LM's default optimizer, adam: {why}")
            r.default("training.optimizer_implementation", impl, "--optimizer", why)
        else:
            r.said("training.optimizer", value, "--optimizer", name, note=why)
            r.said("training.optimizer_implementation", impl, "--optimizer", name, note=why)
    elif name == "sgd":
        momentum = f.number("sgd-momentum") if f.has("sgd-momentum") else 0.9
        value = "sgd-momentum" if momentum else "sgd"
        r.said("training.optimizer", value, "--optimizer", name, note=f"momentum {momentum}")
        r.said("training.optimizer_implementation", "fused", "--optimizer", name, note="Apex's FusedSGD")
        if f.has("sgd-momentum"):
            r.also("--sgd-momentum", momentum, "training.optimizer")
    else:
        r.ignore("--optimizer", f"the {name} optimizer is not modelled: AdamW assumed")
        r.default("training.optimizer", "adamw", "--optimizer", f"{name} is not modelled: AdamW assumed")
        r.default("training.optimizer_implementation", "fused", "--optimizer", "with AdamW assumed: fused")


def _recompute(f: _Flags, r: Reading, per_stage: int | None) -> None:
    granularity = f.choice("recompute-granularity", ("full", "selective"))
    if f.switch("recompute-activations"):
        if granularity is None:
            granularity = "selective"
            r.said("training.activation_checkpointing", "selective", "--recompute-activations", True,
                   note="--recompute-activations is --recompute-granularity selective")
        else:
            r.ignore("--recompute-activations", "--recompute-granularity is given too")
    elif granularity is not None:
        method = f.choice("recompute-method", ("uniform", "block"))
        count = f.integer("recompute-num-layers")
        value = granularity
        if granularity == "full" and method == "block" and count is not None and (per_stage is None or
                                                                                   count < per_stage):
            r.said("training.activation_checkpointing", "none", "--recompute-method", method)
            r.assume("training.activation_checkpointing", "none", f"--recompute-method block recomputes only the "
                     f"first {count} layers of each pipeline stage; the others keep their activations. Counted as "
                     "no recomputation: an upper bound")
            r.also("--recompute-granularity", granularity, "training.activation_checkpointing")
            r.also("--recompute-num-layers", count, "training.activation_checkpointing")
            return
        r.said("training.activation_checkpointing", value, "--recompute-granularity", granularity,
               note="full: each layer keeps only its input" if value == "full" else
               "selective: the attention core is recomputed")
        for name in ("recompute-method", "recompute-num-layers"):
            if f.has(name):
                r.also(f.key(name), f.values[name], "training.activation_checkpointing")
    else:
        r.default("training.activation_checkpointing", "none", "--recompute-granularity",
                  "no --recompute-granularity: no recomputation")
        for name in ("recompute-method", "recompute-num-layers"):
            if f.has(name):
                f.text(name)
                r.ignore(f.key(name), "no --recompute-granularity: nothing is recomputed")


def _attention(f: _Flags, r: Reading) -> None:
    backend = f.choice("attention-backend", ("flash", "fused", "unfused", "local", "auto"))
    impl = f.choice("transformer-impl", ("transformer_engine", "local", "inference_optimized"))
    if impl:
        r.also("--transformer-impl", impl, "training.attention")
    if f.switch("use-flash-attn"):
        r.said("training.attention", "flash", "--use-flash-attn", True)
    elif backend in ("flash", "fused"):
        r.said("training.attention", "flash", "--attention-backend", backend,
               note="a fused attention kernel (flash or cuDNN) keeps no score matrix")
    elif backend in ("unfused", "local"):
        r.said("training.attention", "eager", "--attention-backend", backend,
               note="the unfused softmax keeps the score matrix")
    elif backend == "auto":
        r.said("training.attention", "sdpa", "--attention-backend", backend, note=AUTO_ATTENTION)
    elif impl != "local":
        r.default("training.attention", "sdpa", "--attention-backend", f"Megatron-LM's default backend, auto: "
                                                                      f"{AUTO_ATTENTION}")
    else:
        r.said("training.attention", "eager", "--transformer-impl", impl, note="the local spec's unfused attention")


def _fp8(f: _Flags, r: Reading) -> None:
    """--fp8-format runs the decoder layers' linear layers in FP8 through Transformer Engine
    (TransformerConfig.fp8; megatron/core/fp8_utils.py, get_fp8_recipe and get_fp8_context), with --fp8-recipe's
    recipe (delayed by default). e4m3 and hybrid differ in the gradients' FP8 format, not in bytes."""
    names = ("fp8-recipe", "fp8-param-gather", "fp8-amax-history-len", "fp8-amax-compute-algo", "fp8-margin",
             "first-last-layers-bf16")
    fmt = f.choice("fp8-format", ("e4m3", "hybrid"))
    if fmt is None:
        for name in names:
            if f.has(name):
                f.used.add(name)
                r.ignore(f.key(name), "no --fp8-format: Megatron-LM trains without FP8")
        return
    impl = f.values.get("transformer-impl") or "transformer_engine"
    recipe = f.choice("fp8-recipe", FP8_RECIPE_CHOICES) or "delayed"
    value = FP8_RECIPE_IDS.get(recipe)
    if impl != "transformer_engine" or value is None:
        why = (f"--transformer-impl {impl}: Megatron-LM's FP8 runs through Transformer Engine's modules"
               if impl != "transformer_engine" else f"Transformer Engine's {recipe} FP8 recipe is not modelled")
        r.ignore("--fp8-format", f"{why}; {FP8}")
        for name in names:
            if f.has(name):
                f.used.add(name)
                r.ignore(f.key(name), why)
        return
    r.said("training.fp8", value, "--fp8-format", fmt, note=f"Transformer Engine FP8, --fp8-recipe {recipe}"
           + ("" if f.has("fp8-recipe") else " (Megatron-LM's default)") + "; e4m3 and hybrid take the same bytes")
    if f.has("fp8-recipe"):
        r.also("--fp8-recipe", recipe, "training.fp8")
    if f.has("transformer-impl"):
        r.also("--transformer-impl", impl, "training.fp8")
    if f.switch("fp8-param-gather"):
        r.ignore("--fp8-param-gather", "FP8 primary weights (fp8_model_params) are not modelled: counted with 16-bit "
                                       "weights beside Transformer Engine's FP8 weight cache, an upper bound")
    history = f.integer("fp8-amax-history-len")
    if history is not None:
        if recipe != "delayed":
            r.ignore("--fp8-amax-history-len", "read only with --fp8-recipe delayed")
        elif history == FP8_DEFAULT_HISTORY:
            r.also("--fp8-amax-history-len", history, "training.fp8")
        else:
            r.ignore("--fp8-amax-history-len", f"counted at Megatron-LM's default length {FP8_DEFAULT_HISTORY}: "
                                               f"{history} rows add ({history} − 1) × 5 × 4 bytes per linear layer "
                                               "(five FP8 tensors, fp32 amax), a few MB at most")
    for name in ("fp8-amax-compute-algo", "fp8-margin"):
        if f.has(name):
            f.text(name)
            r.ignore(f.key(name), "how the scales are computed: " + NO_MEMORY)
    if f.switch("first-last-layers-bf16"):
        r.ignore("--first-last-layers-bf16", "all decoder layers are counted in FP8: the bf16 ones keep 16-bit "
                                              "inputs and no FP8 weight cache")


def _sharding(f: _Flags, r: Reading, tensor: int) -> None:
    if f.switch("sequence-parallel"):
        if tensor > 1:
            r.said("parallelism.sequence_parallel", True, "--sequence-parallel")
        else:
            r.ignore("--sequence-parallel", "Megatron-LM turns it off without tensor parallelism")
    fsdp = f.switch("use-torch-fsdp2") or f.switch("use-megatron-fsdp")
    strategy = f.choice("data-parallel-sharding-strategy", tuple(SHARDING))
    if fsdp:
        stage = SHARDING[strategy or "optim_grads_params"]
        switch = "--use-torch-fsdp2" if f.has("use-torch-fsdp2") else "--use-megatron-fsdp"
        key = "--data-parallel-sharding-strategy" if strategy else switch
        r.said("parallelism.zero_stage", stage, key, strategy or True)
        r.assume("parallelism.zero_stage", stage, f"FSDP sharding {strategy or 'optim_grads_params (the default)'}: "
                                                  f"ZeRO stage {stage}")
        r.said("training.framework", "pytorch", switch, True, note=FSDP_WHY)
        r.assume("training.framework", "pytorch", FSDP_WHY)
    elif f.switch("use-distributed-optimizer"):
        r.said("parallelism.zero_stage", 1, "--use-distributed-optimizer", True, note=DISTRIBUTED_OPTIMIZER_NOTE)
        r.assume("parallelism.zero_stage", 1, DISTRIBUTED_OPTIMIZER_NOTE)
        r.said("training.framework", "megatron", "--use-distributed-optimizer", True, note=CONVENTION_NOTE)
    else:
        r.default("parallelism.zero_stage", 0, "--use-distributed-optimizer", "no --use-distributed-optimizer: each "
                                                                              "data-parallel rank keeps every state")
        r.said("training.framework", "megatron", "(Megatron-LM)", "pretrain_gpt.py", note=CONVENTION_NOTE)
        if strategy:
            r.ignore("--data-parallel-sharding-strategy", "read only with --use-megatron-fsdp or --use-torch-fsdp2")
    if f.has("use-mcore-models") or f.has("use-legacy-models"):
        for name in ("use-mcore-models", "use-legacy-models"):
            if f.has(name):
                f.switch(name)
                r.ignore(f.key(name), "both model code paths keep the same tensors here")
