"""Hugging Face Trainer arguments: the JSON TrainingArguments.to_json_string() writes (or a hand-written subset).

Meanings and defaults from transformers' TrainingArguments (training_args.py): per_device_train_batch_size
(default 8), gradient_accumulation_steps (1), gradient_checkpointing, called activation_checkpointing from
transformers 5 on (False), bf16/fp16 (torch.autocast through accelerate unless DeepSpeed or FSDP runs the
model; at most one), optim (adamw_torch_fused with torch >= 2.8, else adamw_torch) with optim_args,
deepspeed (a path or a dict), fsdp (True, or the legacy option list "full_shard auto_wrap") with fsdp_config
(its "version" 2 runs FSDP2, see app.configs.fsdp), parallelism_config (accelerate's ParallelismConfig: dp_shard_size,
dp_replicate_size, tp_size, cp_size). The Trainer's loss step keeps only the loss (Trainer.compute_loss), so the
loop is hf-trainer.
"""

from __future__ import annotations

from typing import Any, Final

from app.configs import deepspeed, fsdp
from app.configs.common import NO_MEMORY, PATH, Reading, describe, read_torch_compile
from app.configs.optimizers import parse_optim_args, read_trainer_optimizer

LOOP_WHY: Final = "a Trainer run: Trainer.compute_loss keeps only the loss, so the logits are freed before backward"
DEFAULT_OPTIM: Final = "adamw_torch_fused"
AUTOCAST_NOTE: Final = ("Trainer's bf16/fp16 is torch.autocast over the model's weights; this assumes they were "
                        "loaded in fp32. Loaded in half precision (transformers 5's from_pretrained keeps a bf16 "
                        "checkpoint in bf16 by default), the run is pure bf16: choose precision bf16")
FSDP_OPTIONS: Final = {"full_shard": "FULL_SHARD", "shard_grad_op": "SHARD_GRAD_OP", "no_shard": "NO_SHARD",
                       "hybrid_shard": "HYBRID_SHARD", "hybrid_shard_zero2": "HYBRID_SHARD_ZERO2"}


def read(data: Any, r: Reading) -> None:
    if not isinstance(data, dict):
        raise r.error("", f"must be a JSON object (TrainingArguments), got {describe(data)}")
    handled = {*_batch(data, r), *_recomputation(data, r), *_mixed_precision(data, r), *_optimizer(data, r),
               *_engines(data, r), *read_torch_compile(data, r)}
    r.default("training.loop", "hf-trainer", "(Trainer)", LOOP_WHY)
    _the_rest(data, r, handled)


def _batch(data: dict[str, Any], r: Reading) -> tuple[str, ...]:
    """The micro-batch and the accumulation steps; the keys read."""
    micro_key = "per_device_train_batch_size"
    if data.get("per_gpu_train_batch_size") is not None:  # deprecated name (transformers 4), wins when set
        micro_key = "per_gpu_train_batch_size"
    if data.get(micro_key) is not None:
        r.said("training.micro_batch_size", r.integer(micro_key, data[micro_key]), micro_key)
    else:
        r.default("training.micro_batch_size", 8, micro_key, "TrainingArguments' default per_device_train_batch_size")
    if data.get("gradient_accumulation_steps") is not None:
        r.said("training.gradient_accumulation_steps",
               r.integer("gradient_accumulation_steps", data["gradient_accumulation_steps"]),
               "gradient_accumulation_steps")
    else:
        r.default("training.gradient_accumulation_steps", 1, "gradient_accumulation_steps",
                  "TrainingArguments' default gradient_accumulation_steps")
    return "per_device_train_batch_size", "per_gpu_train_batch_size", "gradient_accumulation_steps"


def _recomputation(data: dict[str, Any], r: Reading) -> tuple[str, ...]:
    """transformers 5 reads activation_checkpointing and keeps gradient_checkpointing as its alias; the keys read."""
    ckpt_key = next((k for k in ("activation_checkpointing", "gradient_checkpointing") if data.get(k) is not None), None)
    on = False
    if ckpt_key:
        on = r.boolean(ckpt_key, data[ckpt_key])
        r.said("training.activation_checkpointing", "full" if on else "none", ckpt_key, on,
               note="the model's gradient_checkpointing_enable(): each decoder layer keeps only its input")
        if ckpt_key == "activation_checkpointing" and data.get("gradient_checkpointing") is not None:
            _old_checkpointing_name(data["gradient_checkpointing"], on, r)
    else:
        r.default("training.activation_checkpointing", "none", "gradient_checkpointing",
                  "TrainingArguments' default: no gradient checkpointing")
    for name in ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"):
        if name in data:
            _checkpoint_kwargs(data[name], name, r, checkpointing=on)
    return ("activation_checkpointing", "gradient_checkpointing", "activation_checkpointing_kwargs",
            "gradient_checkpointing_kwargs")


