"""A fixed corpus of varied setups and a digest of each answer, so that a change to the core that should not move
any number can be shown not to: run it before and after and compare (`diff`), or with `--check FILE`.

Setups are drawn by a seeded generator from a preset of each family, over every field a question may vary
(`app.core.job.JOB_FIELDS`: frameworks, fine-tuning methods, parallel layouts, precisions, kernels, losses,
allocators, GPUs), as the API would take them; a setup the core refuses counts with its refusal, so that the rules
that refuse are held fixed too. Each line is the setup's number, its fields, and the SHA-256 of the API's answer
(`wire.estimate_json`, keys sorted): every byte figure, every formula text, every timeline event.

    python -m validation.corpus > before.txt      # then change the core
    python -m validation.corpus --check before.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import sys
from collections.abc import Iterator
from typing import Any, Final

from app import core, wire
from app.core.finetuning import Finetuning
from app.core.job import JOB_FIELDS, Job, with_field

SETUPS = 4_400  # about half are answered, the rest refused by a rule
SEED = 20261202
# "custom:" a preset's shapes given field by field, with no model type (modelled as Llama, or Mixtral if a mixture).
PRESETS = ("gpt2", "llama-3.2-1b", "llama-3-8b", "qwen3-0.6b", "gemma-3-1b", "olmo-2-7b", "phi-4", "mistral-7b",
           "qwen2.5-7b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite", "deepseek-v3", "gpt-oss-20b",
           "llama-3-70b", "custom:llama-3.2-1b", "custom:mixtral-8x7b")
DEGREES = {"parallelism.pipeline": (1, 2, 4), "parallelism.tensor": (1, 2, 4, 8), "parallelism.expert": (1, 2, 4, 8),
           "parallelism.expert_tensor": (1, 2, 4), "parallelism.data": (1, 2, 8, 64), "parallelism.context": (1, 2, 4),
           "parallelism.virtual_stages": (1, 2), "training.micro_batch_size": (1, 2, 4, 8),
           "training.seq_len": (512, 2048, 4096, 8192, 32768), "training.gradient_accumulation_steps": (1, 2, 4),
           "training.loss_chunks": (2, 8, 16), "finetuning.rank": (8, 16, 64), "finetuning.frozen_layers": (0, 2, 4),
           "parallelism.gpus_per_node": (4, 8), "parallelism.first_stage_layers": (2, 6),
           "parallelism.last_stage_layers": (2, 6), "training.framework_overhead_bytes": (0, 1 << 30)}
# Fields added after the corpus was first drawn: left out of VARIED, so that the setups drawn before stay the same,
# and varied by setups of their own after those (`ADDED_SETUPS`).
ADDED: Final = {"training.recompute_every": (2, 3, 4), "training.recompute_first_layers": (1, 4, 16),
                "training.compile": ("inductor",)}
ADDED_SETUPS = 400
# Choices added after the corpus was first drawn: left out of the first SETUPS draws for the same reason.
ADDED_CHOICES: Final = {"training.optimizer": ("paged-adamw-8bit", "paged-adamw-32bit"),
                        "training.activation_checkpointing": ("op",),
                        "training.activation_offload": ("checkpoints-to-host",),
                        "training.implementation": ("litgpt",)}
# The fields drawn from, in the order the corpus was first drawn in (JOB_FIELDS' order then), so that a new order of
# the declarations leaves the draws as they were; a field added since goes in ADDED.
VARIED: Final = (
    "training.micro_batch_size", "training.seq_len", "training.gradient_accumulation_steps",
    "training.framework_overhead_bytes", "training.precision", "training.optimizer", "training.optimizer_implementation",
    "training.activation_checkpointing", "training.attention", "training.implementation", "training.loop",
    "training.allocator", "training.loss", "training.loss_chunks", "training.framework", "training.fp8",
    "training.adafactor_momentum", "parallelism.data", "parallelism.tensor", "parallelism.pipeline",
    "parallelism.zero_stage", "parallelism.sequence_parallel", "parallelism.offload", "parallelism.gpus_per_node",
    "parallelism.virtual_stages", "parallelism.first_stage_layers", "parallelism.last_stage_layers",
    "parallelism.context", "parallelism.expert", "parallelism.expert_tensor", "finetuning.method", "finetuning.rank",
    "finetuning.quantization", "finetuning.freeze_embeddings", "finetuning.frozen_layers", "gpu",
)


def _value(rng: random.Random, path: str) -> Any:
    if path in DEGREES:
        return rng.choice(DEGREES[path])
    item = JOB_FIELDS[path]
    if item.kind == "bool":
        return rng.random() < 0.5
    if item.kind == "choice":
        return rng.choice([choice for choice in item.choices if choice not in ADDED_CHOICES.get(path, ())])
    return rng.randint(item.low, min(item.high, 64))


def setups(count: int = SETUPS + ADDED_SETUPS, seed: int = SEED) -> Iterator[tuple[str, Job | str]]:
    """(description, job) for each setup, or (description, refusal) where a field could not take its value: the
    first SETUPS as first drawn, then each with one of the ADDED fields as well (under full recomputation), and half
    of those with one of the ADDED_CHOICES."""
    rng = random.Random(seed)
    added = random.Random(seed + 1)
    for number in range(count):
        if number == SETUPS:
            rng = random.Random(seed + 2)
        described, job = _setup(rng)
        if number >= SETUPS and isinstance(job, Job):
            path = added.choice(sorted(ADDED))
            value = added.choice(ADDED[path])
            described += f" training.activation_checkpointing=full {path}={value}"
            job = with_field(with_field(job, "training.activation_checkpointing", "full"), path, value)
            for choice_path in ("training.optimizer",):  # "op" replaces full recomputation: not drawn here
                choices = ADDED_CHOICES[choice_path]
                if added.random() < 0.5:
                    choice = added.choice(choices)
                    described += f" {choice_path}={choice}"
                    job = with_field(job, choice_path, choice)
        yield described, job


def _setup(rng: random.Random) -> tuple[str, Job]:
    preset = rng.choice(PRESETS)
    custom, _, name = preset.rpartition(":")
    arch = core.get_preset(name).architecture
    if custom:
        arch = dataclasses.replace(arch, model_type=None)
    finetuning = Finetuning()
    if rng.random() < 0.3:
        finetuning = Finetuning(method=rng.choice(("lora", "qlora")),
                                target_modules=("q_proj", "v_proj") if arch.is_moe else ("all-linear",))
    job = Job(architecture=arch, training=core.Training(finetuning=finetuning), gpu=core.get_gpu("h100-80gb"))
    fields = [f"preset={preset}", f"finetuning={finetuning.method}"]
    for path in rng.sample(VARIED, rng.randint(1, 6)):
        value = _value(rng, path)
        fields.append(f"{path}={value}")
        try:
            job = with_field(job, path, value)
        except core.DomainError as error:
            fields.append(f"refused:{error.field}")
    return " ".join(fields), job


def digest(job: Job) -> tuple[str, str]:
    """("answered" or "refused", the SHA-256 of the answer or of the refusal)."""
    try:
        answer: Any = wire.estimate_json(job.estimate())
        outcome = "answered"
    except core.DomainError as error:
        answer, outcome = {"refused": error.field, "message": error.message}, "refused"
    text = json.dumps(answer, sort_keys=True, separators=(",", ":"))
    return outcome, hashlib.sha256(text.encode()).hexdigest()


def lines(count: int = SETUPS + ADDED_SETUPS) -> Iterator[str]:
    for number, (described, job) in enumerate(setups(count)):
        outcome, sha = digest(job)  # type: ignore[arg-type]
        yield f"{number}\t{sha}\t{outcome}\t{described}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="FILE", help="compare with an earlier run's output; exit 1 on a change")
    parser.add_argument("--count", type=int, default=SETUPS + ADDED_SETUPS)
    args = parser.parse_args(argv)
    if not args.check:
        answered = 0
        for line in lines(args.count):
            answered += "\tanswered\t" in line
            print(line)
        print(f"{answered} of {args.count} setups answered, the rest refused", file=sys.stderr)
        return 0
    with open(args.check, encoding="utf-8") as before_file:
        before = [line.rstrip("\n") for line in before_file]
    changed = [(old, new) for old, new in zip(before, lines(len(before)), strict=True) if old != new]
    for old, new in changed:
        print(f"changed: {new}\n   was: {old.split(chr(9))[1]}")
    print(f"{len(before) - len(changed)} of {len(before)} answers unchanged")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
