"""Which framework's memory convention an imported config runs under (training.framework), and context parallelism.

Sources, as the readers cite them: DeepSpeed's convention from ZeRO stage 1 on (its estimators count stage 0 as plain
data parallelism); accelerate's FSDP defaults to fsdp_version 1 and, under FSDP2, to reshard_after_forward true
(accelerate/utils/dataclasses.py, FullyShardedDataParallelPlugin.__post_init__); the Trainer reads fsdp_config's
"version" (default 1) and passes reshard_after_forward false to FSDP2 unless fsdp_config says otherwise
(transformers' TrainingArguments._process_fsdp_args); torchtitan's "default" reshards after forward unless pipeline
parallelism runs (torchtitan/models/llama3/infra/parallelize.py, apply_fsdp: reshard_after_forward = not pp_enabled)
and shards over data_parallel_shard × context_parallel; axolotl reads the top-level fsdp_version and
context_parallel_size (sequence_parallel_degree before it; src/axolotl/utils/schemas/config.py); accelerate writes
cp_size as parallelism_config_cp_size (commands/config/cluster.py). Where the core refuses a convention with the rest
of the setup (fine-tuning under fsdp2, Megatron-LM's FSDP under megatron), the import keeps pytorch and says why.
"""

from __future__ import annotations

from typing import Any

import pytest

from app import wire
from tests.configs.helpers import assumed, ignored, imported, merged, refused, sample, understood

DS_STAGE_3 = {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}
ARGS = {"per_device_train_batch_size": 2, "bf16": True}


def request_of(answer: dict[str, Any]) -> dict[str, Any]:
    """The imported request, after checking that /estimate takes it as it is."""
    request = answer["request"]
    assert wire.job_from(request).estimate().peak.bytes > 0
    return request


def framework(answer: dict[str, Any]) -> str:
    return request_of(answer)["training"]["framework"]


def why_pytorch(answer: dict[str, Any]) -> str:
    return " ".join(why for value, why in assumed(answer)["training.framework"] if value == "pytorch")


# --- DeepSpeed --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("zero, expected", [
    ({"stage": 0}, "pytorch"), ({"stage": 1}, "deepspeed"), ({"stage": 2}, "deepspeed"), ({"stage": 3}, "deepspeed"),
    (True, "deepspeed"), (None, "pytorch"),  # the legacy switch is stage 1; no section is stage 0
])
def test_deepspeed_convention_from_zero_stage_1(zero, expected):
    config = {"train_micro_batch_size_per_gpu": 1}
    if zero is not None:
        config["zero_optimization"] = zero
    answer = imported("deepspeed", config)
    assert framework(answer) == expected
    if expected == "pytorch":
        assert "plain data parallelism" in why_pytorch(answer)
    else:
        assert "training.framework" in understood(answer)[next(k for k in understood(answer)
                                                               if k.startswith("zero_optimization"))]


def test_files_that_name_a_deepspeed_config():
    assert framework(imported("axolotl", sample("axolotl_fft_zero3.yaml"))) == "deepspeed"  # bundled zero3_bf16.json
    assert framework(imported("training-arguments", dict(ARGS, deepspeed=DS_STAGE_3))) == "deepspeed"
    answer = merged(("training-arguments", dict(ARGS, deepspeed="ds_config.json")), ("deepspeed", DS_STAGE_3))
    assert framework(answer) == "deepspeed"
    assert sorted(understood(answer)["zero_optimization.stage"]) == ["parallelism.zero_stage", "training.framework"]
    # A path the Trainer names but nobody gives: its ZeRO stage is unknown, so no convention is claimed.
    assert framework(imported("training-arguments", dict(ARGS, deepspeed="ds_config.json"))) == "pytorch"


def test_accelerate_deepspeed_plugin():
    assert framework(imported("accelerate", sample("accelerate_deepspeed.yaml"))) == "deepspeed"
    answer = imported("accelerate", "distributed_type: DEEPSPEED\nnum_processes: 2\n")  # the plugin's stage 2
    assert framework(answer) == "deepspeed" and "distributed_type" in understood(answer)
    answer = imported("accelerate", "distributed_type: MULTI_GPU\nnum_processes: 2\n")
    assert framework(answer) == "pytorch" and "DDP" in why_pytorch(answer)


# --- FSDP -------------------------------------------------------------------------------------------------------

def test_accelerate_fsdp2_is_the_fsdp2_convention():
    answer = imported("accelerate", sample("accelerate_fsdp2.yaml"))
    assert framework(answer) == "fsdp2"
    assert request_of(answer)["parallelism"]["zero_stage"] == 3
    assert "training.framework" in understood(answer)["fsdp_config.fsdp_version"]


