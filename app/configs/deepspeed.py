"""DeepSpeed's JSON configuration (ds_config.json): what it says about the batch, ZeRO, precision and the optimizer.

Key meanings follow DeepSpeed's documentation (docs/_pages/config-json.md) and its runtime
(deepspeed/runtime/config.py, engine.py):

* ``train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × data-parallel GPUs``
  (DeepSpeedConfig._batch_assertion), so the data-parallel degree follows from the three.
* ``zero_optimization.stage`` 0-3 (default 0); ``offload_optimizer``/``offload_param`` move state to CPU or NVMe.
* ``bf16.enabled``: bf16 weights and gradients with an fp32 master copy and fp32 optimizer state (the BF16 and
  ZeRO optimizers keep the fp32 copy; a DDP-style bf16 run wraps the optimizer in FP16_Optimizer with an fp32
  master). With ``data_types.grad_accum_dtype: "fp32"`` gradients are accumulated in fp32 (BF16_Optimizer,
  engine._do_optimizer_sanity_check). ``bf16.bf16_master_weights_and_grads`` with ``bf16_optimizer_states``
  keeps the master copy and the optimizer state in bf16.
* ``fp16.enabled``: fp16 weights and gradients, fp32 master and state (the 16 bytes per parameter of ZeRO).
* ``torch_autocast``: torch.autocast around fp32 weights (``dtype`` bfloat16 by default).
* ``optimizer.type``: DeepSpeed's own (Adam, AdamW: FusedAdam, Adam in AdamW mode unless ``adam_w_mode`` is
  false, torch's with ``torch_adam``; Lion: FusedLion; Lamb, Adagrad...) or any ``torch.optim`` class by name.
* ``"auto"``: left for the Hugging Face integration to fill from the Trainer's arguments
  (transformers/integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process).
* From ZeRO stage 1 on, the run's memory follows DeepSpeed's own convention (training.framework deepspeed, as
  deepspeed/runtime/zero/stage_1_and_2.py and stage3.py allocate and as its estimators count); stage 0 is plain data
  parallelism.
"""

from __future__ import annotations

from typing import Any, Final

from app import core
from app.configs.common import COMMS, NO_MEMORY, OFFLOAD, OFFLOAD_DETAIL, Reading, describe, reason

AUTO: Final = "auto"

_AUTO_FILLED: Final = {
    "train_micro_batch_size_per_gpu": "training.micro_batch_size",
    "gradient_accumulation_steps": "training.gradient_accumulation_steps",
    "train_batch_size": "train_batch_size",
}

# DeepSpeed's own optimizer names (matched without case, as DeepSpeedConfig lower-cases them).
_DS_OPTIMIZERS: Final = ("adagrad", "adam", "adamw", "lamb", "onebitadam", "zerooneadam", "onebitlamb", "muadam",
                         "muadamw", "musgd", "lion", "muon")
# torch.optim classes DeepSpeed falls back to by exact name (engine._configure_basic_optimizer: getattr(torch.optim, name)).
_TORCH_OPTIMIZERS: Final = ("SGD", "Adafactor", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD",
                            "Rprop", "LBFGS", "SparseAdam", "Adam", "AdamW")

CONVENTION_NOTE: Final = ("DeepSpeed's convention: an fp32 copy of each rank's gradient partition for the optimizer "
                          "step, and under ZeRO-3 the largest layer gathered whole")
STAGE_0_WHY: Final = ("ZeRO stage 0: DeepSpeed runs plain data parallelism, which the pytorch convention counts the "
                      "same way")

ACTIVATION_CHECKPOINTING_WHY: Final = (
    "configures deepspeed.checkpointing, which only models that call it use (Megatron-DeepSpeed); a Hugging Face "
    "model recomputes with the Trainer's gradient_checkpointing")


