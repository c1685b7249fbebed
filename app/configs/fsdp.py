"""PyTorch FSDP settings as the Trainer, accelerate and axolotl write them, as ZeRO stages.

FSDP's sharding strategies (torch.distributed.fsdp.ShardingStrategy) shard what ZeRO's stages shard
(Zhao et al. 2023, arXiv:2304.11277, section 3.2): FULL_SHARD parameters, gradients and optimizer state
(stage 3), SHARD_GRAD_OP gradients and optimizer state (stage 2), NO_SHARD nothing (DDP). FSDP2's
``reshard_after_forward=True`` is FULL_SHARD, ``False`` SHARD_GRAD_OP. The HYBRID strategies shard within a
node and replicate across nodes. accelerate numbers the strategies from 1 in that order
(accelerate/utils/constants.py, FSDP_SHARDING_STRATEGY).
"""

from __future__ import annotations

from typing import Any, Final

from app.configs.common import OFFLOAD, Reading, describe

STRATEGY_STAGES: Final = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3, "HYBRID_SHARD_ZERO2": 2}
STRATEGY_NUMBERS: Final = {str(i): name for i, name in enumerate(STRATEGY_STAGES, start=1)}
FSDP_PRECISION_NOTE: Final = ("FSDP's mixed precision keeps the sharded parameters in fp32 as the master copy and "
                              "gathers half-precision copies for compute")


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


def read_config(r: Reading, key: str, config: Any, *, strategy_set: bool) -> None:
    """An FSDP configuration mapping (the Trainer's fsdp_config, accelerate's and axolotl's), keys with or
    without their 'fsdp_' prefix (transformers strips it). `strategy_set`: a strategy came from elsewhere."""
    config = r.mapping(key, config)
    found = strategy_set
    for name, value in config.items():
        sub = f"{key}.{name}"
        bare = name[5:] if name.startswith("fsdp_") else name
        if bare in ("sharding_strategy", "reshard_after_forward"):
            set_strategy(r, sub, value, strategy_of(r, sub, value))
            found = True
        elif bare == "activation_checkpointing":
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
            r.ignore(sub, "FSDP1 and FSDP2 shard the same tensors; the version changes no count")
        elif bare in ("mixed_precision_policy", "mixed_precision"):
            r.ignore(sub, "the precision comes from the mixed-precision setting (bf16/fp16): " + FSDP_PRECISION_NOTE)
        else:
            r.ignore_all(value, sub)
    if not found:
        default_strategy(r, key)


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
