"""An estimate body written as a framework's config: DeepSpeed's JSON, TrainingArguments' JSON, accelerate's and
axolotl's YAML.

Each writer puts what the framework can say about the setup in the keys that framework reads (the same
sources as the readers). What the file cannot carry (a sequence length in a DeepSpeed config, pure bf16 in
DeepSpeed, which always keeps an fp32 master copy) is listed in ``unexpressed`` with the reason: the answer
reads its own file back with the importer and lists every field that does not come back as it went in, so
the list is exactly what the file loses. Things every run needs that trainmem does not model (the data, the
learning rate, the model's path) are comments in YAML and ``notes`` beside JSON, which has no comments.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Final

from app import core, wire
from app.configs import yaml as yaml_reader
from app.configs.common import json_safe, preset_repo
from app.configs.merge import PARALLELISM_FIELDS, TRAINING_FIELDS, defaults
from app.core import DomainError
from app.core.finetuning import Finetuning
from app.core.optimizers import OPTIMIZER_INFO

EXPORT_KINDS: Final = ("deepspeed", "training-arguments", "accelerate", "axolotl")
FILENAMES: Final = {"deepspeed": "ds_config.json", "training-arguments": "training_args.json",
                    "accelerate": "accelerate_config.yaml", "axolotl": "axolotl.yaml"}
LR_NOTE: Final = "learning rate, schedule and weight decay are placeholders: trainmem does not model them"

# Why a field does not come back from a kind's file.
_WHY: Final[dict[str, dict[str, str]]] = {
    "deepspeed": {
        "model": "a DeepSpeed config does not name the model: the training script loads it",
        "training.seq_len": "a DeepSpeed config does not say the sequence length: the data pipeline does",
        "training.activation_checkpointing": "DeepSpeed's activation_checkpointing section only configures "
                                             "deepspeed.checkpointing; a Hugging Face model recomputes with "
                                             "model.gradient_checkpointing_enable()",
        "training.attention": "the attention kernel is the model's (attn_implementation when it is loaded)",
        "training.implementation": "whose layers run the model is the script's choice",
        "training.loop": "how the loop holds the model's output is the script's",
        "parallelism.pipeline": "DeepSpeed's pipeline stages are set in code, PipelineModule(num_stages=...)",
        "parallelism.sequence_parallel": "Megatron-style sequence parallelism is not a DeepSpeed setting",
        "training.precision": "DeepSpeed keeps an fp32 master copy with bf16 or fp16 (and accumulates in fp32 "
                              "only with ZeRO stage 1): this precision has no DeepSpeed form",
        "training.optimizer": "not one of DeepSpeed's optimizers nor a torch.optim class: pass it to "
                              "deepspeed.initialize(optimizer=...) as the client optimizer",
        "training.optimizer_implementation": "this implementation has no DeepSpeed form",
        "training.adafactor_momentum": "torch.optim.Adafactor keeps no first moment",
        "finetuning": "adapters and frozen layers are the script's (peft's get_peft_model, requires_grad)",
        "parallelism.gpus_per_node": "a DeepSpeed config does not say how many GPUs share a host: the hostfile does",
        "training.framework": "DeepSpeed runs this file: from ZeRO stage 1 on its memory follows DeepSpeed's own "
                              "convention, at stage 0 plain data parallelism's",
    },
    "training-arguments": {
        "model": "TrainingArguments do not name the model: from_pretrained does",
        "training.seq_len": "the sequence length is the tokenizer's or the data collator's (max_length)",
        "training.attention": "the attention kernel is the model's: from_pretrained(..., attn_implementation=...)",
        "training.implementation": "the Trainer runs Hugging Face modules",
        "training.loop": "the Trainer's loss step keeps only the loss (hf-trainer)",
        "training.activation_checkpointing": "the Trainer recomputes whole layers (gradient_checkpointing) or "
                                             "nothing",
        "parallelism.pipeline": "the Trainer has no pipeline parallelism",
        "parallelism.sequence_parallel": "the Trainer has no Megatron-style sequence parallelism",
        "parallelism.data": "the number of GPUs is the launcher's (torchrun --nproc_per_node); it is in the "
                            "DeepSpeed section's train_batch_size when there is one",
        "training.precision": "the Trainer's bf16/fp16 is autocast, and DeepSpeed keeps an fp32 master copy: for "
                              "pure half precision load the model in that dtype (from_pretrained(..., "
                              "dtype=torch.bfloat16)) instead",
        "training.optimizer": "not one of the Trainer's optim names (transformers' OptimizerNames)",
        "training.optimizer_implementation": "the Trainer's optim name fixes the implementation",
        "training.adafactor_momentum": "the Trainer's adafactor passes no beta1",
        "parallelism.tensor": "tensor parallelism goes in the DeepSpeed section (AutoTP)",
        "finetuning": "adapters and frozen layers are the script's (peft's get_peft_model, requires_grad)",
        "parallelism.gpus_per_node": "the Trainer's arguments do not say how many GPUs share a host",
        "training.framework": "the engine the Trainer's file names sets the convention: DeepSpeed's from ZeRO stage "
                              "1 on, else pytorch's (this file writes no FSDP section, so not fsdp2's)",
    },
    "accelerate": {
        "model": "accelerate's config does not name the model",
        "training.micro_batch_size": "the batch size is the script's data loader's",
        "training.seq_len": "the sequence length is the script's",
        "training.optimizer": "the optimizer is the script's",
        "training.optimizer_implementation": "the optimizer is the script's",
        "training.adafactor_momentum": "the optimizer is the script's",
        "training.attention": "the attention kernel is the model's",
        "training.loop": "the training loop is the script's",
        "training.gradient_accumulation_steps": "without DeepSpeed, accumulation is Accelerator("
                                                "gradient_accumulation_steps=...) in the script",
        "training.activation_checkpointing": "accelerate's config recomputes only under FSDP "
                                             "(fsdp_activation_checkpointing) or Megatron-LM",
        "training.precision": "accelerate's mixed_precision is autocast without an engine, and DeepSpeed or FSDP "
                              "keep an fp32 master copy: this precision has no accelerate form",
        "training.implementation": "Megatron-LM runs through accelerate's MEGATRON_LM plugin only",
        "parallelism.tensor": "tensor parallelism needs the MEGATRON_LM plugin or FSDP2's parallelism_config",
        "parallelism.pipeline": "pipeline parallelism needs the MEGATRON_LM plugin",
        "parallelism.sequence_parallel": "sequence parallelism needs the MEGATRON_LM plugin",
        "parallelism.zero_stage": "this sharding has no form under the chosen plugin",
        "finetuning": "adapters and frozen layers are the script's (peft's get_peft_model, requires_grad)",
        "parallelism.offload": "offload goes through accelerate's DeepSpeed plugin, not the Megatron-LM one",
        "parallelism.gpus_per_node": "num_processes does not split evenly into machines of that many GPUs",
        "training.framework": "the plugin sets the convention: DeepSpeed's from ZeRO stage 1 on, Megatron-LM's with "
                              "MEGATRON_LM, else pytorch's (this file writes no FSDP section, so not fsdp2's)",
    },
    "axolotl": {
        "model": "base_model is a Hugging Face id or a path: give your model's (no preset matches this model)",
        "training.precision": "axolotl loads the weights in the run's half dtype: bf16 alone is pure bf16, "
                              "DeepSpeed adds an fp32 master copy; autocast over fp32 weights has no axolotl form",
        "training.implementation": "axolotl runs Hugging Face modules",
        "training.loop": "axolotl trains with the Trainer, which keeps only the loss (hf-trainer)",
        "training.activation_checkpointing": "axolotl recomputes whole layers (gradient_checkpointing) or nothing",
        "training.optimizer": "not one of axolotl's optimizer names",
        "training.optimizer_implementation": "axolotl's optimizer name fixes the implementation",
        "training.adafactor_momentum": "axolotl's adafactor passes no beta1",
        "parallelism.pipeline": "axolotl has no pipeline parallelism",
        "parallelism.sequence_parallel": "axolotl has no Megatron-style sequence parallelism",
        "parallelism.data": "the number of GPUs is the launcher's; it is in the DeepSpeed section's "
                            "train_batch_size when there is one",
        "training.attention": "this attention has no axolotl form",
        "finetuning": "axolotl freezes layers with unfrozen_parameters patterns, which trainmem does not write; "
                      "adapters other than lora and qlora have no trainmem form",
        "parallelism.gpus_per_node": "axolotl's config does not say how many GPUs share a host",
        "training.framework": "the engine the file names sets the convention: DeepSpeed's from ZeRO stage 1 on, else "
                              "pytorch's (this file writes no FSDP section, so not fsdp2's)",
    },
}
_GENERIC_WHY: Final = "the file does not carry it"
# Set in the training script for every kind of file written here.
_SCRIPT_WHY: Final = {
    "parallelism.expert": "expert parallelism is the model code's (DeepSpeed's deepspeed.moe.layer.MoE(ep_size=...), "
                          "Megatron-LM's --expert-model-parallel-size, torchtitan's expert_parallel_degree); none of "
                          "these files sets it for a Hugging Face model",
    "parallelism.expert_tensor": "expert tensor parallelism is Megatron-LM's (--expert-tensor-parallel-size); none of "
                                 "these files sets it",
    "parallelism.first_stage_layers": "uneven pipeline stages are Megatron-LM's (--decoder-first-pipeline-num-layers); "
                                      "none of these files sets them",
    "parallelism.last_stage_layers": "uneven pipeline stages are Megatron-LM's (--decoder-last-pipeline-num-layers); "
                                     "none of these files sets them",
    "parallelism.expert_load": "the most-loaded expert GPU's load is an outcome of routing (bounded by a capacity "
                               "factor set in the model code or Megatron-LM's --moe-expert-capacity-factor), not a "
                               "setting of these files",
    "training.allocator": "PyTorch's allocator is set in the environment of the process, not in these files: "
                          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "training.fp8": "torchao's float8 training is applied in the script (convert_to_float8_training, or torchtitan's "
                    "float8 converter); Transformer Engine's recipes by Megatron-LM's own flags (--fp8-format, "
                    "--fp8-recipe), which accelerate's Megatron-LM plugin does not pass on",
}
for _kind_why in _WHY.values():
    for _field, _why in _SCRIPT_WHY.items():
        _kind_why.setdefault(_field, _why)


def export_config(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """`body` as a `kind` config: ``{"kind", "filename", "text", "notes", "unexpressed"}``."""
    if kind not in EXPORT_KINDS:
        raise DomainError("kind", f"must be one of {', '.join(EXPORT_KINDS)}, got {kind!r}")
    setup = complete(body)
    notes: list[str] = []
    text = {"deepspeed": _deepspeed, "training-arguments": _trainer, "accelerate": _accelerate,
            "axolotl": _axolotl}[kind](setup, notes)
    from app.configs import import_config

    back = import_config(kind, text)["request"]
    unexpressed = [{"field": field, "value": json_safe(value), "why": _WHY[kind].get(_why_key(field), _GENERIC_WHY)}
                   for field, value in differences(setup, back)]
    return {"kind": kind, "filename": FILENAMES[kind], "text": text, "notes": notes, "unexpressed": unexpressed}


def _why_key(field: str) -> str:
    return "model" if field.startswith("model") else "finetuning" if field.startswith("finetuning") else field


def complete(body: dict[str, Any]) -> dict[str, Any]:
    """The body with every training and parallelism field, precision as a preset id where its dtypes are one's;
    checked as /estimate checks it."""
    if not isinstance(body, dict):
        raise DomainError("body", "must be an estimate body (an object)")
    model = {k: v for k, v in (body.get("model") or {}).items() if v is not None}
    training = {k: v for k, v in (body.get("training") or {}).items() if v is not None}
    parallelism = {k: v for k, v in (body.get("parallelism") or {}).items() if v is not None}
    wire.job_from({"model": model, "training": training, "parallelism": parallelism,
                   "finetuning": body.get("finetuning"), "gpu": body.get("gpu")}).estimate(reserve=False)
    values = defaults()
    out_training = {name: training.get(name, values[f"training.{name}"]) for name in TRAINING_FIELDS}
    out_training["framework_overhead_bytes"] = training.get("framework_overhead_bytes",
                                                            core.DEFAULT_FRAMEWORK_OVERHEAD_BYTES)
    out_training["allocator"] = training.get("allocator", "default")
    precision = out_training["precision"]
    if isinstance(precision, dict):
        dtypes = {k: precision.get(k) for k in ("weights", "gradients", "master_weights", "optimizer_states",
                                                 "activations")}
        out_training["precision"] = next((p.id for p in core.PRECISION_PRESETS.values()
                                          if _dtypes(p.precision) == dtypes), dtypes)
    return {"model": model, "training": out_training,
            "parallelism": {name: parallelism.get(name, values[f"parallelism.{name}"]) for name in PARALLELISM_FIELDS},
            "finetuning": finetuning_of(body.get("finetuning")), "gpu": body.get("gpu")}


def finetuning_of(section: dict[str, Any] | None) -> dict[str, Any] | None:
    """A finetuning section with its defaults (None for plain full fine-tuning), lists as lists."""
    values = {k: v for k, v in (section or {}).items() if v is not None}
    full = Finetuning()
    out = {field.name: values.get(field.name, getattr(full, field.name)) for field in dataclasses.fields(Finetuning)}
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
    if out["method"] == "full" and not out["freeze_embeddings"] and not out["frozen_layers"]:
        return None
    if out["method"] != "qlora":
        out["quantization"] = full.quantization
    if out["method"] == "full":
        for name in ("rank", "target_modules", "dropout", "modules_to_save", "quantization"):
            out[name] = list(getattr(full, name)) if isinstance(getattr(full, name), tuple) else getattr(full, name)
    return out


def _dtypes(precision: core.Precision) -> dict[str, str | None]:
    return {"weights": precision.weights, "gradients": precision.gradients,
            "master_weights": precision.master_weights, "optimizer_states": precision.optimizer_states,
            "activations": precision.activations}


def same_implementation(optimizer: str, a: str, b: str) -> bool:
    """Two optimizer implementations that allocate the same during the step (e.g. every one of Lion's)."""
    scratch = OPTIMIZER_INFO[optimizer].scratch
    return (scratch[a].copies, scratch[a].of) == (scratch[b].copies, scratch[b].of) or (
        scratch[a].copies == 0 and scratch[b].copies == 0)


def differences(setup: dict[str, Any], back: dict[str, Any]) -> list[tuple[str, Any]]:
    """The fields of `setup` that `back` (what its file imports as) does not reproduce."""
    out: list[tuple[str, Any]] = []
    if setup["model"] != back["model"]:
        out.append(("model", setup["model"]))
    training, returned = setup["training"], back["training"]
    for name in TRAINING_FIELDS:
        mine, theirs = training[name], returned[name]
        if name == "optimizer_implementation" and (training["optimizer"] != returned["optimizer"] or
                                                   same_implementation(training["optimizer"], mine, theirs)):
            continue  # moot with another optimizer (listed itself), or the same step either way
        if name == "adafactor_momentum" and training["optimizer"] != "adafactor":
            continue
        if mine != theirs:
            out.append((f"training.{name}", mine))
    if training["framework_overhead_bytes"] != core.DEFAULT_FRAMEWORK_OVERHEAD_BYTES:
        out.append(("training.framework_overhead_bytes", training["framework_overhead_bytes"]))
    if training["allocator"] != "default":
        out.append(("training.allocator", training["allocator"]))
    for name in PARALLELISM_FIELDS:
        mine, theirs = setup["parallelism"][name], back["parallelism"][name]
        if name == "gpus_per_node":  # at most the job's GPUs count (the core caps it)
            mine, theirs = min(mine, _world(setup)), min(theirs, _world(back))
        if mine != theirs:
            out.append((f"parallelism.{name}", setup["parallelism"][name]))
    if setup["finetuning"] != finetuning_of(back.get("finetuning")):
        out.append(("finetuning", setup["finetuning"]))
    if setup.get("gpu"):
        out.append(("gpu", setup["gpu"]))
    return out


def _world(body: dict[str, Any]) -> int:
    p = body["parallelism"]
    return p["data"] * p["tensor"] * p["pipeline"]


# --- shared pieces ---------------------------------------------------------------------------------------

def _model_id(setup: dict[str, Any]) -> str | None:
    model = setup["model"]
    if set(model) == {"preset"}:
        return preset_repo(model["preset"])
    return None


def _ds_precision(precision: Any, zero: int, *, auto: bool) -> dict[str, Any] | None:
    """DeepSpeed's sections for a precision; "auto" switches where the Trainer or axolotl fills them. None: no form."""
    on: Any = "auto" if auto else True
    if precision == "bf16-fp32-master":
        return {"bf16": {"enabled": on}}
    if precision == "fp16-fp32-master":
        return {"fp16": {"enabled": on}}
    if precision == "megatron-bf16" and zero == 1:
        return {"bf16": {"enabled": on}, "data_types": {"grad_accum_dtype": "fp32"}}
    if precision == "fp32":
        return {}
    if precision in ("autocast-bf16", "autocast-fp16") and not auto:
        return {"torch_autocast": {"enabled": True, "dtype": "bfloat16" if precision == "autocast-bf16" else "float16"}}
    if precision == {"weights": "bf16", "gradients": "bf16", "master_weights": "bf16", "optimizer_states": "bf16",
                     "activations": "bf16"} and zero >= 1:
        return {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}}
    return None


