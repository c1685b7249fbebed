"""DeepSpeed's ds_config.json read into an estimate body.

Key meanings: DeepSpeed's configuration reference (docs/_pages/config-json.md) and runtime
(deepspeed/runtime/config.py: DeepSpeedConfig._batch_assertion, train_batch_size = micro-batch × accumulation ×
GPUs; engine.py: _configure_basic_optimizer for the optimizer types, _do_optimizer_sanity_check for the bf16 and
fp32-accumulation optimizers); "auto" is the Hugging Face integration's (transformers/integrations/deepspeed.py,
HfTrainerDeepSpeedConfig.trainer_config_process).
"""

from __future__ import annotations

import json

import pytest

from app.configs.common import NO_MEMORY, OFFLOAD_DETAIL
from tests.configs.helpers import assumed, ignored, imported, refused, sample, understood


def test_explicit_zero2_config():
    answer = imported("deepspeed", sample("ds_config_zero2_explicit.json"))
    request = answer["request"]
    assert request["training"]["micro_batch_size"] == 4
    assert request["training"]["gradient_accumulation_steps"] == 16
    # train_batch_size 512 = 4 × 16 × data: data 8, reported as assumed (worked out, not stated).
    assert request["parallelism"]["data"] == 8
    assert any("512" in why for _, why in assumed(answer)["parallelism.data"])
    assert request["parallelism"]["zero_stage"] == 2
    # bf16 with DeepSpeed: bf16 weights and gradients, an fp32 master copy and fp32 optimizer state.
    assert request["training"]["precision"] == "bf16-fp32-master"
    # "Adam" is FusedAdam in AdamW mode unless adam_w_mode is false (engine._configure_basic_optimizer).
    assert request["training"]["optimizer"] == "adamw"
    assert request["training"]["optimizer_implementation"] == "fused"
    # offload_optimizer device cpu: ZeRO-Offload (optimizer state, master copy, a gradient partition on the host).
    assert request["parallelism"]["offload"] == "optimizer"
    why = ignored(answer)
    assert why["zero_optimization.offload_optimizer.pin_memory"] == OFFLOAD_DETAIL
    assert "zero_optimization.reduce_bucket_size" not in why  # the gradient bucket: parallelism.reduce_bucket_size
    assert why["optimizer.params.lr"] == NO_MEMORY
    assert "deepspeed.checkpointing" in why["activation_checkpointing.partition_activations"]
    assert sorted(understood(answer)["zero_optimization.stage"]) == ["parallelism.zero_stage", "training.framework"]
    assert answer["kind"] == "deepspeed"


def test_auto_values_alone_fall_back_to_defaults_and_say_so():
    answer = imported("deepspeed", sample("ds_config_zero3.json"))
    request = answer["request"]
    assert request["parallelism"]["zero_stage"] == 3
    assert request["training"]["micro_batch_size"] == 1
    reasons = assumed(answer)
    assert any('"auto"' in why for _, why in reasons["training.micro_batch_size"])
    assert any('"auto"' in why for _, why in reasons["training.precision"])
    # bf16/fp16 "auto" with no Trainer arguments: assumed passed, and said so with what happens if not.
    assert request["training"]["precision"] == "bf16-fp32-master"
    assert any("--bf16" in why and "fp32" in why for _, why in reasons["training.precision"])
    assert "zero_optimization.offload_param.device" in ignored(answer)  # device none: still reported


def test_the_stock_zero3_offload_config_imports_as_it_runs():
    # transformers' DeepSpeed guide's ZeRO-3 file (samples/SOURCES.md): ZeRO-3, optimizer and parameters on the CPU,
    # bf16 once the Trainer fills its "auto"; it was fp32 on one GPU without ZeRO, "does not fit by 103.68 GiB".
    answer = imported("deepspeed", sample("ds_config_zero3_offload.json"))
    request = answer["request"]
    assert request["parallelism"]["zero_stage"] == 3
    assert request["parallelism"]["offload"] == "optimizer+parameters"
    assert request["training"]["precision"] == "bf16-fp32-master"
    assert request["training"]["optimizer"] == "adamw"
    fields = [entry["field"] for entry in answer["assumed"]]
    assert len(fields) == len(set(fields)), "a field assumed twice"
    assert not set(understood(answer)) & set(ignored(answer)), "a key both understood and ignored"


@pytest.mark.parametrize("section, precision", [
    ({"bf16": {"enabled": True}}, "bf16-fp32-master"),
    ({"bfloat16": {"enabled": True}}, "bf16-fp32-master"),  # the old name DeepSpeed still reads
    ({"fp16": {"enabled": True, "loss_scale": 0}}, "fp16-fp32-master"),
    ({"bf16": {"enabled": False}, "fp16": {"enabled": False}}, "fp32"),
    ({}, "fp32"),
    ({"torch_autocast": {"enabled": True}}, "autocast-bf16"),  # dtype defaults to bfloat16
    ({"torch_autocast": {"enabled": True, "dtype": "float16"}}, "autocast-fp16"),
    # bf16 with fp32 gradient accumulation: BF16_Optimizer's fp32 gradients (ZeRO stage 1).
    ({"bf16": {"enabled": True}, "data_types": {"grad_accum_dtype": "fp32"}}, "megatron-bf16"),
    ({"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}},
     {"weights": "bf16", "gradients": "bf16", "master_weights": "bf16", "optimizer_states": "bf16",
      "activations": "bf16"}),
    ({"amp": {"enabled": True, "opt_level": "O2"}}, "fp16-fp32-master"),
])
def test_precision(section, precision):
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}, **section}
    assert imported("deepspeed", config)["request"]["training"]["precision"] == precision