# Top-level keys left aside with one reason; and those left aside whole (each leaf of a section).
_IGNORED: Final = {
    "sequence_parallel_size": "DeepSpeed-Ulysses sequence parallelism is not modelled: each GPU is counted with the "
                              "whole sequence",
    **dict.fromkeys(("zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"),
                    "a check DeepSpeed makes before it starts; no memory of its own"),
    **dict.fromkeys(("communication_data_type", "seq_parallel_communication_data_type", "sparse_gradients"), COMMS),
}
_IGNORED_WHOLE: Final = {
    "activation_checkpointing": ACTIVATION_CHECKPOINTING_WHY,
    "pipeline": "DeepSpeed's pipeline stages are set in code (PipelineModule(num_stages=...)): "
                "set parallelism.pipeline",
    **dict.fromkeys(("scheduler", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
                     "steps_per_print", "wall_clock_breakdown", "dump_state", "memory_breakdown"), NO_MEMORY),
    **dict.fromkeys(("aio", "nvme_path"), OFFLOAD_DETAIL),
}


def read(data: Any, r: Reading, prefix: str = "") -> None:
    """Facts from a DeepSpeed config (a dict); `prefix` is its key path when nested in another file."""
    data = r.mapping(prefix.rstrip("."), data) if prefix else data
    if not isinstance(data, dict):
        raise r.error("", f"must be a JSON object (a DeepSpeed config), got {describe(data)}")
    p = prefix
    r.said("engine", "deepspeed", prefix.rstrip("."), "DeepSpeed", field="")
    offload = _zero(data, r, p)
    _batch(data, r, p)
    _precision(data, r, p)
    _optimizer(data, r, p, offload)
    handled = {"zero_optimization", "train_batch_size", "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps", "bf16", "bfloat16", "fp16", "torch_autocast", "amp", "data_types",
               "optimizer"}
    for key, value in data.items():
        if key in handled:
            continue
        if key == "tensor_parallel":
            _tensor_parallel(value, r, f"{p}{key}")
        elif key in _IGNORED:
            r.ignore(f"{p}{key}", _IGNORED[key])
        else:
            r.ignore_all(value, f"{p}{key}", _IGNORED_WHOLE.get(key))


def _auto_or_int(r: Reading, key: str, value: Any, *, low: int = 1) -> int | str:
    if value == AUTO:
        return AUTO
    return r.integer(key, value, low=low)


def _batch(data: dict[str, Any], r: Reading, p: str) -> None:
    for key, name in _AUTO_FILLED.items():
        if key not in data or data[key] is None:
            continue
        value = _auto_or_int(r, f"{p}{key}", data[key])
        if value == AUTO:
            r.autos[name] = f"{p}{key}"
        else:
            r.said(name, value, f"{p}{key}")


def _zero(data: dict[str, Any], r: Reading, p: str) -> bool:
    """The ZeRO stage and what is offloaded to host memory; whether the optimizer state is offloaded (DeepSpeed
    then runs its CPU Adam)."""
    zero = data.get("zero_optimization")
    key = f"{p}zero_optimization"
    if zero is None:
        r.default("parallelism.zero_stage", 0, key, "no zero_optimization section: DeepSpeed runs without ZeRO")
        convention(r, 0, key, None)
        return False
    if isinstance(zero, bool):  # the legacy form: true is stage 1
        r.said("parallelism.zero_stage", 1 if zero else 0, key, zero)
        convention(r, 1 if zero else 0, key, zero)
        return False
    zero = r.mapping(key, zero)
    if "stage" in zero:
        stage = r.integer(f"{key}.stage", zero["stage"], low=0, high=3)
        r.said("parallelism.zero_stage", stage, f"{key}.stage")
        convention(r, stage, f"{key}.stage", stage)
    else:
        r.default("parallelism.zero_stage", 0, f"{key}.stage", "zero_optimization without a stage: DeepSpeed's default, 0")
        convention(r, 0, f"{key}.stage", None)
    devices: dict[str, tuple[str, str]] = {}  # "optimizer"/"parameters" -> (device, its key)
    for name, value in zero.items():
        if name != "stage":
            _zero_setting(r, name, value, f"{key}.{name}", devices)
    offload_facts(r, devices)
    return "optimizer" in devices