def _checkpoint_kwargs(options: Any, name: str, r: Reading, *, checkpointing: bool) -> None:
    """torch.utils.checkpoint's options: use_reentrant picks the variant (transformers' default false), read where
    checkpointing is on; the rest change no count. transformers 5 takes offload out first (Trainer.train: each
    checkpoint under torch's save_on_cpu, `app.core.activation_offload`)."""
    rest = dict(options) if isinstance(options, dict) else options
    if isinstance(rest, dict) and rest.get("offload") is not None:
        _offload(r.boolean(f"{name}.offload", rest.pop("offload")), f"{name}.offload", r, checkpointing=checkpointing)
    if checkpointing and isinstance(rest, dict) and rest.get("use_reentrant") is not None:
        value = r.boolean(f"{name}.use_reentrant", rest.pop("use_reentrant"))
        r.said("training.use_reentrant", value, f"{name}.use_reentrant", value,
               note="the reentrant checkpoint holds each rebuilt layer's output through its backward" if value else
               "the non-reentrant checkpoint, as transformers runs it by default")
    if rest:
        r.ignore_all(rest, name, "checkpointing options other than use_reentrant and offload change no count "
                                 "trainmem keeps")


def _offload(on: bool, key: str, r: Reading, *, checkpointing: bool) -> None:
    if not checkpointing:
        r.ignore(key, "offload moves the checkpoints' inputs: without activation checkpointing there are none")
    elif on:
        r.said("training.activation_offload", "checkpoints-to-host", key, True,
               note="each layer's checkpointed input in pinned host memory (torch's save_on_cpu)")
    else:
        r.said("training.activation_offload", "none", key, False)


def _old_checkpointing_name(value: Any, on: bool, r: Reading) -> None:
    """gradient_checkpointing beside activation_checkpointing: read along when they agree, else left aside."""
    other = "gradient_checkpointing"
    if r.boolean(other, value) != on:
        r.ignore(other, f"transformers 5 reads activation_checkpointing ({str(on).lower()}); "
                        "gradient_checkpointing is its old name")
    else:
        r.also(other, value, "training.activation_checkpointing")


def _mixed_precision(data: dict[str, Any], r: Reading) -> tuple[str, ...]:
    """bf16 or fp16 autocast (at most one), else fp32; the keys read."""
    bf16 = r.boolean("bf16", data["bf16"]) if data.get("bf16") is not None else None
    fp16 = r.boolean("fp16", data["fp16"]) if data.get("fp16") is not None else None
    if bf16 and fp16:
        raise r.error("fp16", "bf16 and fp16 cannot both be true (TrainingArguments)")
    _amp(bf16, fp16, r)
    switches = ("bf16_full_eval", "fp16_full_eval", "half_precision_backend", "fp16_backend", "fp16_opt_level", "tf32")
    for name in switches:
        if name in data:
            r.ignore(name, "evaluation and matmul-precision switches change no training buffer")
    return ("bf16", "fp16", *switches)


def _amp(bf16: bool | None, fp16: bool | None, r: Reading) -> None:
    if bf16:
        r.said("amp", "bf16", "bf16", True, note=AUTOCAST_NOTE)
    elif fp16:
        r.said("amp", "fp16", "fp16", True, note=AUTOCAST_NOTE)
    elif bf16 is False or fp16 is False:
        r.said("amp", "no", "bf16" if bf16 is False else "fp16", False, note="no mixed precision: fp32")
    else:
        r.default("amp", "no", "bf16", "TrainingArguments' default: bf16 and fp16 false, so fp32")