@pytest.mark.parametrize("optimizer, expected", [
    ({"type": "AdamW"}, ("adamw", "fused")),
    ({"type": "Adam", "params": {"adam_w_mode": False}}, ("adam", "fused")),
    ({"type": "adam", "params": {"torch_adam": True}}, ("adamw", "foreach")),  # names are matched without case
    ({"type": "AdamW", "params": {"torch_adam": True, "foreach": False}}, ("adamw", "for-loop")),
    ({"type": "Lion", "params": {"lr": 1e-4}}, ("lion", "fused")),
    ({"type": "SGD", "params": {"lr": 0.1}}, ("sgd", "foreach")),  # torch.optim.SGD by name
    ({"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "fused": True}}, ("sgd-momentum", "fused")),
    ({"type": "Adafactor", "params": {"foreach": False}}, ("adafactor", "for-loop")),
    ({"type": "Lamb"}, ("adamw", "fused")),  # FusedLamb keeps Adam's two moments (assumed)
])
def test_optimizer(optimizer, expected):
    request = imported("deepspeed", {"train_micro_batch_size_per_gpu": 1, "optimizer": optimizer})["request"]
    assert (request["training"]["optimizer"], request["training"]["optimizer_implementation"]) == expected


def test_unmodelled_optimizer_is_ignored_with_why_and_unknown_is_refused():
    answer = imported("deepspeed", {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "OneBitAdam"}})
    assert "not modelled" in ignored(answer)["optimizer.type"]
    error = refused("deepspeed", {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "Adamm"}})
    assert error.field == "text.optimizer.type"


@pytest.mark.parametrize("zero, offload", [
    ({"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}, "optimizer+parameters"),
    ({"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}, "optimizer"),
    ({"stage": 2, "cpu_offload": True}, "optimizer"),  # the old switch
    ({"stage": 3, "offload_param": {"device": "cpu"}}, "none"),  # parameters alone: not a mode trainmem models
    ({"stage": 2, "offload_optimizer": {"device": "none"}}, "none"),
])
def test_offload(zero, offload):
    answer = imported("deepspeed", {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero})
    assert answer["request"]["parallelism"]["offload"] == offload


def test_offload_without_zero_is_refused_at_its_key():
    error = refused("deepspeed", {"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})
    assert error.field == "text.zero_optimization.offload_optimizer.device"


def test_tensor_parallel_autotp():
    answer = imported("deepspeed", {"train_micro_batch_size_per_gpu": 1, "tensor_parallel": {"autotp_size": 4}})
    assert answer["request"]["parallelism"]["tensor"] == 4


@pytest.mark.parametrize("config, expect", [
    # DeepSpeed's own rules for the missing ones (DeepSpeedConfig._set_batch_related_parameters), one GPU assumed.
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}, (4, 16, 1)),
    ({"train_batch_size": 64, "gradient_accumulation_steps": 4}, (16, 4, 1)),
    ({"train_batch_size": 64}, (64, 1, 1)),
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}, (2, 4, 8)),
])
def test_batch_rules(config, expect):
    training = imported("deepspeed", config)["request"]["training"]
    parallelism = imported("deepspeed", config)["request"]["parallelism"]
    assert (training["micro_batch_size"], training["gradient_accumulation_steps"], parallelism["data"]) == expect


@pytest.mark.parametrize("config, field, words", [
    ({"zero_optimization": {"stage": 7}}, "text.zero_optimization.stage", "between 0 and 3"),
    ({"zero_optimization": {"stage": "3"}}, "text.zero_optimization.stage", "must be an integer"),
    ({"train_micro_batch_size_per_gpu": True}, "text.train_micro_batch_size_per_gpu", "must be an integer"),
    ({"bf16": True}, "text.bf16", "must be a mapping"),
    ({"bf16": {"enabled": "yes"}}, "text.bf16.enabled", "true or false"),
    ({"bf16": {"enabled": True}, "fp16": {"enabled": True}}, "text.fp16.enabled", "cannot both"),
    ({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 4},
     "text.train_batch_size", "not a multiple"),
    ({"torch_autocast": {"enabled": True}, "bf16": {"enabled": True}}, "text.torch_autocast.enabled", "fp32 weights"),
])
def test_bad_values_name_the_key(config, field, words):
    error = refused("deepspeed", config)
    assert error.field == field
    assert words in error.message


def test_not_json_is_refused_at_text():
    error = refused("deepspeed", '{"zero_optimization": {"stage": 2},}')
    assert error.field == "text" and "not valid JSON" in error.message
    error = refused("deepspeed", "[1, 2]")
    assert error.field == "text"
    error = refused("deepspeed", json.dumps({"a": 1}) + " " * 10 + "x")
    assert error.field == "text"


def test_reduce_bucket_size_is_read_and_written() -> None:
    """zero_optimization.reduce_bucket_size (elements) becomes parallelism.reduce_bucket_size; "auto" (the Trainer
    fills it from the model) falls back to DeepSpeed's default, 500,000,000, saying so; a setup with another bucket
    exports it back."""
    from app.configs import import_config
    from app.configs.export import export_config

    text = '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "reduce_bucket_size": 200000000}}'
    answer = import_config("deepspeed", text)
    assert answer["request"]["parallelism"]["reduce_bucket_size"] == 200_000_000
    auto = import_config("deepspeed", '{"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}')
    assert auto["request"]["parallelism"].get("reduce_bucket_size", 500_000_000) == 500_000_000
    body = {"model": {"preset": "gpt2"}, "parallelism": {"data": 8, "zero_stage": 2, "reduce_bucket_size": 50_000_000}}
    exported = export_config(body, "deepspeed")
    assert '"reduce_bucket_size": 50000000' in exported["text"]
    assert not [item for item in exported["unexpressed"] if item["field"] == "parallelism.reduce_bucket_size"]