# zero_optimization keys left aside with one reason.
_ZERO_IGNORED: Final = {
    **dict.fromkeys(("zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_gradients",
                     "zero_quantized_nontrainable_weights", "mics_shard_size", "mics_hierarchical_params_gather"),
                    "ZeRO++ and MiCS partitioning variants are not modelled: the estimate shards over every "
                    "data-parallel GPU"),
    **dict.fromkeys(("stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                     "stage3_gather_fp16_weights_on_model_save", "elastic_checkpoint", "load_from_fp32_weights",
                     "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients", "log_trace_cache_warnings"),
                    NO_MEMORY),
}


def _zero_setting(r: Reading, name: str, value: Any, sub: str, devices: dict[str, tuple[str, str]]) -> None:
    """One zero_optimization key besides the stage: an offload (into `devices`), the reduce bucket, or a reason."""
    if name in ("offload_optimizer", "offload_param"):
        _offload_section(r, "optimizer" if name == "offload_optimizer" else "parameters", value, sub, devices)
    elif name in ("cpu_offload", "cpu_offload_params"):  # legacy switches
        if r.boolean(sub, value):
            devices["optimizer" if name == "cpu_offload" else "parameters"] = ("cpu", sub)
        else:
            r.ignore(sub, "off")
    elif name == "reduce_bucket_size":
        _reduce_bucket(r, value, sub)
    elif name in _ZERO_REASONS:
        r.ignore_all(value, sub, _ZERO_REASONS[name])
    elif name in _ZERO_IGNORED:
        r.ignore(sub, _ZERO_IGNORED[name])
    else:
        r.ignore_all(value, sub, COMMS if reason(name) == COMMS else None)


def _offload_section(r: Reading, what: str, value: Any, sub: str, devices: dict[str, tuple[str, str]]) -> None:
    """offload_optimizer or offload_param: its device into `devices` (unless none); its details left aside."""
    value = r.mapping(sub, value)
    device = value.get("device", "none")
    device = r.choice(f"{sub}.device", device, ("none", "cpu", "nvme")) if "device" in value else "none"
    if device != "none":
        devices[what] = (device, f"{sub}.device")
    elif "device" in value:
        r.ignore(f"{sub}.device", "none: not offloaded")
    for detail, item in value.items():
        if detail != "device":
            r.ignore_all(item, f"{sub}.{detail}", OFFLOAD_DETAIL)


def _reduce_bucket(r: Reading, value: Any, sub: str) -> None:
    # transformers' HfTrainerDeepSpeedConfig fills "auto" with hidden_size² once it has the model
    # (integrations/deepspeed.py, trainer_config_finalize); the model is not read from this file.
    if value == AUTO:
        r.said("parallelism.reduce_bucket_size", core.DEEPSPEED_REDUCE_BUCKET_SIZE, sub, AUTO,
               note="auto: the Trainer fills it with hidden_size² from the model at run time; DeepSpeed's own "
               "default, 500,000,000 elements, is counted here")
    else:
        r.said("parallelism.reduce_bucket_size", r.integer(sub, value, low=1, high=10**12), sub)


