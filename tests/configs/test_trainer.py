"""The Trainer's arguments (TrainingArguments as JSON) alone and with the DeepSpeed file they name.

The sample training_args.json is what transformers 5.24.0 writes for
TrainingArguments(output_dir="out", per_device_train_batch_size=4, gradient_accumulation_steps=8, bf16=True,
gradient_checkpointing=True, optim="adamw_torch_fused", learning_rate=2e-5, report_to="none").to_json_string(),
with deepspeed set to a file's path. Meanings: transformers' training_args.py (fields and defaults),
trainer_optimizer.py (_OPTIMIZER_HANDLERS: what each optim builds), integrations/deepspeed.py (fill_match: the
Trainer fills DeepSpeed's "auto" and refuses a config that disagrees with it).
"""

from __future__ import annotations

import json

import pytest

from app.configs.optimizers import NOT_MODELLED, TRAINER_OPTIMIZERS
from tests.configs.helpers import assumed, ignored, imported, merged, refused, sample, understood

ARGS = json.loads(sample("training_args.json"))


def test_arguments_with_their_deepspeed_file():
    answer = merged(("training-arguments", sample("training_args.json")), ("deepspeed", sample("ds_config_zero3.json")))
    assert answer["kinds"] == ["training-arguments", "deepspeed"]
    training, parallelism = answer["request"]["training"], answer["request"]["parallelism"]
    # DeepSpeed's "auto" filled from the Trainer's values.
    assert (training["micro_batch_size"], training["gradient_accumulation_steps"]) == (4, 8)
    assert training["precision"] == "bf16-fp32-master"  # bf16 "auto" <- bf16 True, under DeepSpeed
    assert parallelism["zero_stage"] == 3
    assert training["activation_checkpointing"] == "full"
    assert training["loop"] == "hf-trainer"
    # The DeepSpeed file names an optimizer: it, not the Trainer's optim, builds it (FusedAdam).
    assert (training["optimizer"], training["optimizer_implementation"]) == ("adamw", "fused")
    notes = [e["note"] for e in answer["understood"] if e["key"] == "train_micro_batch_size_per_gpu"]
    assert notes == ["filled from files[0] per_device_train_batch_size"]
    assert "files[1]" in ignored(answer)["deepspeed"]


def test_arguments_alone():
    args = dict(ARGS, deepspeed=None)
    answer = imported("training-arguments", args)
    training = answer["request"]["training"]
    # bf16=True without DeepSpeed or FSDP is torch.autocast over fp32 weights.
    assert training["precision"] == "autocast-bf16"
    assert (training["optimizer"], training["optimizer_implementation"]) == ("adamw", "fused")
    assert understood(answer)["per_device_train_batch_size"] == ["training.micro_batch_size"]
    assert ignored(answer)["learning_rate"]


def test_a_hand_written_subset_takes_the_trainers_defaults():
    answer = imported("training-arguments", {"output_dir": "out", "fp16": True})
    training = answer["request"]["training"]
    assert training["micro_batch_size"] == 8  # per_device_train_batch_size's default
    assert training["precision"] == "autocast-fp16"
    assert training["optimizer_implementation"] == "fused"  # adamw_torch_fused, the default with torch >= 2.8
    assert any("default" in why for _, why in assumed(answer)["training.micro_batch_size"])


def test_embedded_deepspeed_dict_is_read():
    args = dict(ARGS, deepspeed=json.loads(sample("ds_config_zero3.json")))
    answer = imported("training-arguments", args)
    assert answer["request"]["parallelism"]["zero_stage"] == 3
    assert answer["request"]["training"]["precision"] == "bf16-fp32-master"
    assert "deepspeed.zero_optimization.stage" in understood(answer)


def test_deepspeed_disagreeing_with_the_trainer_is_refused_naming_both():
    ds = json.loads(sample("ds_config_zero3.json"))
    ds["train_micro_batch_size_per_gpu"] = 2
    error = refused("", "", files=[("training-arguments", ARGS), ("deepspeed", ds)])
    assert error.field == "files.1.text.train_micro_batch_size_per_gpu"
    assert "per_device_train_batch_size is 4" in error.message
    ds = dict(json.loads(sample("ds_config_zero3.json")), bf16={"enabled": True})
    error = refused("", "", files=[("training-arguments", dict(ARGS, bf16=False)), ("deepspeed", ds)])
    assert error.field == "files.1.text.bf16.enabled"


def test_train_batch_size_gives_the_data_parallel_degree_with_the_trainers_values():
    ds = dict(json.loads(sample("ds_config_zero3.json")), train_batch_size=256)
    answer = merged(("training-arguments", ARGS), ("deepspeed", ds))
    assert answer["request"]["parallelism"]["data"] == 256 // (4 * 8)


@pytest.mark.parametrize("fsdp, config, stage", [
    ("full_shard auto_wrap", None, 3),
    (["shard_grad_op"], None, 2),
    (True, {"reshard_after_forward": False}, 2),
    (True, {"version": 2}, 2),  # FSDP2 under the Trainer: reshard_after_forward false unless fsdp_config says it
    ("full_shard", {"version": 2, "reshard_after_forward": True}, 3),
    (True, {"fsdp_activation_checkpointing": True}, 3),  # the old fsdp_ prefix, which transformers strips
])
def test_fsdp(fsdp, config, stage):
    answer = imported("training-arguments", dict(ARGS, deepspeed=None, fsdp=fsdp, fsdp_config=config))
    request = answer["request"]
    assert request["parallelism"]["zero_stage"] == stage
    assert request["training"]["precision"] == "bf16-fp32-master"  # FSDP keeps fp32 shards as the master
    assert any("FSDP" in why for _, why in assumed(answer)["parallelism.zero_stage"])
    if config and "fsdp_activation_checkpointing" in config:
        assert request["training"]["activation_checkpointing"] == "full"