def _ds_core(setup: dict[str, Any], *, auto: bool) -> dict[str, Any]:
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


_TRAINER_OPTIM: Final = {("adamw", "foreach"): "adamw_torch", ("adamw", "fused"): "adamw_torch_fused",
                         ("adamw", "for-loop"): "adamw_torch", ("adam", "foreach"): "adamw_torch",
                         ("adam", "fused"): "adamw_torch_fused", ("adam", "for-loop"): "adamw_torch"}


def _trainer_optim(t: dict[str, Any]) -> tuple[str, str | None]:
    """The Trainer's (and axolotl's) optim name and optim_args for a setup's optimizer (nearest where none is it)."""
    optimizer, implementation = t["optimizer"], t["optimizer_implementation"]
    if optimizer in ("adam", "adamw"):
        return _TRAINER_OPTIM[(optimizer, implementation)], None
    return {"sgd": ("sgd", None), "sgd-momentum": ("sgd", "momentum=0.9"), "adafactor": ("adafactor", None),
            "adamw-8bit": ("adamw_bnb_8bit", None), "lion": ("lion_32bit", None)}[optimizer]


# --- DeepSpeed -------------------------------------------------------------------------------------------

def _deepspeed(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    config = _ds_core(setup, auto=False)
    sections = _ds_precision(t["precision"], p["zero_stage"], auto=False)
    if sections is None:
        sections = {"bf16": {"enabled": True}} if _half(t["precision"]) == "bf16" else \
            {"fp16": {"enabled": True}} if _half(t["precision"]) == "fp16" else {}
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


def _half(precision: Any) -> str | None:
    if isinstance(precision, str):
        return "bf16" if "bf16" in precision else "fp16" if "fp16" in precision else None
    return precision.get("weights") if precision.get("weights") in ("bf16", "fp16") else None


def _ds_optimizer(t: dict[str, Any]) -> dict[str, Any] | None:
    optimizer, implementation = t["optimizer"], t["optimizer_implementation"]
    if optimizer in ("adam", "adamw"):
        params: dict[str, Any] = {"lr": 1e-4, "weight_decay": 0.0 if optimizer == "adam" else 0.01}
        if optimizer == "adam":
            params["adam_w_mode"] = False
        if implementation != "fused":
            params["torch_adam"] = True
            if implementation == "for-loop":
                params["foreach"] = False
        return {"type": "AdamW" if optimizer == "adamw" else "Adam", "params": params}
    if optimizer in ("sgd", "sgd-momentum"):
        params = {"lr": 1e-3}
        if optimizer == "sgd-momentum":
            params["momentum"] = 0.9
        if implementation == "fused":
            params["fused"] = True
        elif implementation == "for-loop":
            params["foreach"] = False
        return {"type": "SGD", "params": params}
    if optimizer == "adafactor":
        params = {"lr": 1e-2}
        if implementation == "for-loop":
            params["foreach"] = False
        return {"type": "Adafactor", "params": params}
    if optimizer == "lion":
        return {"type": "Lion", "params": {"lr": 1e-5, "weight_decay": 0.1}}
    return None  # 8-bit AdamW: the client's optimizer


# --- TrainingArguments -------------------------------------------------------------------------------------

def _trainer(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    precision = t["precision"]
    optim, optim_args = _trainer_optim(t)
    args: dict[str, Any] = {
        "output_dir": "output",
        "per_device_train_batch_size": t["micro_batch_size"],
        "gradient_accumulation_steps": t["gradient_accumulation_steps"],
        "gradient_checkpointing": t["activation_checkpointing"] == "full",
        "bf16": False,
        "fp16": False,
        "optim": optim,
    }
    if optim_args:
        args["optim_args"] = optim_args
    needs_engine = p["zero_stage"] > 0 or p["tensor"] > 1 or p["offload"] != "none" or precision in (
        "bf16-fp32-master", "fp16-fp32-master", "megatron-bf16") or isinstance(precision, dict)
    if needs_engine:
        sections = _ds_precision(precision, p["zero_stage"], auto=True)
        if sections is None and precision in ("autocast-bf16", "autocast-fp16"):
            sections = _ds_precision(precision, p["zero_stage"], auto=False)  # torch_autocast, Trainer bf16 off
        if sections is None:
            sections = {"bf16": {"enabled": "auto"}} if _half(precision) == "bf16" else {}
            if _half(precision) == "bf16":
                args["bf16"] = True
        ds = _ds_core(setup, auto=True)
        ds.update(sections)
        if "bf16" in sections and sections["bf16"]["enabled"] == "auto":
            args["bf16"] = True
        if "fp16" in sections and sections["fp16"]["enabled"] == "auto":
            args["fp16"] = True
        ds["gradient_clipping"] = "auto"
        args["deepspeed"] = ds
        notes.append(f"the deepspeed section's train_batch_size counts {p['data']} data-parallel GPUs: the Trainer "
                     f"checks it against the world size, so launch on {p['data'] * p['tensor']} GPUs")
    else:
        half = _half(precision)
        if half == "bf16":
            args["bf16"] = True
        elif half == "fp16":
            args["fp16"] = True
    args.update({"learning_rate": 2e-5, "lr_scheduler_type": "cosine", "warmup_steps": 100, "weight_decay": 0.0,
                 "num_train_epochs": 1, "logging_steps": 10, "save_strategy": "no", "report_to": "none"})
    notes.append("learning_rate, lr_scheduler_type, warmup_steps and weight_decay are placeholders: " + LR_NOTE)
    notes.append("the model, its attn_implementation and the sequence length are set where the script loads the "
                 "model and tokenizes the data")
    if t["activation_checkpointing"] == "full":
        notes.append("transformers 5 calls gradient_checkpointing activation_checkpointing; the old name still "
                     "works until v6")
    return json.dumps(args, indent=2) + "\n"


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
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent if exponent.startswith(('-', '+')) else '+' + exponent}"
        return text
    text = str(value)
    if _SAFE_PLAIN.match(text) and yaml_reader.resolve_plain(text) == text:
        return text
    return "'" + text.replace("'", "''") + "'"


def _yaml(lines: list[str], data: dict[str, Any], indent: int = 0, comments: dict[str, str] | None = None) -> None:
    pad = " " * indent
    for key, value in data.items():
        comment = f"  # {comments[key]}" if comments and key in comments else ""
        if isinstance(value, dict):
            if not value:
                lines.append(f"{pad}{key}: {{}}{comment}")
                continue
            lines.append(f"{pad}{key}:{comment}")
            _yaml(lines, value, indent + 2)
        elif isinstance(value, list):
            if not value:
                lines.append(f"{pad}{key}: []{comment}")
                continue
            lines.append(f"{pad}{key}:{comment}")
            for item in value:
                if isinstance(item, dict):
                    first = True
                    for k, v in item.items():
                        prefix = f"{pad}  - " if first else f"{pad}    "
                        lines.append(f"{prefix}{k}: {_scalar(v)}")
                        first = False
                else:
                    lines.append(f"{pad}  - {_scalar(item)}")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}{comment}")