# zero_optimization keys that change memory the estimate does not follow, each with what it counts instead
# (deepspeed/runtime/zero/config.py for the defaults).
_ZERO_REASONS: Final = {
    "contiguous_gradients": "the contiguous gradient bucket (on by default) is counted as parallelism.reduce_bucket_size "
                            "says; turned off, DeepSpeed reduces from the gradients themselves, which is not an input "
                            "here",
    "overlap_comm": "with ZeRO-1/2 it adds a second gradient bucket (stage_1_and_2.py:3275), not counted; ZeRO-3 "
                    "keeps one either way",
    "allgather_bucket_size": "ZeRO-1/2 gather the updated parameters into their own flat buffers in shards of this "
                             "size: no buffer of its own",
    "stage3_max_live_parameters": "DeepSpeed's convention counts the largest layer gathered whole, as its estimator "
                                  "does (stage3.py:4027); the live-parameter limit on what prefetching gathers "
                                  "beyond it is not modelled",
    "stage3_prefetch_bucket_size": "DeepSpeed's convention counts the largest layer gathered whole, as its estimator "
                                   "does (stage3.py:4027); what prefetching gathers beyond it is not modelled",
    "stage3_max_reuse_distance": "how long a gathered parameter is kept for reuse: not modelled beyond the largest "
                                 "layer DeepSpeed's convention counts gathered",
    "stage3_param_persistence_threshold": "parameters below this size stay whole on every GPU; for transformer "
                                          "layers these are the norms and biases, which the estimate shards with "
                                          "the rest (a few MB)",
    "sub_group_size": "ZeRO-3 steps its partition in groups of this many elements (stage3.py); how that splits "
                      "the step's scratch is not modelled: the scratch follows the optimizer implementation",
}


def convention(r: Reading, stage: int, key: str, raw: Any) -> None:
    """training.framework for a DeepSpeed run at ZeRO `stage`: DeepSpeed's own convention from stage 1 on (the core
    counts stage 0 under it as plain data parallelism); `raw` None when the stage is DeepSpeed's default."""
    if stage >= 1:
        r.said("training.framework", "deepspeed", key, raw, note=CONVENTION_NOTE)
    else:
        r.default("training.framework", "pytorch", key, STAGE_0_WHY)


def offload_facts(r: Reading, devices: dict[str, tuple[str, str]]) -> None:
    """parallelism.offload from what a config sends to the CPU or NVMe: the optimizer (ZeRO-Offload), or it and
    the parameters (ZeRO-Infinity). Parameters alone are not a mode trainmem models."""
    if "optimizer" in devices:
        device, key = devices["optimizer"]
        mode = "optimizer+parameters" if "parameters" in devices else "optimizer"
        r.said("parallelism.offload", mode, key, device,
               note="optimizer state, master copy and a gradient partition in host memory")
        if "parameters" in devices:
            r.also(devices["parameters"][1], devices["parameters"][0], "parallelism.offload",
                   "the parameter partitions too")
        if any(device == "nvme" for device, _ in devices.values()):
            r.assume("parallelism.offload", mode, "offloaded to NVMe: the host-memory figures count it as host "
                                                  "memory, an upper bound on the RAM it takes")
    elif "parameters" in devices:
        r.ignore(devices["parameters"][1], "parameters offloaded without the optimizer state are not modelled: "
                                           "counted on the GPU")


def _enabled(r: Reading, key: str, section: Any) -> bool | str | None:
    if section is None:
        return None
    if isinstance(section, bool):  # "bf16": true is read as enabled by some tools; DeepSpeed wants a mapping
        raise r.error(key, f"must be a mapping such as {{\"enabled\": true}}, got {describe(section)}")
    section = r.mapping(key, section)
    value = section.get("enabled", False)
    if value == AUTO:
        return AUTO
    return r.boolean(f"{key}.enabled", value)


