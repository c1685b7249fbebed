"""accelerate's launch config and axolotl's training config.

accelerate: keys of ClusterConfig (accelerate/commands/config/config_args.py) as `accelerate config` writes them
(commands/config/cluster.py); FSDP strategies in accelerate/utils/constants.py (FSDP_SHARDING_STRATEGY);
DeepSpeedPlugin's ZeRO stage defaults to 2 (accelerate/utils/dataclasses.py); TrainingArguments takes accelerate's
mixed precision unless bf16 or fp16 is true (transformers training_args.py, ACCELERATE_MIXED_PRECISION).
axolotl: its config schema (src/axolotl/utils/schemas/config.py, training.py, peft.py), resolve_dtype
(src/axolotl/utils/config/__init__.py: bf16 'auto', torch_dtype), the QLoRA base (src/axolotl/loaders/model.py:
NF4 with double quantization), its bundled DeepSpeed files (deepspeed_configs/zero*.json).
"""

from __future__ import annotations

import pytest

from tests.configs.helpers import assumed, ignored, imported, merged, refused, sample, understood


def test_accelerate_fsdp2():
    answer = imported("accelerate", sample("accelerate_fsdp2.yaml"))
    request = answer["request"]
    assert request["parallelism"]["data"] == 16  # num_processes counts every process on every machine
    assert request["parallelism"]["gpus_per_node"] == 8  # ... over num_machines 2
    assert request["parallelism"]["zero_stage"] == 3  # FSDP2 reshard_after_forward: true
    assert request["training"]["activation_checkpointing"] == "full"
    assert request["training"]["precision"] == "bf16-fp32-master"
    assert "num_machines" in ignored(answer)


def test_accelerate_deepspeed_plugin():
    request = imported("accelerate", sample("accelerate_deepspeed.yaml"))["request"]
    assert request["parallelism"]["zero_stage"] == 2
    assert request["parallelism"]["data"] == 8
    assert request["training"]["gradient_accumulation_steps"] == 4
    assert request["training"]["precision"] == "bf16-fp32-master"


def test_accelerate_ddp_and_autocast():
    request = imported("accelerate", sample("accelerate_multi_gpu.yaml"))["request"]
    assert (request["parallelism"]["data"], request["parallelism"]["zero_stage"]) == (4, 0)
    assert request["training"]["precision"] == "autocast-fp16"


def test_accelerate_deepspeed_without_a_stage_is_stage_2():
    answer = imported("accelerate", "distributed_type: DEEPSPEED\nnum_processes: 2\nmixed_precision: 'no'\n")
    assert answer["request"]["parallelism"]["zero_stage"] == 2
    assert any("stage 2" in why for _, why in assumed(answer)["parallelism.zero_stage"])


def test_accelerate_megatron_plugin():
    text = """distributed_type: MEGATRON_LM
mixed_precision: bf16
num_processes: 16
megatron_lm_config:
  megatron_lm_tp_degree: 2
  megatron_lm_pp_degree: 2
  megatron_lm_num_micro_batches: 4
  megatron_lm_sequence_parallelism: true
  megatron_lm_recompute_activations: true
  megatron_lm_use_distributed_optimizer: true
  megatron_lm_gradient_clipping: 1.0
"""
    request = imported("accelerate", text)["request"]
    assert request["training"]["implementation"] == "megatron"
    assert request["training"]["precision"] == "megatron-bf16"
    assert request["parallelism"].items() >= {"data": 4, "tensor": 2, "pipeline": 2, "sequence_parallel": True, "zero_stage": 1}.items()
    assert request["training"]["activation_checkpointing"] == "selective"
    assert request["training"]["gradient_accumulation_steps"] == 4