# --- accelerate --------------------------------------------------------------------------------------------

def _accelerate(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    precision = t["precision"]
    world = p["data"] * p["tensor"] * p["pipeline"]
    half = _half(precision)
    mixed = half or "no"
    config: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False}
    comments: dict[str, str] = {}
    if t["implementation"] == "megatron":
        config["distributed_type"] = "MEGATRON_LM"
        config["megatron_lm_config"] = {
            "megatron_lm_tp_degree": p["tensor"], "megatron_lm_pp_degree": p["pipeline"],
            "megatron_lm_num_micro_batches": t["gradient_accumulation_steps"],
            "megatron_lm_sequence_parallelism": p["sequence_parallel"],
            "megatron_lm_recompute_activations": t["activation_checkpointing"] == "selective",
            "megatron_lm_use_distributed_optimizer": p["zero_stage"] == 1,
            "megatron_lm_gradient_clipping": 1.0,
        }
    elif p["zero_stage"] > 0 or p["offload"] != "none" or precision in ("bf16-fp32-master", "fp16-fp32-master"):
        config["distributed_type"] = "DEEPSPEED"
        config["deepspeed_config"] = {
            "gradient_accumulation_steps": t["gradient_accumulation_steps"], "gradient_clipping": 1.0,
            "offload_optimizer_device": "cpu" if p["offload"] != "none" else "none",
            "offload_param_device": "cpu" if p["offload"] == "optimizer+parameters" else "none",
            "zero3_init_flag": p["zero_stage"] == 3, "zero_stage": p["zero_stage"],
        }
        if p["zero_stage"] == 3:
            config["deepspeed_config"]["zero3_save_16bit_model"] = True
    else:
        config["distributed_type"] = "MULTI_GPU" if world > 1 else "NO"
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
    _yaml(lines, config, comments=comments)
    notes.append("the batch size, sequence length and optimizer are the training script's")
    return "\n".join(lines) + "\n"


