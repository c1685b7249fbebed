"""The YAML files an estimate body is written as: accelerate's config and axolotl's, through a small emitter whose
plain scalars read back as the same values."""

from __future__ import annotations

import re
from typing import Any, Final

from app.configs import yaml as yaml_reader
from app.configs.common import preset_repo
from app.configs.export_json import ds_core, ds_precision, half_dtype, needs_engine, trainer_optim
from app.core.lora_targets import ALL_LINEAR

# --- YAML writing ------------------------------------------------------------------------------------------

_SAFE_PLAIN: Final = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./+=-]*$")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    text = str(value)
    if _SAFE_PLAIN.match(text) and yaml_reader.resolve_plain(text) == text:
        return text
    return "'" + text.replace("'", "''") + "'"


def _float(value: float) -> str:
    """A float as YAML 1.1 reads back as a float: an exponent needs a dot in the mantissa and a sign."""
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent if exponent.startswith(('-', '+')) else '+' + exponent}"
    return text


def _emit(lines: list[str], data: dict[str, Any], indent: int = 0, comments: dict[str, str] | None = None) -> None:
    pad = " " * indent
    for key, value in data.items():
        comment = f"  # {comments[key]}" if comments and key in comments else ""
        if isinstance(value, dict):
            if not value:
                lines.append(f"{pad}{key}: {{}}{comment}")
                continue
            lines.append(f"{pad}{key}:{comment}")
            _emit(lines, value, indent + 2)
        elif isinstance(value, list):
            if not value:
                lines.append(f"{pad}{key}: []{comment}")
                continue
            lines.append(f"{pad}{key}:{comment}")
            _emit_items(lines, value, pad)
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}{comment}")


def _emit_items(lines: list[str], items: list[Any], pad: str) -> None:
    """A list's items, a mapping item's keys under its dash."""
    for item in items:
        if isinstance(item, dict):
            first = True
            for k, v in item.items():
                prefix = f"{pad}  - " if first else f"{pad}    "
                lines.append(f"{prefix}{k}: {_scalar(v)}")
                first = False
        else:
            lines.append(f"{pad}  - {_scalar(item)}")


# --- accelerate --------------------------------------------------------------------------------------------

def write_accelerate(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    precision = t["precision"]
    world = p["data"] * p["tensor"] * p["pipeline"]
    half = half_dtype(precision)
    mixed = half or "no"
    config: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False}
    comments: dict[str, str] = {}
    config.update(_accelerate_engine(t, p, world))
    config["downcast_bf16"] = "no"
    config["enable_cpu_affinity"] = False
    config["machine_rank"] = 0
    config["main_training_function"] = "main"
    config["mixed_precision"] = mixed
    per_node = min(p["gpus_per_node"], world)
    config["num_machines"] = world // per_node if world % per_node == 0 else 1
    comments["num_machines"] = f"{per_node} GPUs a machine; num_processes counts every machine's"
    config["num_processes"] = world
    comments["num_processes"] = (f"one per GPU: data {p['data']} × tensor {p['tensor']} × pipeline "
                                 f"{p['pipeline']}")
    config["rdzv_backend"] = "static"
    config["same_network"] = True
    config["tpu_env"] = []
    config["tpu_use_cluster"] = False
    config["tpu_use_sudo"] = False
    config["use_cpu"] = False
    lines = ["# accelerate launch --config_file accelerate_config.yaml train.py",
             "# Written by trainmem. The batch size, sequence length, optimizer and learning rate are your script's;",
             "# so are the model and the data.",
             f"# trainmem's setup: micro-batch {t['micro_batch_size']}, sequence length {t['seq_len']}, optimizer "
             f"{t['optimizer']} ({t['optimizer_implementation']}), gradient accumulation "
             f"{t['gradient_accumulation_steps']}."]
    _emit(lines, config, comments=comments)
    notes.append("the batch size, sequence length and optimizer are the training script's")
    return "\n".join(lines) + "\n"