def _precision(data: dict[str, Any], r: Reading, p: str) -> None:
    """The engine's precision: a preset id or explicit dtypes as fact ``ds_precision``; "auto" when bf16/fp16
    wait for the Trainer. The raw switches go in facts ``ds_bf16``/``ds_fp16`` for the Trainer's check."""
    bf16_key = f"{p}bf16" if "bf16" in data or "bfloat16" not in data else f"{p}bfloat16"
    bf16_section = data.get("bf16", data.get("bfloat16"))
    bf16 = _enabled(r, bf16_key, bf16_section)
    fp16 = _enabled(r, f"{p}fp16", data.get("fp16"))
    autocast = _enabled(r, f"{p}torch_autocast", data.get("torch_autocast"))
    amp = _enabled(r, f"{p}amp", data.get("amp"))
    if bf16 is True and fp16 is True:
        raise r.error(f"{p}fp16.enabled", "bf16 and fp16 cannot both be enabled (DeepSpeed: 'this mode cannot be "
                                          "combined with the fp16 mode')")
    switches = ((bf16, f"{bf16_key}.enabled"), (fp16, f"{p}fp16.enabled"))
    _switch_facts(r, switches, bf16_key)
    grad_accum = _grad_accum_dtype(data, r, p)
    extras = _half_details(data, r, p, bf16_key, bf16_section)
    key, value = _half(r, bf16, fp16, bf16_key, p, extras, grad_accum)
    key, value = _autocast(data, r, p, autocast, key, value)
    key, value = _apex_amp(data, r, p, amp, key, value)
    if key is None:
        _fp32(r, switches, p)
    elif value == AUTO:
        r.autos["ds_precision"] = key
        # What bf16 "auto" becomes once filled with true, with this file's other bf16 settings.
        if grad_accum in ("fp32", "float32"):
            r.autos["ds_precision:bf16"] = "megatron-bf16"
    else:
        r.said("ds_precision", value, key, True, field="training.precision")


Switches = tuple[tuple[bool | str | None, str], ...]  # (bf16's or fp16's enabled, its key)


def _switch_facts(r: Reading, switches: Switches, bf16_key: str) -> None:
    """bf16's and fp16's enabled as facts ``ds_bf16``/``ds_fp16``, for the Trainer's check."""
    for switch, switch_key in switches:
        if switch is not None:
            r.said("ds_bf16" if switch_key.startswith(bf16_key) else "ds_fp16", switch, switch_key, field="")
        if switch == AUTO:
            r.also(switch_key, AUTO, "training.precision", "filled from the Trainer's --bf16/--fp16 (assumed passed "
                                                           "when no Trainer arguments are given)")


def _fp32(r: Reading, switches: Switches, p: str) -> None:
    """No half-precision mode enabled: fp32, said by a switch turned off or DeepSpeed's default."""
    off = [k for switch, k in switches if switch is False]
    if off:
        r.said("ds_precision", "fp32", off[0], False, field="training.precision")
    else:
        r.default("ds_precision", "fp32", f"{p}bf16", "no bf16, fp16 or torch_autocast section enabled: "
                                                     "DeepSpeed trains in fp32")


def _grad_accum_dtype(data: dict[str, Any], r: Reading, p: str) -> str | None:
    """data_types.grad_accum_dtype, the dtype gradients accumulate in (None: the weights')."""
    grad_accum = None
    types = data.get("data_types")
    if types is not None:
        types = r.mapping(f"{p}data_types", types)
        for name, given in types.items():
            if name == "grad_accum_dtype":
                grad_accum = r.choice(f"{p}data_types.{name}", given, ("fp32", "fp16", "bf16", "float32", "float16",
                                                                      "bfloat16"), fold_case=True)
            else:
                r.ignore(f"{p}data_types.{name}")
    return grad_accum


def _half_details(data: dict[str, Any], r: Reading, p: str, bf16_key: str, bf16_section: Any) -> dict[str, bool]:
    """The bf16 section's master-weight and optimizer-state switches; the rest of bf16's and fp16's keys ignored."""
    extras = {}
    if isinstance(bf16_section, dict):
        for name, given in bf16_section.items():
            if name == "enabled":
                continue
            if name in ("bf16_master_weights_and_grads", "bf16_optimizer_states"):
                extras[name] = r.boolean(f"{bf16_key}.{name}", given)
            else:
                r.ignore(f"{bf16_key}.{name}", NO_MEMORY if name in ("immediate_grad_update", "check_grad_overflow")
                         else None)
    if isinstance(data.get("fp16"), dict):
        for name in data["fp16"]:
            if name != "enabled":
                r.ignore(f"{p}fp16.{name}", OFFLOAD if "master_weights" in name else NO_MEMORY)
    return extras