@pytest.mark.parametrize("fsdp_config, stage, words", [
    ("  fsdp_version: 1\n  fsdp_sharding_strategy: FULL_SHARD\n", 3, "flat parameters"),
    ("  fsdp_sharding_strategy: FULL_SHARD\n", 3, "no FSDP version given"),  # accelerate's default is FSDP1
    ("  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n", 2, "ZeRO-2-like"),
])
def test_accelerate_fsdp_other_than_fsdp2_resharding_stays_pytorch(fsdp_config, stage, words):
    answer = imported("accelerate", f"distributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\n"
                                    f"fsdp_config:\n{fsdp_config}")
    assert framework(answer) == "pytorch"
    assert request_of(answer)["parallelism"]["zero_stage"] == stage
    assert words in why_pytorch(answer)


def test_trainer_fsdp_version_2():
    config = {"version": 2, "reshard_after_forward": True, "activation_checkpointing": True}
    answer = imported("training-arguments", dict(ARGS, fsdp="full_shard auto_wrap", fsdp_config=config))
    assert framework(answer) == "fsdp2"
    assert "training.framework" in understood(answer)["fsdp_config.version"]
    assert "not a sharding strategy" in ignored(answer)["fsdp"]  # FSDP2 reads reshard_after_forward
    # Without reshard_after_forward the Trainer passes False to FSDP2: parameters stay gathered, ZeRO-2-like.
    answer = imported("training-arguments", dict(ARGS, fsdp="full_shard auto_wrap", fsdp_config={"version": 2}))
    assert framework(answer) == "pytorch"
    assert request_of(answer)["parallelism"]["zero_stage"] == 2
    assert any("_process_fsdp_args" in why for _, why in assumed(answer)["parallelism.zero_stage"])
    # FSDP1, the Trainer's default version.
    answer = imported("training-arguments", dict(ARGS, fsdp="full_shard auto_wrap"))
    assert framework(answer) == "pytorch" and "FSDP1" in why_pytorch(answer)


def test_axolotl_fsdp2_full_fine_tuning():
    text = ("base_model: meta-llama/Meta-Llama-3-8B\nsequence_len: 4096\nmicro_batch_size: 1\nbf16: true\n"
            "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n  offload_params: false\n")
    answer = imported("axolotl", text)
    assert framework(answer) == "fsdp2"
    assert "training.framework" in understood(answer)["fsdp_version"]
    answer = imported("axolotl", text.replace("fsdp_version: 2\n", ""))  # axolotl pins FSDP1 without a version
    assert framework(answer) == "pytorch" and "FSDP1" in why_pytorch(answer)


def test_a_convention_the_core_refuses_falls_back_to_pytorch_with_its_reason():
    # LoRA under FSDP2: the core does not model fine-tuning under the fsdp2 convention.
    answer = imported("axolotl", sample("axolotl_lora_fsdp2_cp.yaml"))
    request = request_of(answer)
    assert request["training"]["framework"] == "pytorch"
    assert request["finetuning"]["method"] == "lora"
    assert request["parallelism"]["zero_stage"] == 3
    assert "fine-tuning under the fsdp2 convention" in why_pytorch(answer)
    assert "fine-tuning under the fsdp2 convention" in ignored(answer)["fsdp_version"]
    assert "training.framework" not in {entry["field"] for entry in answer["understood"]}


# --- torchtitan -------------------------------------------------------------------------------------------------

def test_torchtitan_fsdp_is_fsdp2():
    answer = imported("torchtitan", sample("torchtitan_llama3_8b.toml"))
    assert framework(answer) == "fsdp2"
    assert request_of(answer)["parallelism"]["zero_stage"] == 3


@pytest.mark.parametrize("line, key", [
    ('fsdp_reshard_after_forward = "never"', "parallelism.fsdp_reshard_after_forward"),
    ("pipeline_parallel_degree = 2", "parallelism.pipeline_parallel_degree"),  # "default" with pipeline stages
])
def test_torchtitan_fsdp_without_resharding_stays_pytorch(line, key):
    text = sample("torchtitan_llama3_8b.toml").replace("pipeline_parallel_degree = 1\n", f"{line}\n")
    answer = imported("torchtitan", text)
    assert framework(answer) == "pytorch"
    assert request_of(answer)["parallelism"]["zero_stage"] == 2
    assert "ZeRO-2-like" in why_pytorch(answer)
    assert {"training.framework", "parallelism.zero_stage"} <= set(understood(answer)[key])


def test_torchtitan_without_fsdp():
    text = sample("torchtitan_llama3_8b.toml").replace("data_parallel_shard_degree = -1", "data_parallel_shard_degree = 1")
    answer = imported("torchtitan", text)
    assert framework(answer) == "pytorch" and "no FSDP" in why_pytorch(answer)


