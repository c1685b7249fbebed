"""Which configurations are measured: the fast subset (tests, CI) and the full sweep (`make validate`)."""

from __future__ import annotations

import itertools

from validation.cases import OPTIMIZERS, ActivationCase, StatesCase
from validation.models import Size

PRECISIONS = ("fp32", "bf16", "autocast-bf16")
ATTENTIONS = ("eager", "sdpa")
CHECKPOINTING = ("none", "full")

# Widths, depths and head layouts per family. Vocabularies are primes so that no activation
# shares the logits' element count (the logits buffers are found by their tokens x vocab size).
GQA = (
    Size(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, vocab=509),
    Size(hidden=128, layers=3, heads=8, kv_heads=2, intermediate=344, vocab=1021),
    Size(hidden=96, layers=4, heads=6, kv_heads=3, intermediate=256, vocab=773, head_dim=32),
)
MHA = (
    Size(hidden=64, layers=2, heads=4, kv_heads=4, intermediate=176, vocab=509),
    Size(hidden=128, layers=3, heads=8, kv_heads=8, intermediate=512, vocab=1021),
    Size(hidden=96, layers=4, heads=6, kv_heads=6, intermediate=256, vocab=773),
)
SIZES = {
    "gpt2": MHA,
    "gpt2-no-dropout": MHA[:2],
    "llama": GQA + MHA[:2],
    "llama-attn-dropout": GQA[:2],
    "mistral": GQA[:2],
    "qwen2": GQA[:2],
    "gemma": (GQA[0], Size(hidden=128, layers=3, heads=4, kv_heads=1, intermediate=344, vocab=1021, head_dim=64)),
}
SHAPES = ((1, 64), (2, 32), (4, 128), (2, 256))  # (micro-batch, sequence)


def full_activation_cases() -> list[ActivationCase]:
    cases = []
    for family, sizes in SIZES.items():
        for size, (batch, seq) in itertools.product(sizes, SHAPES):
            for precision, attention, checkpointing in itertools.product(PRECISIONS, ATTENTIONS, CHECKPOINTING):
                cases.append(ActivationCase(family, size, batch, seq, precision, attention, checkpointing))
    return cases


def full_states_cases() -> list[StatesCase]:
    return [
        StatesCase(family, size, precision, optimizer)
        for family, sizes in SIZES.items()
        for size in sizes[:2]
        for precision in PRECISIONS
        for optimizer in OPTIMIZERS
    ]


# The fast subset: every family, every precision, both attentions, both recomputation settings
# and every optimizer appear at least once, in a few seconds.
FAST_ACTIVATION_CASES = (
    ActivationCase("gpt2", MHA[0], 2, 32, "autocast-bf16", "eager"),
    ActivationCase("gpt2", MHA[0], 2, 64, "bf16", "sdpa"),
    ActivationCase("gpt2", MHA[0], 1, 64, "fp32", "eager", "full"),
    ActivationCase("gpt2-no-dropout", MHA[0], 2, 32, "bf16", "sdpa"),
    ActivationCase("llama", GQA[0], 2, 32, "fp32", "eager"),
    ActivationCase("llama", MHA[0], 2, 32, "autocast-bf16", "sdpa", "full"),
    ActivationCase("llama-attn-dropout", GQA[0], 2, 32, "bf16", "eager"),
    ActivationCase("llama-attn-dropout", GQA[0], 2, 32, "autocast-bf16", "sdpa"),
    ActivationCase("mistral", GQA[0], 1, 64, "bf16", "eager", "full"),
    ActivationCase("qwen2", GQA[0], 2, 32, "autocast-bf16", "eager"),
    ActivationCase("gemma", GQA[0], 2, 32, "bf16", "sdpa"),
    ActivationCase("gemma", GQA[0], 2, 32, "autocast-bf16", "eager", "full"),
)
FAST_STATES_CASES = (
    StatesCase("llama", GQA[0], "fp32", "adamw"),
    StatesCase("gpt2", MHA[0], "bf16", "adam"),
    StatesCase("gemma", GQA[0], "autocast-bf16", "adafactor"),
    StatesCase("qwen2", GQA[0], "bf16", "sgd-momentum"),
    StatesCase("mistral", GQA[0], "fp32", "sgd"),
    StatesCase("gpt2", MHA[0], "bf16", "adafactor"),
)


def cases(*, full: bool) -> list[ActivationCase | StatesCase]:
    if full:
        return [*full_states_cases(), *full_activation_cases()]
    return [*FAST_STATES_CASES, *FAST_ACTIVATION_CASES]
