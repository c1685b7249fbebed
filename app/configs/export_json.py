"""The JSON files an estimate body is written as: DeepSpeed's config and TrainingArguments' (whose deepspeed section
is a DeepSpeed config with "auto" where the Trainer fills it in). DeepSpeed's sections are shared with the YAML
writers, whose runs may name a DeepSpeed config too."""

from __future__ import annotations

import json
from typing import Any, Final

from app import core

LR_NOTE: Final = "learning rate, schedule and weight decay are placeholders: trainmem does not model them"
# Every tensor in bf16, master weights and optimizer state too: DeepSpeed's bf16 section with both bf16 switches.
ALL_BF16: Final = {"weights": "bf16", "gradients": "bf16", "master_weights": "bf16", "optimizer_states": "bf16",
                   "activations": "bf16"}
AUTOCAST_DTYPES: Final = {"autocast-bf16": "bfloat16", "autocast-fp16": "float16"}


def ds_precision(precision: Any, zero: int, *, auto: bool) -> dict[str, Any] | None:
    """DeepSpeed's sections for a precision; "auto" switches where the Trainer or axolotl fills them. None: no form."""
    if isinstance(precision, dict):
        if precision == ALL_BF16 and zero >= 1:
            return {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}}
        return None
    if precision in ("autocast-bf16", "autocast-fp16"):
        return None if auto else {"torch_autocast": {"enabled": True, "dtype": AUTOCAST_DTYPES[precision]}}
    on: Any = "auto" if auto else True
    sections = {"bf16-fp32-master": {"bf16": {"enabled": on}}, "fp16-fp32-master": {"fp16": {"enabled": on}},
                "fp32": {}}
    if zero == 1:
        sections["megatron-bf16"] = {"bf16": {"enabled": on}, "data_types": {"grad_accum_dtype": "fp32"}}
    return sections.get(precision)


def needs_engine(precision: Any, p: dict[str, Any]) -> bool:
    """Whether a setup needs DeepSpeed under the Trainer or axolotl: ZeRO, AutoTP, offload, or a master copy."""
    return p["zero_stage"] > 0 or p["tensor"] > 1 or p["offload"] != "none" or precision in (
        "bf16-fp32-master", "fp16-fp32-master", "megatron-bf16") or isinstance(precision, dict)


def ds_core(setup: dict[str, Any], *, auto: bool) -> dict[str, Any]:
    """The batch, ZeRO and tensor-parallel part of a DeepSpeed config."""
    t, p = setup["training"], setup["parallelism"]
    micro, accum, data = t["micro_batch_size"], t["gradient_accumulation_steps"], p["data"]
    config: dict[str, Any] = {
        "train_batch_size": micro * accum * data,
        "train_micro_batch_size_per_gpu": "auto" if auto else micro,
        "gradient_accumulation_steps": "auto" if auto else accum,
        "zero_optimization": {"stage": p["zero_stage"]},
    }
    bucket = p.get("reduce_bucket_size", core.DEEPSPEED_REDUCE_BUCKET_SIZE)
    if p["zero_stage"] >= 1 and bucket != core.DEEPSPEED_REDUCE_BUCKET_SIZE:
        config["zero_optimization"]["reduce_bucket_size"] = bucket
    if p["offload"] != "none":
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if p["offload"] == "optimizer+parameters":
            config["zero_optimization"]["offload_param"] = {"device": "cpu", "pin_memory": True}
    if p["tensor"] > 1:
        config["tensor_parallel"] = {"autotp_size": p["tensor"]}
    return config


TRAINER_OPTIM: Final = {("adamw", "foreach"): "adamw_torch", ("adamw", "fused"): "adamw_torch_fused",
                         ("adamw", "for-loop"): "adamw_torch", ("adam", "foreach"): "adamw_torch",
                         ("adam", "fused"): "adamw_torch_fused", ("adam", "for-loop"): "adamw_torch"}


def trainer_optim(t: dict[str, Any]) -> tuple[str, str | None]:
    """The Trainer's (and axolotl's) optim name and optim_args for a setup's optimizer (nearest where none is it)."""
    optimizer, implementation = t["optimizer"], t["optimizer_implementation"]
    if optimizer in ("adam", "adamw"):
        return TRAINER_OPTIM[(optimizer, implementation)], None
    return {"sgd": ("sgd", None), "sgd-momentum": ("sgd", "momentum=0.9"), "adafactor": ("adafactor", None),
            "adamw-8bit": ("adamw_bnb_8bit", None), "paged-adamw-8bit": ("paged_adamw_8bit", None),
            "paged-adamw-32bit": ("paged_adamw_32bit", None), "lion": ("lion_32bit", None)}[optimizer]



# --- DeepSpeed -------------------------------------------------------------------------------------------