# --- Megatron-LM ------------------------------------------------------------------------------------------------

def test_megatron_convention():
    answer = imported("megatron", sample("megatron_llama3_8b.sh"))
    assert framework(answer) == "megatron"
    assert request_of(answer)["parallelism"]["zero_stage"] == 1
    assert "training.framework" in understood(answer)["--use-distributed-optimizer"]
    assert framework(imported("megatron", sample("megatron_gpt3_175b.sh"))) == "megatron"
    text = "distributed_type: MEGATRON_LM\nnum_processes: 8\nmegatron_lm_config:\n  megatron_lm_tp_degree: 2\n"
    assert framework(imported("accelerate", text)) == "megatron"


@pytest.mark.parametrize("flags, stage", [
    ("--use-torch-fsdp2", 3),
    ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 2),
    ("--use-megatron-fsdp --data-parallel-sharding-strategy optim", 1),
])
def test_megatron_fsdp_keeps_a_request_the_estimate_takes(flags, stage):
    answer = imported("megatron", sample("megatron_llama3_8b.sh").rstrip() + f" {flags}\n")
    request = request_of(answer)
    assert request["parallelism"]["zero_stage"] == stage
    assert request["training"]["framework"] == "pytorch"
    assert "Megatron-LM's FSDP" in why_pytorch(answer)


# --- context parallelism ----------------------------------------------------------------------------------------

def test_torchtitan_context_parallel_degree():
    answer = imported("torchtitan", sample("torchtitan_llama3_8b_cp.toml"))
    request = request_of(answer)
    assert (request["parallelism"]["context"], request["parallelism"]["data"]) == (2, 4)
    assert request["training"]["framework"] == "fsdp2"  # FSDP shards over data × context
    assert understood(answer)["parallelism.context_parallel_degree"] == ["parallelism.context"]
    # Context parallelism alone still runs FSDP (ParallelDims.fsdp_enabled: dp_shard or cp), with its mixed precision.
    text = sample("torchtitan_llama3_8b_cp.toml").replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = 1")
    request = request_of(imported("torchtitan", text))
    assert (request["parallelism"]["context"], request["parallelism"]["zero_stage"]) == (2, 3)
    assert request["training"]["precision"] == "bf16-fp32-master"


def test_accelerate_cp_size():
    answer = imported("accelerate", sample("accelerate_fsdp2_cp.yaml"))
    request = request_of(answer)
    assert (request["parallelism"]["context"], request["parallelism"]["data"]) == (2, 4)
    assert request["training"]["framework"] == "fsdp2"
    assert understood(answer)["parallelism_config.parallelism_config_cp_size"] == ["parallelism.context"]
    # num_processes counts the context-parallel GPUs too: 8 = dp_shard 4 × cp 2, and 16 would be 8 data groups.
    error = refused("accelerate", sample("accelerate_fsdp2_cp.yaml").replace("num_processes: 8", "num_processes: 16"))
    assert error.field == "text.parallelism_config.parallelism_config_dp_replicate_size"
    assert "8 data-parallel groups of tensor × pipeline × context" in error.message
    error = refused("accelerate", sample("accelerate_fsdp2_cp.yaml").replace("num_processes: 8", "num_processes: 7"))
    assert error.field == "text.num_processes" and "context" in error.message


def test_trainer_parallelism_config_cp_size():
    config = {"dp_shard_size": 4, "cp_size": 2}
    request = request_of(imported("training-arguments", dict(ARGS, parallelism_config=config)))
    assert (request["parallelism"]["context"], request["parallelism"]["data"]) == (2, 4)


def test_axolotl_context_parallel_size():
    answer = imported("axolotl", sample("axolotl_lora_fsdp2_cp.yaml"))
    assert request_of(answer)["parallelism"]["context"] == 2
    assert understood(answer)["context_parallel_size"] == ["parallelism.context"]
    old = sample("axolotl_lora_fsdp2_cp.yaml").replace("context_parallel_size", "sequence_parallel_degree")
    assert request_of(imported("axolotl", old))["parallelism"]["context"] == 2  # the deprecated name
    both = sample("axolotl_lora_fsdp2_cp.yaml") + "sequence_parallel_degree: 4\n"
    answer = imported("axolotl", both)
    assert request_of(answer)["parallelism"]["context"] == 2
    assert "context_parallel_size" in ignored(answer)["sequence_parallel_degree"]


def test_context_parallelism_the_core_refuses_names_the_key():
    # Ring attention runs a fused kernel per chunk; axolotl itself requires flash attention for it.
    text = sample("axolotl_lora_fsdp2_cp.yaml").replace("flash_attention_2", "eager")
    error = refused("axolotl", text)
    assert error.field == "text.context_parallel_size"
    assert "sdpa or flash" in error.message