def _optimizer(data: dict[str, Any], r: Reading) -> tuple[str, ...]:
    """optim with optim_args, or transformers 4's adafactor switch; the keys read."""
    optim_args = parse_optim_args(r, "optim_args", data.get("optim_args"))
    if data.get("adafactor") is True and data.get("optim") in (None, "adamw_hf", "adamw_torch"):
        read_trainer_optimizer(r, "adafactor", "adafactor", optim_args, "optim_args")  # transformers 4's switch
    elif data.get("optim") is not None:
        read_trainer_optimizer(r, "optim", data["optim"], optim_args, "optim_args")
        if data.get("adafactor") is not None:
            r.ignore("adafactor", "the deprecated switch (transformers 4) gives way to optim")
    else:
        r.default("training.optimizer", "adamw", "optim", f"TrainingArguments' default optim, {DEFAULT_OPTIM} "
                                                          "(adamw_torch before torch 2.8)")
        r.default("training.optimizer_implementation", "fused", "optim",
                  f"TrainingArguments' default optim, {DEFAULT_OPTIM}")
        if data.get("adafactor") is False:
            r.ignore("adafactor", NO_MEMORY)
    if optim_args and not any(u["key"] == "optim_args" for u in r.understood):
        r.ignore("optim_args", "optimizer hyperparameters change no count trainmem keeps")
    return "optim_args", "optim", "adafactor"


def _engines(data: dict[str, Any], r: Reading) -> tuple[str, ...]:
    """DeepSpeed (inline, or a path not opened), FSDP and accelerate's ParallelismConfig; the keys read."""
    ds = data.get("deepspeed")
    if isinstance(ds, dict):
        deepspeed.read(ds, r.child("deepspeed"), "deepspeed.")
    elif isinstance(ds, str) and ds:
        if ds.lstrip().startswith("{"):
            raise r.error("deepspeed", "is a JSON text: give it as an object, or as its own file in files")
        r.said("engine", "deepspeed", "deepspeed", ds, field="",
               note="the DeepSpeed file is not opened: add it to files to read its ZeRO stage and precision")
        r.ignore("deepspeed", f"{PATH}: add the DeepSpeed config as a second file to read it")
    elif ds not in (None, "", False):
        raise r.error("deepspeed", f"must be a path or a DeepSpeed config object, got {describe(ds)}")
    _fsdp(data, r)
    _parallelism_config(data.get("parallelism_config"), r)
    return ("deepspeed", "fsdp", "fsdp_config", "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap",
            "parallelism_config")


# Keys left aside with one reason; and those left aside whole (each leaf of a mapping).
IGNORED: Final = {
    "auto_find_batch_size": "the Trainer halves the batch after an out-of-memory error; the estimate uses "
                            "per_device_train_batch_size",
    **dict.fromkeys(("per_device_eval_batch_size", "eval_accumulation_steps"), "evaluation, not the training step"),
}
IGNORED_WHOLE: Final = {
    "liger_kernel_config": "which Liger kernels to patch: the estimate assumes its defaults (all of them)",
    "accelerator_config": "data-loader and accumulation details change no count trainmem keeps",
}


def _the_rest(data: dict[str, Any], r: Reading, handled: set[str]) -> None:
    """Every key no step read: compilation, Liger Kernel, and what changes no buffer."""
    for key, value in data.items():
        if key in handled:
            continue
        if key == "use_liger_kernel":
            _liger(value, r)
        elif key in IGNORED:
            r.ignore(key, IGNORED[key])
        elif key == "use_cpu" and value:
            r.ignore(key, "training on the CPU: the estimate is for GPUs")
        else:
            r.ignore_all(value, key, IGNORED_WHOLE.get(key))


def _liger(value: Any, r: Reading) -> None:
    """use_liger_kernel: Trainer applies apply_liger_kernel_to_<model>() with its defaults: RMSNorm, SwiGLU, RoPE and
    the fused linear cross entropy (transformers' trainer.py, use_liger_kernel)."""
    key = "use_liger_kernel"
    if value is not True:
        r.ignore(key, "off")
        return
    r.said("training.implementation", "liger", key, value, note="Liger Kernel's patched modules")
    r.said("training.loss", "fused-linear", key, value, note="Liger's fused linear cross entropy, on by default")