def write_deepspeed(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    config = ds_core(setup, auto=False)
    sections = ds_precision(t["precision"], p["zero_stage"], auto=False)
    if sections is None:
        sections = {"bf16": {"enabled": True}} if half_dtype(t["precision"]) == "bf16" else \
            {"fp16": {"enabled": True}} if half_dtype(t["precision"]) == "fp16" else {}
    config.update(sections)
    optimizer = _ds_optimizer(t)
    if optimizer is not None:
        config["optimizer"] = optimizer
        if optimizer["type"] in ("SGD", "Adafactor") and p["zero_stage"] > 0:
            config["zero_allow_untested_optimizer"] = True
            if p["offload"] != "none":
                config["zero_force_ds_cpu_optimizer"] = False  # a torch.optim optimizer on the offloaded state
    config["gradient_clipping"] = 1.0
    notes.append(f"train_batch_size is {t['micro_batch_size']} × {t['gradient_accumulation_steps']} × {p['data']} "
                 f"data-parallel GPUs: launch on {p['data'] * p['tensor'] * p['pipeline']} GPUs "
                 f"(deepspeed --num_gpus {p['data'] * p['tensor'] * p['pipeline']} ...)")
    notes.append("the model, the data and the sequence length are the training script's")
    if optimizer is not None:
        notes.append("optimizer.params (lr, weight_decay) are placeholders: trainmem does not model them")
    return json.dumps(config, indent=2) + "\n"


def half_dtype(precision: Any) -> str | None:
    if isinstance(precision, str):
        return "bf16" if "bf16" in precision else "fp16" if "fp16" in precision else None
    return precision.get("weights") if precision.get("weights") in ("bf16", "fp16") else None


def _ds_optimizer(t: dict[str, Any]) -> dict[str, Any] | None:
    optimizer, implementation = t["optimizer"], t["optimizer_implementation"]
    if optimizer in ("adam", "adamw"):
        return _ds_adam(optimizer, implementation)
    if optimizer in ("sgd", "sgd-momentum"):
        return _ds_sgd(optimizer, implementation)
    if optimizer == "adafactor":
        params: dict[str, Any]
        params = {"lr": 1e-2}
        if implementation == "for-loop":
            params["foreach"] = False
        return {"type": "Adafactor", "params": params}
    if optimizer == "lion":
        return {"type": "Lion", "params": {"lr": 1e-5, "weight_decay": 0.1}}
    return None  # 8-bit AdamW: the client's optimizer


def _ds_adam(optimizer: str, implementation: str) -> dict[str, Any]:
    """DeepSpeed's FusedAdam (adam_w_mode false for Adam), or torch.optim's through torch_adam."""
    params: dict[str, Any] = {"lr": 1e-4, "weight_decay": 0.0 if optimizer == "adam" else 0.01}
    if optimizer == "adam":
        params["adam_w_mode"] = False
    if implementation != "fused":
        params["torch_adam"] = True
        if implementation == "for-loop":
            params["foreach"] = False
    return {"type": "AdamW" if optimizer == "adamw" else "Adam", "params": params}


def _ds_sgd(optimizer: str, implementation: str) -> dict[str, Any]:
    """torch.optim's SGD, with momentum for sgd-momentum, in the implementation asked for."""
    params: dict[str, Any] = {"lr": 1e-3}
    if optimizer == "sgd-momentum":
        params["momentum"] = 0.9
    if implementation == "fused":
        params["fused"] = True
    elif implementation == "for-loop":
        params["foreach"] = False
    return {"type": "SGD", "params": params}


# --- TrainingArguments -------------------------------------------------------------------------------------

def write_trainer(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    precision = t["precision"]
    optim, optim_args = trainer_optim(t)
    args: dict[str, Any] = {
        "output_dir": "output",
        "per_device_train_batch_size": t["micro_batch_size"],
        "gradient_accumulation_steps": t["gradient_accumulation_steps"],
        "gradient_checkpointing": t["activation_checkpointing"] == "full",
        "bf16": False,
        "fp16": False,
        "optim": optim,
    }
    if t["activation_offload"] == "checkpoints-to-host":
        args["activation_checkpointing_kwargs"] = {"offload": True}
        notes.append("activation_checkpointing_kwargs' offload is read by transformers 5.24's Trainer; releases "
                     "before 5 have no such argument")
    if optim_args:
        args["optim_args"] = optim_args
    if needs_engine(precision, p):
        args["deepspeed"] = _trainer_deepspeed(setup, args, notes)
    else:
        half = half_dtype(precision)
        if half in ("bf16", "fp16"):
            args[half] = True
    args.update({"learning_rate": 2e-5, "lr_scheduler_type": "cosine", "warmup_steps": 100, "weight_decay": 0.0,
                 "num_train_epochs": 1, "logging_steps": 10, "save_strategy": "no", "report_to": "none"})
    notes.append("learning_rate, lr_scheduler_type, warmup_steps and weight_decay are placeholders: " + LR_NOTE)
    notes.append("the model, its attn_implementation and the sequence length are set where the script loads the "
                 "model and tokenizes the data")
    if t["activation_checkpointing"] == "full":
        notes.append("transformers 5 calls gradient_checkpointing activation_checkpointing; the old name still "
                     "works until v6")
    return json.dumps(args, indent=2) + "\n"


def _trainer_deepspeed(setup: dict[str, Any], args: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The Trainer's deepspeed section; the Trainer's bf16/fp16 turned on where the section leaves them "auto"."""
    p = setup["parallelism"]
    sections = _trainer_sections(setup["training"]["precision"], p["zero_stage"])
    ds = ds_core(setup, auto=True)
    ds.update(sections)
    for half in ("bf16", "fp16"):
        if half in sections and sections[half]["enabled"] == "auto":
            args[half] = True
    ds["gradient_clipping"] = "auto"
    notes.append(f"the deepspeed section's train_batch_size counts {p['data']} data-parallel GPUs: the Trainer "
                 f"checks it against the world size, so launch on {p['data'] * p['tensor']} GPUs")
    return ds


def _trainer_sections(precision: Any, zero: int) -> dict[str, Any]:
    """The deepspeed section's precision: "auto" switches the Trainer fills, torch_autocast with the Trainer's
    bf16 off, or bf16 "auto" for the nearest form."""
    sections = ds_precision(precision, zero, auto=True)
    if sections is None and precision in ("autocast-bf16", "autocast-fp16"):
        sections = ds_precision(precision, zero, auto=False)  # torch_autocast, Trainer bf16 off
    if sections is None:
        sections = {"bf16": {"enabled": "auto"}} if half_dtype(precision) == "bf16" else {}
    return sections