Precision = tuple[str | None, Any]  # the key that set it (None: nothing did), and the preset id, dtypes or "auto"


def _half(r: Reading, bf16: bool | str | None, fp16: bool | str | None, bf16_key: str, p: str,
          extras: dict[str, bool], grad_accum: str | None) -> Precision:
    """bf16 or fp16 with DeepSpeed's fp32 master copy, or pure bf16, or gradients accumulated in fp32."""
    key: str | None = None
    value: Any = None
    if bf16 is True:
        key, value = f"{bf16_key}.enabled", _bf16(r, bf16_key, extras, grad_accum)
    elif fp16 is True:
        key, value = f"{p}fp16.enabled", "fp16-fp32-master"
    elif bf16 == AUTO or fp16 == AUTO:
        key, value = f"{bf16_key}.enabled" if bf16 == AUTO else f"{p}fp16.enabled", AUTO
    return key, value


def _bf16(r: Reading, bf16_key: str, extras: dict[str, bool], grad_accum: str | None) -> Any:
    """bf16 enabled: DeepSpeed's fp32 master copy, or all bf16 with bf16 master weights and optimizer states, or
    Megatron-style fp32 gradient accumulation."""
    if extras.get("bf16_master_weights_and_grads") and extras.get("bf16_optimizer_states"):
        return {"weights": "bf16", "gradients": "bf16", "master_weights": "bf16", "optimizer_states": "bf16",
                "activations": "bf16"}
    if extras.get("bf16_master_weights_and_grads"):
        r.ignore(f"{bf16_key}.bf16_master_weights_and_grads", "bf16 master weights with fp32 optimizer state "
                                                              "need ZeRO-Offload, which is not modelled")
    return "megatron-bf16" if grad_accum in ("fp32", "float32") else "bf16-fp32-master"


def _autocast(data: dict[str, Any], r: Reading, p: str, autocast: bool | str | None, key: str | None,
              value: Any) -> Precision:
    """torch_autocast over fp32 weights, which no bf16 or fp16 mode may join."""
    if autocast is True:
        if value not in (None, AUTO):
            raise r.error(f"{p}torch_autocast.enabled", "torch_autocast runs over fp32 weights: it cannot be combined "
                                                        "with bf16 or fp16 enabled")
        section = data["torch_autocast"]
        dtype = section.get("dtype", "bfloat16")
        half = r.choice(f"{p}torch_autocast.dtype", dtype, {"bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16",
                                                             "float16": "fp16", "fp16": "fp16", "half": "fp16",
                                                             "torch.float16": "fp16"}, fold_case=True)
        key, value = f"{p}torch_autocast.enabled", f"autocast-{half}"
        for name in section:
            if name not in ("enabled", "dtype"):
                r.ignore(f"{p}torch_autocast.{name}", COMMS)
    elif isinstance(data.get("torch_autocast"), dict):
        r.ignore_all(data["torch_autocast"], f"{p}torch_autocast", "torch_autocast is not enabled")
    return key, value


def _apex_amp(data: dict[str, Any], r: Reading, p: str, amp: bool | str | None, key: str | None,
              value: Any) -> Precision:
    """Apex AMP: O2 and O3 keep fp16 weights with an fp32 master copy, O1 casts as autocast does."""
    if amp is True:
        if value not in (None, AUTO):
            raise r.error(f"{p}amp.enabled", "Apex AMP cannot be combined with bf16 or fp16 mode (DeepSpeed)")
        section = data["amp"]
        level = section.get("opt_level", "O1")
        key, value = f"{p}amp.enabled", "fp16-fp32-master" if level in ("O2", "O3") else "autocast-fp16"
        r.assume("training.precision", value, f"Apex AMP opt_level {level}: "
                 + ("fp16 weights with an fp32 master copy" if level in ("O2", "O3") else "fp16 casts around fp32 "
                    "weights, as torch.autocast"))
        for name in section:
            if name not in ("enabled", "opt_level"):
                r.ignore(f"{p}amp.{name}", NO_MEMORY)
    elif isinstance(data.get("amp"), dict):
        r.ignore_all(data["amp"], f"{p}amp", "Apex AMP is not enabled")
    return key, value