def test_accelerate_with_the_trainers_arguments():
    # accelerate: bf16 and 16 processes; the Trainer: bf16 false leaves accelerate's mixed precision on.
    args = {"per_device_train_batch_size": 2, "bf16": False, "gradient_accumulation_steps": 2}
    answer = merged(("accelerate", sample("accelerate_fsdp2.yaml")), ("training-arguments", args))
    assert answer["request"]["training"]["precision"] == "bf16-fp32-master"
    assert answer["request"]["training"]["micro_batch_size"] == 2
    assert "off here" in ignored(answer)["bf16"]
    # A Trainer that asks for fp16 wins over accelerate's bf16 (TrainingArguments sets the mixed precision).
    answer = merged(("accelerate", sample("accelerate_multi_gpu.yaml").replace("fp16", "bf16")),
                    ("training-arguments", {"fp16": True}))
    assert answer["request"]["training"]["precision"] == "autocast-fp16"
    assert "overridden by files[1] fp16" in ignored(answer)["mixed_precision"]


def test_accelerate_process_count_must_split_into_model_parallel_groups():
    text = sample("accelerate_deepspeed.yaml").replace("num_processes: 8", "num_processes: 6")
    error = refused("", "", files=[("accelerate", text), ("deepspeed", {"tensor_parallel": {"autotp_size": 4},
                                                                        "train_micro_batch_size_per_gpu": 1})])
    assert error.field == "files.0.text.num_processes"


@pytest.mark.parametrize("text, field", [
    ("mixed_precision: bf16\n", "text.distributed_type"),
    ("distributed_type: SUPERCOMPUTER\n", "text.distributed_type"),
    ("distributed_type: FSDP\nnum_processes: two\n", "text.num_processes"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_reshard_after_forward: SOMETIMES\n",
     "text.fsdp_config.fsdp_reshard_after_forward"),
    ("distributed_type: FSDP\nmixed_precision: bf32\n", "text.mixed_precision"),
])
def test_accelerate_bad_values(text, field):
    assert refused("accelerate", text).field == field


def test_axolotl_full_fine_tune_with_bundled_deepspeed():
    answer = imported("axolotl", sample("axolotl_fft_zero3.yaml"))
    request = answer["request"]
    assert request["model"] == {"preset": "llama-3-8b"}
    assert request["training"]["seq_len"] == 8192
    assert (request["training"]["micro_batch_size"], request["training"]["gradient_accumulation_steps"]) == (1, 8)
    assert request["training"]["optimizer"] == "paged-adamw-8bit"
    assert request["training"]["attention"] == "flash"
    assert request["training"]["activation_checkpointing"] == "full"
    assert request["parallelism"]["zero_stage"] == 3  # from the bundled file's name, not opened
    assert request["training"]["precision"] == "bf16-fp32-master"  # bf16 'auto' on, DeepSpeed's fp32 master
    assert "finetuning" not in request
    assert any("zero3_bf16.json" in why for _, why in assumed(answer)["parallelism.zero_stage"])


def test_axolotl_qlora():
    answer = imported("axolotl", sample("axolotl_qlora.yaml"))
    request = answer["request"]
    # A mirror of Llama 3 8B Instruct matches the preset stored under Meta's Hub id by its name.
    assert request["model"] == {"preset": "meta-llama/Meta-Llama-3-8B-Instruct"}
    assert request["finetuning"] == {"method": "qlora", "rank": 32, "target_modules": ["all-linear"], "dropout": 0.05,
                                     "modules_to_save": ["embed_tokens", "lm_head"], "quantization": "nf4-double"}
    # Weights loaded in bf16 with no DeepSpeed or FSDP: no fp32 copy anywhere.
    assert request["training"]["precision"] == "bf16"
    assert "lora_alpha" in ignored(answer)
    assert understood(answer)["adapter"] == ["finetuning.method"]