def _accelerate_engine(t: dict[str, Any], p: dict[str, Any], world: int) -> dict[str, Any]:
    """distributed_type and its section: Megatron-LM, DeepSpeed, or plain data parallelism."""
    if t["implementation"] == "megatron":
        return {"distributed_type": "MEGATRON_LM", "megatron_lm_config": {
            "megatron_lm_tp_degree": p["tensor"], "megatron_lm_pp_degree": p["pipeline"],
            "megatron_lm_num_micro_batches": t["gradient_accumulation_steps"],
            "megatron_lm_sequence_parallelism": p["sequence_parallel"],
            "megatron_lm_recompute_activations": t["activation_checkpointing"] == "selective",
            "megatron_lm_use_distributed_optimizer": p["zero_stage"] == 1,
            "megatron_lm_gradient_clipping": 1.0,
        }}
    if p["zero_stage"] > 0 or p["offload"] != "none" or t["precision"] in ("bf16-fp32-master", "fp16-fp32-master"):
        deepspeed_config = {
            "gradient_accumulation_steps": t["gradient_accumulation_steps"], "gradient_clipping": 1.0,
            "offload_optimizer_device": "cpu" if p["offload"] != "none" else "none",
            "offload_param_device": "cpu" if p["offload"] == "optimizer+parameters" else "none",
            "zero3_init_flag": p["zero_stage"] == 3, "zero_stage": p["zero_stage"],
        }
        if p["zero_stage"] == 3:
            deepspeed_config["zero3_save_16bit_model"] = True
        return {"distributed_type": "DEEPSPEED", "deepspeed_config": deepspeed_config}
    return {"distributed_type": "MULTI_GPU" if world > 1 else "NO"}


# --- axolotl -----------------------------------------------------------------------------------------------

_AXOLOTL_ATTENTION: Final = {"sdpa": "sdpa", "flash": "flash_attention_2", "eager": "eager"}


def _hub_id(setup: dict[str, Any]) -> str | None:
    model = setup["model"]
    if set(model) == {"preset"}:
        return preset_repo(model["preset"])
    return None


def write_axolotl(setup: dict[str, Any], notes: list[str]) -> str:
    lines = ["# axolotl train axolotl.yaml", "# Written by trainmem: the datasets, the learning rate and the output "
             "directory are placeholders to fill in."]
    config: dict[str, Any] = {}
    comments: dict[str, str] = {}
    _axolotl_run(setup, config, comments)
    _axolotl_precision(setup, config, comments)
    _axolotl_adapter(setup["finetuning"], config, comments)
    config["logging_steps"] = 10
    config["saves_per_epoch"] = 1
    _emit(lines, config, comments=comments)
    notes.append("datasets, learning_rate and output_dir are placeholders: trainmem does not model them")
    return "\n".join(lines) + "\n"


def _axolotl_run(setup: dict[str, Any], config: dict[str, Any], comments: dict[str, str]) -> None:
    """The model, the data (placeholders), the batch and the optimizer."""
    t = setup["training"]
    model_id = _hub_id(setup)
    config["base_model"] = model_id or "your-org/your-model"
    if not model_id:
        comments["base_model"] = "the model's Hugging Face id or local path (trainmem had no preset id for it)"
    config["datasets"] = [{"path": "your-org/your-dataset", "type": "alpaca"}]
    comments["datasets"] = "your data: trainmem does not read it"
    config["output_dir"] = "./outputs/out"
    config["sequence_len"] = t["seq_len"]
    config["micro_batch_size"] = t["micro_batch_size"]
    config["gradient_accumulation_steps"] = t["gradient_accumulation_steps"]
    config["num_epochs"] = 1
    optim, optim_args = trainer_optim(t)
    config["optimizer"] = optim
    if optim_args:
        config["optim_args"] = optim_args
    config["lr_scheduler"] = "cosine"
    config["learning_rate"] = 2.0e-5
    comments["learning_rate"] = "a placeholder: trainmem does not model the learning rate"