def _fsdp(data: dict[str, Any], r: Reading) -> None:
    option = data.get("fsdp")
    config = data.get("fsdp_config")
    if option in (None, False, "", []):
        _fsdp_off(data, config, r)
        return
    r.said("engine", "fsdp", "fsdp", option, field="")
    version = fsdp.find_version(r, "fsdp_config", config)
    strategy = None if option is True else _fsdp_options(option, version, r)
    if isinstance(config, dict):
        fsdp.read_config(r, "fsdp_config", config, strategy=strategy, version=version, trainer=True)
    else:
        if isinstance(config, str) and config:
            r.ignore("fsdp_config", PATH)
        if not strategy:
            fsdp.default_strategy(r, "fsdp")
        fsdp.convention(r, version, fsdp.STRATEGY_STAGES[strategy or "FULL_SHARD"], "fsdp")
    for name in ("fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap"):
        if data.get(name) not in (None, 0, "", []):
            r.ignore(name, "which modules FSDP wraps changes no count trainmem keeps")


def _fsdp_off(data: dict[str, Any], config: Any, r: Reading) -> None:
    """fsdp empty: its settings have nothing to apply to."""
    for name in ("fsdp", "fsdp_min_num_params", "fsdp_transformer_layer_cls_to_wrap"):
        if data.get(name) not in (None, False, "", [], 0):
            r.ignore(name, "FSDP is not on (fsdp is empty)")
    if config not in (None, {}):
        if isinstance(config, dict):
            r.ignore_all(config, "fsdp_config", "FSDP is not on (fsdp is empty)")
        else:
            r.ignore("fsdp_config", "FSDP is not on (fsdp is empty)")


def _fsdp_options(option: Any, version: fsdp.Version, r: Reading) -> str | None:
    """The Trainer's fsdp options ("full_shard auto_wrap"); the sharding strategy they name, if any."""
    strategy = None
    for item in _option_words(option, r):
        name = item.lower()
        if name in FSDP_OPTIONS and version.number == 2:
            r.ignore("fsdp", f"{item}: FSDP2 reads fsdp_config's reshard_after_forward, not a sharding strategy "
                             "(TrainingArguments._process_fsdp_args)")
        elif name in FSDP_OPTIONS:
            fsdp.set_strategy(r, "fsdp", item, FSDP_OPTIONS[name])
            strategy = FSDP_OPTIONS[name]
        elif name == "offload":
            r.said("parallelism.offload", "optimizer+parameters", "fsdp", item,
                   note="FSDP's CPUOffload(offload_params=True)")
        elif name == "auto_wrap":
            r.also("fsdp", item, "parallelism.zero_stage", "auto_wrap: each decoder layer is its own FSDP unit")
        else:
            raise r.error("fsdp", f"unknown FSDP option {item!r}; the Trainer takes "
                                  f"{', '.join([*FSDP_OPTIONS, 'offload', 'auto_wrap'])}")
    return strategy


def _option_words(option: Any, r: Reading) -> list[str]:
    options = option.split() if isinstance(option, str) else option
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise r.error("fsdp", f"must be true, or FSDP options such as \"full_shard auto_wrap\", got {describe(option)}")
    return options


def _parallelism_config(value: Any, r: Reading) -> None:
    """transformers 5 passes accelerate's ParallelismConfig through (dp_replicate_size, dp_shard_size, tp_size,
    cp_size)."""
    if value in (None, {}):
        return
    value = r.mapping("parallelism_config", value)
    data = 1
    data_keys = []
    for name, item in value.items():
        key = f"parallelism_config.{name}"
        if name == "tp_size":
            r.said("parallelism.tensor", r.integer(key, item), key)
        elif name in ("dp_shard_size", "dp_replicate_size"):
            data *= r.integer(key, item)
            data_keys.append(key)
        elif name == "cp_size":
            r.said("parallelism.context", r.integer(key, item), key,
                   note="each sequence split over this many GPUs (ring attention)")
        else:
            r.ignore_all(item, key)
    if data_keys:
        r.said("parallelism.data", data, data_keys[0], data)
        for key in data_keys[1:]:
            r.also(key, value[key.rsplit(".", 1)[1]], "parallelism.data")
    if isinstance(value.get("dp_shard_size"), int) and value["dp_shard_size"] > 1:
        r.said("engine", "fsdp", "parallelism_config.dp_shard_size", value["dp_shard_size"], field="")
        fsdp.default_strategy(r, "parallelism_config.dp_shard_size")