# --- axolotl -----------------------------------------------------------------------------------------------

_AXOLOTL_ATTENTION: Final = {"sdpa": "sdpa", "flash": "flash_attention_2", "eager": "eager"}


def _axolotl(setup: dict[str, Any], notes: list[str]) -> str:
    t, p = setup["training"], setup["parallelism"]
    precision = t["precision"]
    model_id = _model_id(setup)
    lines = ["# axolotl train axolotl.yaml", "# Written by trainmem: the datasets, the learning rate and the output "
             "directory are placeholders to fill in."]
    config: dict[str, Any] = {}
    comments: dict[str, str] = {}
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
    optim, optim_args = _trainer_optim(t)
    config["optimizer"] = optim
    if optim_args:
        config["optim_args"] = optim_args
    config["lr_scheduler"] = "cosine"
    config["learning_rate"] = 2.0e-5
    comments["learning_rate"] = "a placeholder: trainmem does not model the learning rate"
    engine = p["zero_stage"] > 0 or p["tensor"] > 1 or p["offload"] != "none" or precision in (
        "bf16-fp32-master", "fp16-fp32-master", "megatron-bf16") or isinstance(precision, dict)
    half = _half(precision)
    config["bf16"] = half == "bf16"
    config["fp16"] = half == "fp16"
    config["tf32"] = False
    config["gradient_checkpointing"] = t["activation_checkpointing"] == "full"
    if t["attention"] in _AXOLOTL_ATTENTION:
        config["attn_implementation"] = _AXOLOTL_ATTENTION[t["attention"]]
    if p["tensor"] > 1:
        config["tensor_parallel_size"] = p["tensor"]
        comments["tensor_parallel_size"] = "DeepSpeed AutoTP"
    if engine:
        ds = _ds_core(setup, auto=True)
        ds.pop("tensor_parallel", None)  # axolotl passes tensor_parallel_size to AutoTP itself
        sections = _ds_precision(precision, p["zero_stage"], auto=True)
        if sections is None:
            sections = {"bf16": {"enabled": "auto"}} if half == "bf16" else {"fp16": {"enabled": "auto"}} \
                if half == "fp16" else {}
        ds.update(sections)
        ds["gradient_clipping"] = "auto"
        config["deepspeed"] = ds
        comments["deepspeed"] = (f"train_batch_size counts {p['data']} data-parallel GPUs: launch on "
                                 f"{p['data'] * p['tensor']}")
    finetuning = setup["finetuning"]
    if finetuning and finetuning["method"] in ("lora", "qlora"):
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
        if finetuning["target_modules"] == ["all-linear"] or "all-linear" in finetuning["target_modules"]:
            config["lora_target_linear"] = True
        else:
            config["lora_target_modules"] = list(finetuning["target_modules"])
        if finetuning["modules_to_save"]:
            config["lora_modules_to_save"] = list(finetuning["modules_to_save"])
    config["logging_steps"] = 10
    config["saves_per_epoch"] = 1
    _yaml(lines, config, comments=comments)
    notes.append("datasets, learning_rate and output_dir are placeholders: trainmem does not model them")
    return "\n".join(lines) + "\n"