def _optimizer(data: dict[str, Any], r: Reading, p: str, offload: bool) -> None:
    section = data.get("optimizer")
    key = f"{p}optimizer"
    if section is None:
        return  # the client's optimizer (the Trainer's optim, or the script's own)
    section = r.mapping(key, section)
    name = r.string(f"{key}.type", section.get("type")) if "type" in section else None
    params = section.get("params") or {}
    params = r.mapping(f"{key}.params", params)
    used: set[str] = set()
    for other in section:
        if other not in ("type", "params"):
            r.ignore(f"{key}.{other}", NO_MEMORY if other == "legacy_fusion" else None)
    if name is None:
        r.ignore_all(params, f"{key}.params", "no optimizer type given")
        return
    tkey = f"{key}.type"
    modelled = _modelled(r, name, key, params, used, offload)
    if modelled is None:
        return
    optimizer, implementation, note = modelled
    r.said("training.optimizer", optimizer, tkey, name, note=note)
    r.said("training.optimizer_implementation", implementation, tkey, name, note=note)
    _optimizer_params(r, key, params, used)


def _optimizer_params(r: Reading, key: str, params: dict[str, Any], used: set[str]) -> None:
    """The optimizer's params: those that decided it read along, the rest left aside."""
    for param, value in params.items():
        if param in used:
            r.also(f"{key}.params.{param}", value, "training.optimizer" if param in ("adam_w_mode", "momentum")
                   else "training.optimizer_implementation")
        else:
            r.ignore(f"{key}.params.{param}", NO_MEMORY)


def _modelled(r: Reading, name: str, key: str, params: dict[str, Any], used: set[str],
              offload: bool) -> tuple[str, str, str] | None:
    """optimizer.type as trainmem's (optimizer, implementation, note); None when it is not modelled (reported)."""
    lower = name.lower()
    tkey = f"{key}.type"
    note = ""
    if lower in ("adam", "adamw"):
        return _adam(r, lower, key, params, used, offload)
    if lower == "lion":
        return "lion", "fused", "DeepSpeed's FusedLion"
    if lower == "lamb":
        note = "FusedLamb keeps Adam's two moments per parameter: counted as AdamW"
        r.assume("training.optimizer", "adamw", f"{name}: {note}")
        return "adamw", "fused", note
    if lower in ("muadam", "muadamw"):
        implementation = _torch_implementation(r, f"{key}.params", params, used)
        optimizer = {"muadam": "adam", "muadamw": "adamw"}[lower]
        return optimizer, implementation, "mup's wrapper around torch.optim's Adam(W)"
    if lower == "musgd" or name == "SGD":
        return _sgd(r, key, params, used)
    if name == "Adafactor":
        implementation = _torch_implementation(r, f"{key}.params", params, used)
        r.said("training.adafactor_momentum", False, tkey, name)
        return "adafactor", implementation, "torch.optim.Adafactor keeps no first moment"
    if lower == "adagrad" or name in ("RMSprop",):
        return _one_buffer(r, name, key, params, used)
    _unmodelled(r, name, key, params)
    return None


def _unmodelled(r: Reading, name: str, key: str, params: dict[str, Any]) -> None:
    """An optimizer DeepSpeed or torch.optim has that trainmem does not count (reported), or an error for a name
    neither knows."""
    tkey = f"{key}.type"
    if name.lower() in _DS_OPTIMIZERS or name in _TORCH_OPTIMIZERS:
        r.ignore(tkey, f"the {name} optimizer is not modelled: trainmem counts Adam(W), SGD, Adafactor, 8-bit AdamW "
                       "and Lion")
        r.ignore_all(params, f"{key}.params", "the optimizer is not modelled")
        return
    raise r.error(tkey, f"is not an optimizer DeepSpeed knows: {name!r} is neither one of its own "
                        f"({', '.join(_DS_OPTIMIZERS)}) nor a torch.optim class")


