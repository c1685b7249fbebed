"""PyTorch FSDP settings as the Trainer, accelerate and axolotl write them, as ZeRO stages.

FSDP's sharding strategies (torch.distributed.fsdp.ShardingStrategy) shard what ZeRO's stages shard
(Zhao et al. 2023, arXiv:2304.11277, section 3.2): FULL_SHARD parameters, gradients and optimizer state
(stage 3), SHARD_GRAD_OP gradients and optimizer state (stage 2), NO_SHARD nothing (DDP). FSDP2's
``reshard_after_forward=True`` is FULL_SHARD, ``False`` SHARD_GRAD_OP. The HYBRID strategies shard within a
node and replicate across nodes. accelerate numbers the strategies from 1 in that order
(accelerate/utils/constants.py, FSDP_SHARDING_STRATEGY).

Which FSDP runs decides the memory convention (training.framework): FSDP2 with reshard_after_forward=True is the
fsdp2 convention; FSDP1 (accelerate's default fsdp_version, FullyShardedDataParallelPlugin.__post_init__, and the
Trainer's, fsdp_config "version" 1 in transformers' TrainingArguments._process_fsdp_args) keeps flat parameters,
and FSDP2 without resharding keeps each layer gathered from forward to backward: neither is modelled apart from the
pytorch convention. The Trainer (and axolotl, which hands its fsdp_config to the Trainer) passes
reshard_after_forward=False to FSDP2 unless fsdp_config says otherwise (_process_fsdp_args); accelerate's own
default is True.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from app.configs.common import OFFLOAD, Reading, describe

STRATEGY_STAGES: Final = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3, "HYBRID_SHARD_ZERO2": 2}
STRATEGY_NUMBERS: Final = {str(i): name for i, name in enumerate(STRATEGY_STAGES, start=1)}
FSDP_PRECISION_NOTE: Final = ("FSDP's mixed precision keeps the sharded parameters in fp32 as the master copy and "
                              "gathers half-precision copies for compute")
FSDP2_NOTE: Final = ("FSDP2 (fully_shard per decoder layer, reshard_after_forward=True): the fsdp2 convention, each "
                     "layer gathered while it computes and the root's embedding and output layer held through backward")
FSDP2_GATHERED_WHY: Final = ("FSDP2 without reshard_after_forward keeps each layer's parameters gathered from forward "
                             "to backward (ZeRO-2-like), which the fsdp2 convention does not model: counted with the "
                             "pytorch convention")
FSDP1_WHY: Final = ("FSDP1 (FullyShardedDataParallel) keeps flat parameters, a convention not modelled separately: "
                    "counted with the pytorch convention")
TRAINER_RESHARD_WHY: Final = ("FSDP2 under the Trainer: transformers passes reshard_after_forward=False unless "
                              "fsdp_config sets it (TrainingArguments._process_fsdp_args), so each layer stays gathered "
                              "after forward: ZeRO stage 2")


@dataclass(frozen=True)
class Version:
    """Which FSDP runs (1: FullyShardedDataParallel, 2: fully_shard), the key that says it (None: the default) and
    the value written there."""

    number: int = 1
    key: str | None = None
    raw: Any = None


def find_version(r: Reading, key: str, config: Any, *, outer: str | None = None, value: Any = None) -> Version:
    """The FSDP version a config gives: `outer` (axolotl's top-level fsdp_version) first, then fsdp_version or
    version inside the `config` mapping at `key`; FSDP1 when none does."""
    candidates = [(outer, value)] if outer and value is not None else []
    if isinstance(config, dict):
        candidates += [(f"{key}.{name}", config[name]) for name in ("fsdp_version", "version")
                       if config.get(name) is not None]
    if not candidates:
        return Version()
    where, raw = candidates[0]
    if str(raw) not in ("1", "2") or isinstance(raw, bool):
        raise r.error(where, f"must be 1 or 2 (FSDP1 or FSDP2), got {describe(raw)}")
    return Version(int(str(raw)), where, raw)


def convention(r: Reading, version: Version, stage: int, key: str) -> None:
    """training.framework for an FSDP run of this version at this ZeRO stage; `key` the FSDP section, for a default."""
    if version.number == 2 and stage == 3:
        r.said("training.framework", "fsdp2", version.key or key, version.raw, note=FSDP2_NOTE)
        return
    why = FSDP2_GATHERED_WHY if version.number == 2 else FSDP1_WHY
    if version.key is None:
        r.default("training.framework", "pytorch", key, f"no FSDP version given: the default, {why}")
        return
    r.said("training.framework", "pytorch", version.key, version.raw, note=why)
    r.assume("training.framework", "pytorch", why)


def stage_note(strategy: str) -> str:
    stage = STRATEGY_STAGES[strategy]
    what = {3: "parameters, gradients and optimizer state", 2: "gradients and optimizer state", 0: "nothing"}[stage]
    hybrid = " within each node (replicated across nodes; the estimate shards over every data-parallel GPU)" \
        if strategy.startswith("HYBRID") else ""
    return f"FSDP {strategy} shards {what}{hybrid}: ZeRO stage {stage}"


def strategy_of(r: Reading, key: str, value: Any) -> str:
    """A sharding strategy from a name, its number (accelerate's 1-5), or FSDP2's reshard_after_forward switch."""
    if isinstance(value, bool):
        return "FULL_SHARD" if value else "SHARD_GRAD_OP"
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        raise r.error(key, f"must be a sharding strategy ({', '.join(STRATEGY_STAGES)}) or true/false, "
                           f"got {describe(value)}")
    text = value.strip()
    if text.lower() in ("true", "false"):
        return "FULL_SHARD" if text.lower() == "true" else "SHARD_GRAD_OP"
    text = STRATEGY_NUMBERS.get(text, text).upper()
    if text not in STRATEGY_STAGES:
        raise r.error(key, f"must be a sharding strategy ({', '.join(STRATEGY_STAGES)}) or true/false, got {value!r}")
    return text


def set_strategy(r: Reading, key: str, raw: Any, strategy: str) -> None:
    stage = STRATEGY_STAGES[strategy]
    r.said("parallelism.zero_stage", stage, key, raw, note=stage_note(strategy))
    r.assume("parallelism.zero_stage", stage, stage_note(strategy))


def read_config(r: Reading, key: str, config: Any, *, strategy: str | None, version: Version,
                trainer: bool = False) -> None:
    """An FSDP configuration mapping (the Trainer's fsdp_config, accelerate's and axolotl's), keys with or
    without their 'fsdp_' prefix (transformers strips it), and the convention it runs under. `strategy`: one set
    elsewhere (the Trainer's fsdp option); `trainer`: the Trainer hands it to accelerate (its FSDP2 default)."""
    config = r.mapping(key, config)
    stage = STRATEGY_STAGES[strategy] if strategy else None
    for name, value in config.items():
        sub = f"{key}.{name}"
        bare = name[5:] if name.startswith("fsdp_") else name
        if bare in ("sharding_strategy", "reshard_after_forward"):
            found = strategy_of(r, sub, value)
            set_strategy(r, sub, value, found)
            stage = STRATEGY_STAGES[found]
        else:
            _setting(r, sub, bare, value, version)
    if stage is None and version.number == 2 and trainer:
        r.default("parallelism.zero_stage", 2, key, TRAINER_RESHARD_WHY)
        stage = 2
    elif stage is None:
        default_strategy(r, key)
        stage = 3
    convention(r, version, stage, key)


def _setting(r: Reading, sub: str, bare: str, value: Any, version: Version) -> None:
    """One FSDP configuration key besides the sharding: recomputation, offload, or a reason to leave it aside."""
    if bare == "activation_checkpointing":
        if _truthy(r, sub, value):
            r.said("training.activation_checkpointing", "full", sub, value,
                   note="FSDP's activation checkpointing wraps each decoder layer: its input is kept")
        else:
            r.said("training.activation_checkpointing", "none", sub, value)
    elif bare in ("offload_params", "cpu_offload"):
        if _truthy(r, sub, value):
            r.said("parallelism.offload", "optimizer+parameters", sub, value,
                   note="FSDP's CPUOffload(offload_params=True): parameters, gradients and the optimizer step "
                        "on the CPU")
        else:
            r.said("parallelism.offload", "none", sub, value)
    elif bare in ("activation_checkpointing_offload", "offload_policy"):
        r.ignore(sub, OFFLOAD if _truthy(r, sub, value, strict=False) else "no offload")
    elif bare == "version":
        if sub != version.key:
            r.ignore(sub, f"the version is read from {version.key}")
    elif bare in ("mixed_precision_policy", "mixed_precision"):
        r.ignore(sub, "the precision comes from the mixed-precision setting (bf16/fp16): " + FSDP_PRECISION_NOTE)
    else:
        r.ignore_all(value, sub)


def default_strategy(r: Reading, key: str) -> None:
    r.default("parallelism.zero_stage", 3, key, "FSDP's default, FULL_SHARD (FSDP2: reshard_after_forward=True), "
                                                "shards parameters, gradients and optimizer state: ZeRO stage 3")


def _truthy(r: Reading, key: str, value: Any, *, strict: bool = True) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    if not strict:
        return bool(value)
    raise r.error(key, f"must be true or false, got {describe(value)}")
