"""Megatron-LM's launch script read as flags: its words, never run, and the table of which flags take a value.

Backslash line continuations are joined, comments dropped, quotes respected (shlex), and a variable is replaced
only by a literal value assigned to it in the same text (``TP=2`` ... ``--tensor-model-parallel-size $TP``).
torchrun's flags are spelled with dashes or underscores; both count as one.
"""

from __future__ import annotations

import re
import shlex
from typing import Final

from app.configs.common import Reading
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
ASSIGNMENT: Final = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
VARIABLE: Final = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


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
        literal = _literal(match.group(2).strip()) if match else None
        if match and literal is not None:
            value, single_quoted = literal
            variables[match.group(1)] = value if single_quoted else expand(value)
    lexer = shlex.shlex(expand(joined), posix=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError as error:
        raise DomainError(field, f"cannot be read as a command line: {error}") from None
    return tokens, variables


def _literal(raw: str) -> tuple[str, bool] | None:
    """An assigned value as written, and whether single quotes keep it from expansion; None for what is not a
    literal (a command substitution, arithmetic, an array, an unclosed quote)."""
    if "$(" in raw or "`" in raw or raw.startswith("("):
        return None
    if raw[:1] in "\"'":
        end = raw.find(raw[0], 1)
        if end < 0:
            return None
        return raw[1:end], raw[0] == "'"
    return re.split(r"[\s;#]", raw, maxsplit=1)[0], False


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
        value, i = _value(tokens, i, name)
        found.append((name, value))
    return found


def _value(tokens: list[str], i: int, name: str) -> tuple[str | None, int]:
    """The value of the flag `name` starting at tokens[i] (None: it has none), and the index after it."""
    if not (i < len(tokens) and not tokens[i].startswith("--") and (name in VALUE_FLAGS or not
                                                                    tokens[i].endswith((".py", ".sh")))):
        return None, i
    value = tokens[i]
    i += 1
    if name not in VALUE_FLAGS:  # an unknown flag may take several values (--rampup-batch-size 16 16 5859375)
        while i < len(tokens) and not tokens[i].startswith("-") and re.fullmatch(r"[\d.eE+-]+", tokens[i]):
            value += " " + tokens[i]
            i += 1
    return value, i


class Flags:
    """The flags by name (the last of a repeated one counts), each read once through a typed getter that reports
    a bad value at its flag; `used` holds those read."""

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