def _sgd(r: Reading, key: str, params: dict[str, Any], used: set[str]) -> tuple[str, str, str]:
    """SGD (or mup's MuSGD): with a momentum buffer when params.momentum is not zero."""
    momentum = params.get("momentum", 0)
    if "momentum" in params:
        used.add("momentum")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
            raise r.error(f"{key}.params.momentum", f"must be a number, got {describe(momentum)}")
    optimizer = "sgd-momentum" if momentum else "sgd"
    return optimizer, _torch_implementation(r, f"{key}.params", params, used), ""


def _one_buffer(r: Reading, name: str, key: str, params: dict[str, Any],
                used: set[str]) -> tuple[str, str, str] | None:
    """Adagrad and plain RMSprop keep one buffer per parameter: counted as SGD with momentum; RMSprop with momentum
    or centred is not modelled (reported, None)."""
    if name == "RMSprop" and (params.get("momentum") or params.get("centered")):
        r.ignore(f"{key}.type", "RMSprop with momentum or centred keeps two or three buffers per parameter: not "
                                "modelled")
        r.ignore_all(params, f"{key}.params", "the optimizer is not modelled")
        return None
    implementation = _torch_implementation(r, f"{key}.params", params, used)
    note = f"{name} keeps one buffer per parameter, as SGD with momentum does"
    r.assume("training.optimizer", "sgd-momentum", note)
    return "sgd-momentum", implementation, note


def _adam(r: Reading, lower: str, key: str, params: dict[str, Any], used: set[str],
          offload: bool) -> tuple[str, str, str]:
    """DeepSpeed's Adam and AdamW: FusedAdam (AdamW unless adam_w_mode is false), CPU Adam when offloaded, or
    torch.optim's with torch_adam."""
    torch_adam = params.get("torch_adam", False)
    if "torch_adam" in params:
        r.boolean(f"{key}.params.torch_adam", torch_adam)
        used.add("torch_adam")
    w_mode = params.get("adam_w_mode", True)
    if "adam_w_mode" in params:
        r.boolean(f"{key}.params.adam_w_mode", w_mode)
        used.add("adam_w_mode")
    optimizer = "adamw" if lower == "adamw" or w_mode else "adam"
    if torch_adam:
        return optimizer, _torch_implementation(r, f"{key}.params", params, used), "torch.optim's Adam(W) (torch_adam)"
    if offload:
        return optimizer, "fused", "DeepSpeedCPUAdam on the offloaded state (offload is not modelled)"
    return optimizer, "fused", "DeepSpeed's FusedAdam: one multi-tensor kernel, no copy of the state during the step"


def _torch_implementation(r: Reading, key: str, params: dict[str, Any], used: set[str]) -> str:
    """torch.optim's implementation from its foreach/fused keyword arguments (default: foreach on CUDA)."""
    fused = params.get("fused")
    foreach = params.get("foreach")
    if fused is not None:
        used.add("fused")
        if r.boolean(f"{key}.fused", fused):
            return "fused"
    if foreach is not None:
        used.add("foreach")
        if not r.boolean(f"{key}.foreach", foreach):
            return "for-loop"
    return "foreach"


def _tensor_parallel(value: Any, r: Reading, key: str) -> None:
    value = r.mapping(key, value)
    for name, item in value.items():
        if name == "autotp_size":
            size = r.integer(f"{key}.{name}", item, low=0, high=1 << 20)
            r.said("parallelism.tensor", max(size, 1), f"{key}.{name}", item,
                   note="AutoTP: 0 turns tensor parallelism off")
        else:
            r.ignore_all(item, f"{key}.{name}")