def test_axolotl_lora_over_an_int8_base_and_plain_lora():
    text = "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nload_in_8bit: true\nlora_r: 8\n" \
           "lora_target_modules:\n  - q_proj\n  - v_proj\nbf16: true\n"
    finetuning = imported("axolotl", text)["request"]["finetuning"]
    assert finetuning["method"] == "qlora" and finetuning["quantization"] == "int8"
    finetuning = imported("axolotl", text.replace("load_in_8bit: true", "load_in_8bit: false"))["request"]["finetuning"]
    assert finetuning == {"method": "lora", "rank": 8, "target_modules": ["q_proj", "v_proj"], "dropout": 0.0}
    # A string goes to peft's LoraConfig as it is: a regular expression (axolotl's _build_peft_lora_config).
    text = text.replace("load_in_8bit: true", "load_in_8bit: false").replace(
        "lora_target_modules:\n  - q_proj\n  - v_proj", "lora_target_modules: '.*\\.(q_proj|v_proj)'")
    assert imported("axolotl", text)["request"]["finetuning"]["target_modules"] == r".*\.(q_proj|v_proj)"


def test_axolotl_fsdp_and_attention_switches():
    text = """base_model: meta-llama/Meta-Llama-3-8B
sequence_len: 2048
bf16: true
sdp_attention: true
fsdp:
  - full_shard
  - auto_wrap
fsdp_config:
  fsdp_offload_params: true
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
"""
    answer = imported("axolotl", text)
    request = answer["request"]
    assert request["parallelism"]["zero_stage"] == 3
    assert request["training"]["attention"] == "sdpa"
    assert request["training"]["precision"] == "bf16-fp32-master"
    assert request["parallelism"]["offload"] == "optimizer+parameters"  # FSDP's CPUOffload(offload_params=True)


def test_axolotl_with_its_deepspeed_file_and_no_bf16():
    text = sample("axolotl_fft_zero3.yaml").replace("bf16: auto", "bf16: false")
    answer = merged(("axolotl", text), ("deepspeed", sample("ds_config_zero3.json")))
    assert answer["request"]["training"]["precision"] == "fp32"  # bf16 "auto" <- false
    assert answer["request"]["parallelism"]["zero_stage"] == 3


@pytest.mark.parametrize("text, field", [
    ("base_model: x\nmicro_batch_size: 0\n", "text.micro_batch_size"),
    ("base_model: x\nadapter: qlora\nlora_target_linear: true\n", "text.load_in_4bit"),
    ("base_model: x\nadapter: lora\n", "text.lora_target_modules"),
    ("base_model: x\nadapter: dora\n", "text.adapter"),
    ("base_model: x\nbf16: maybe\n", "text.bf16"),
    ("base_model: x\nflash_attention: true\nsdp_attention: true\n", "text.sdp_attention"),
    ("base_model: x\ndeepspeed: zero2.json\nfsdp_config:\n  fsdp_version: 2\n", "text.fsdp_config"),
])
def test_axolotl_bad_values(text, field):
    assert refused("axolotl", text).field == field


def test_a_base_model_without_a_preset_is_reported_not_fetched():
    answer = imported("axolotl", "base_model: someone/their-7b\nsequence_len: 1024\n")
    assert "never fetched" in ignored(answer)["base_model"]
    assert answer["request"]["model"] == {"preset": "llama-3-8b"}
    assert "model.preset" in assumed(answer)


def test_axolotl_activation_offloading_on_a_full_fine_tune():
    # axolotl checkpoints each layer and offloads with TRL's OffloadActivations (loaders/model.py,
    # _apply_activation_checkpointing): the layers' inputs in host memory
    text = "base_model: meta-llama/Meta-Llama-3-8B\nactivation_offloading: true\ngradient_checkpointing: false\n"
    answer = imported("axolotl", text)
    training = answer["request"]["training"]
    assert (training["activation_offload"], training["activation_checkpointing"]) == ("torchtune", "full")
    assert sorted(understood(answer)["activation_offloading"]) == ["training.activation_checkpointing",
                                                                   "training.activation_offload"]
    assert "gradient_checkpointing" in ignored(answer)


def test_axolotl_activation_offloading_with_an_adapter_is_left_aside():
    # with an adapter axolotl offloads without recomputation, which is not modelled
    text = "base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\nlora_target_linear: true\nactivation_offloading: true\n"
    answer = imported("axolotl", text)
    assert "activation_offload" not in answer["request"]["training"]
    assert "not modelled" in ignored(answer)["activation_offloading"]