@pytest.mark.parametrize("optim, expected", [
    ("adamw_torch", ("adamw", "foreach")), ("adamw_torch_fused", ("adamw", "fused")),
    ("adamw_bnb_8bit", ("adamw-8bit", "fused")), ("adamw_8bit", ("adamw-8bit", "fused")),
    ("paged_adamw_8bit", ("paged-adamw-8bit", "fused")), ("paged_adamw_32bit", ("paged-adamw-32bit", "fused")),
    ("adafactor", ("adafactor", "for-loop")),
    ("sgd", ("sgd", "foreach")), ("lion_32bit", ("lion", "fused")), ("lion_8bit", ("lion", "fused")),
    ("adamw_torch_xla", ("adamw", "foreach")),
])
def test_optim_names(optim, expected):
    training = imported("training-arguments", {"optim": optim})["request"]["training"]
    assert (training["optimizer"], training["optimizer_implementation"]) == expected


def test_sgd_momentum_from_optim_args():
    training = imported("training-arguments", {"optim": "sgd", "optim_args": "momentum=0.9,nesterov=True"})
    assert training["request"]["training"]["optimizer"] == "sgd-momentum"


def test_unknown_optim_is_ignored_and_adamw_assumed():
    answer = imported("training-arguments", {"optim": "galore_adamw"})
    assert "not modelled" in ignored(answer)["optim"]
    assert answer["request"]["training"]["optimizer"] == "adamw"
    assert "galore_adamw" in assumed(answer)["training.optimizer"][0][1]


@pytest.mark.validation  # against transformers itself, which the validate extra brings
def test_every_name_the_trainer_accepts_is_mapped_or_explained():
    transformers = pytest.importorskip("transformers")
    names = {member.value for member in transformers.training_args.OptimizerNames}
    assert names <= set(TRAINER_OPTIMIZERS) | set(NOT_MODELLED), names - set(TRAINER_OPTIMIZERS) - set(NOT_MODELLED)


@pytest.mark.parametrize("args, field, words", [
    ({"per_device_train_batch_size": "4"}, "text.per_device_train_batch_size", "must be an integer"),
    ({"bf16": True, "fp16": True}, "text.fp16", "cannot both"),
    ({"gradient_checkpointing": "yes"}, "text.gradient_checkpointing", "true or false"),
    ({"optim": "sgd", "optim_args": "momentum"}, "text.optim_args", "key=value"),
    ({"fsdp": "full_shard zero4"}, "text.fsdp", "unknown FSDP option"),
    ({"deepspeed": 3}, "text.deepspeed", "path or a DeepSpeed config"),
])
def test_bad_arguments(args, field, words):
    error = refused("training-arguments", args)
    assert (error.field, words in error.message) == (field, True), error


def test_use_liger_kernel_means_liger_modules_and_its_fused_loss():
    from tests.configs.helpers import imported as read

    answer = read("training-arguments", {"per_device_train_batch_size": 2, "use_liger_kernel": True, "bf16": True})
    training = answer["request"]["training"]
    assert (training["implementation"], training["loss"]) == ("liger", "fused-linear")


@pytest.mark.parametrize("reentrant", [True, False])
def test_use_reentrant_picks_the_checkpoint_variant(reentrant):
    args = {"output_dir": "out", "bf16": True, "gradient_checkpointing": True,
            "gradient_checkpointing_kwargs": {"use_reentrant": reentrant, "preserve_rng_state": False}}
    answer = imported("training-arguments", args)
    assert answer["request"]["training"]["use_reentrant"] is reentrant
    assert understood(answer)["gradient_checkpointing_kwargs.use_reentrant"] == ["training.use_reentrant"]
    assert ignored(answer)["gradient_checkpointing_kwargs.preserve_rng_state"]


def test_use_reentrant_without_checkpointing_is_left_aside():
    args = {"output_dir": "out", "gradient_checkpointing_kwargs": {"use_reentrant": True}}
    answer = imported("training-arguments", args)
    assert "use_reentrant" not in answer["request"]["training"]
    assert ignored(answer)["gradient_checkpointing_kwargs.use_reentrant"]


@pytest.mark.parametrize("name", ["activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"])
def test_offload_keeps_the_checkpoints_in_host_memory(name):
    # transformers 5.24's Trainer pops offload from these kwargs and runs each checkpoint under save_on_cpu
    args = {"output_dir": "out", "bf16": True, "activation_checkpointing": True, name: {"offload": True}}
    answer = imported("training-arguments", args)
    assert answer["request"]["training"]["activation_offload"] == "checkpoints-to-host"
    assert understood(answer)[f"{name}.offload"] == ["training.activation_offload"]


def test_offload_without_checkpointing_is_left_aside():
    args = {"output_dir": "out", "activation_checkpointing_kwargs": {"offload": True}}
    answer = imported("training-arguments", args)
    assert "activation_offload" not in answer["request"]["training"]
    assert "without activation checkpointing" in ignored(answer)["activation_checkpointing_kwargs.offload"]