def _axolotl_precision(setup: dict[str, Any], config: dict[str, Any], comments: dict[str, str]) -> None:
    """The half dtype, recomputation, the attention kernel, and the DeepSpeed section when an engine is needed."""
    t, p = setup["training"], setup["parallelism"]
    precision = t["precision"]
    half = half_dtype(precision)
    config["bf16"] = half == "bf16"
    config["fp16"] = half == "fp16"
    config["tf32"] = False
    config["gradient_checkpointing"] = t["activation_checkpointing"] == "full"
    if t["activation_offload"] == "torchtune" and setup["finetuning"] is None:  # with an adapter: no recomputation
        config["activation_offloading"] = True
        comments["activation_offloading"] = "TRL's OffloadActivations; axolotl checkpoints each layer itself"
    if t["attention"] in _AXOLOTL_ATTENTION:
        config["attn_implementation"] = _AXOLOTL_ATTENTION[t["attention"]]
    if p["tensor"] > 1:
        config["tensor_parallel_size"] = p["tensor"]
        comments["tensor_parallel_size"] = "DeepSpeed AutoTP"
    if needs_engine(precision, p):
        config["deepspeed"] = _axolotl_deepspeed(setup, half)
        comments["deepspeed"] = (f"train_batch_size counts {p['data']} data-parallel GPUs: launch on "
                                 f"{p['data'] * p['tensor']}")


def _axolotl_deepspeed(setup: dict[str, Any], half: str | None) -> dict[str, Any]:
    """axolotl's deepspeed section: bf16/fp16 "auto" where axolotl fills them, no AutoTP (axolotl sets it)."""
    p = setup["parallelism"]
    ds = ds_core(setup, auto=True)
    ds.pop("tensor_parallel", None)  # axolotl passes tensor_parallel_size to AutoTP itself
    sections = ds_precision(setup["training"]["precision"], p["zero_stage"], auto=True)
    if sections is None:
        sections = {half: {"enabled": "auto"}} if half in ("bf16", "fp16") else {}
    ds.update(sections)
    ds["gradient_clipping"] = "auto"
    return ds


def _axolotl_adapter(finetuning: dict[str, Any] | None, config: dict[str, Any], comments: dict[str, str]) -> None:
    """LoRA or QLoRA (8-bit QLoRA is axolotl's lora over an 8-bit base); other finetuning writes nothing."""
    if not finetuning or finetuning["method"] not in ("lora", "qlora"):
        return
    int8 = finetuning["method"] == "qlora" and finetuning["quantization"] == "int8"
    config["adapter"] = "lora" if finetuning["method"] == "lora" or int8 else "qlora"
    config["load_in_8bit"] = int8
    config["load_in_4bit"] = finetuning["method"] == "qlora" and not int8
    if config["load_in_4bit"] and finetuning["quantization"] == "nf4":
        config["bnb_config_kwargs"] = {"bnb_4bit_use_double_quant": False}
    config["lora_r"] = finetuning["rank"]
    config["lora_alpha"] = 2 * finetuning["rank"]
    comments["lora_alpha"] = "the adapters' scale: a placeholder, trainmem does not model it"
    config["lora_dropout"] = finetuning["dropout"]
    _axolotl_modules(finetuning, config)


def _axolotl_modules(finetuning: dict[str, Any], config: dict[str, Any]) -> None:
    """The adapters' target modules (all-linear as lora_target_linear) and the modules saved whole."""
    targets = finetuning["target_modules"]
    if isinstance(targets, str):  # all-linear or a regular expression: axolotl hands peft a string as it is
        config["lora_target_modules"] = targets
    elif ALL_LINEAR in targets:
        config["lora_target_linear"] = True
    else:
        config["lora_target_modules"] = list(targets)
    if finetuning["modules_to_save"]:
        config["lora_modules_to_save"] = list(finetuning["modules_to_save"])
