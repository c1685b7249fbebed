"""accelerate's launch configuration (the YAML `accelerate config` writes, default_config.yaml).

Keys from accelerate's ClusterConfig (accelerate/commands/config/config_args.py) and what `accelerate config`
asks (commands/config/cluster.py): distributed_type (NO, MULTI_GPU, DEEPSPEED, FSDP, MEGATRON_LM, ...),
mixed_precision (no, fp16, bf16, fp8), num_processes (every process of the job, across machines),
deepspeed_config (zero_stage, gradient_accumulation_steps, offload_*_device, deepspeed_config_file; the ZeRO
stage defaults to 2 in DeepSpeedPlugin), fsdp_config (fsdp_version, fsdp_reshard_after_forward, the older
fsdp_sharding_strategy, fsdp_activation_checkpointing, fsdp_offload_params), parallelism_config
(parallelism_config_tp_size, _dp_shard_size, _dp_replicate_size, _cp_size; FSDP2) and megatron_lm_config
(megatron_lm_tp_degree, _pp_degree, _num_micro_batches, _sequence_parallelism, _recompute_activations,
_use_distributed_optimizer).

The memory convention (training.framework) follows the plugin: DEEPSPEED from ZeRO stage 1 on is DeepSpeed's,
FSDP with fsdp_version 2 and reshard_after_forward (its default) is FSDP2's, MEGATRON_LM is Megatron-LM's
distributed optimizer's (app.configs.fsdp says why FSDP1 is counted with the pytorch convention). cp_size splits
each sequence over that many GPUs (accelerate/parallelism_config.py, ParallelismConfig; `accelerate config` writes it
as parallelism_config_cp_size, commands/config/cluster.py): num_processes counts them too.
"""

from __future__ import annotations

from typing import Any, Final

from app.configs import fsdp
from app.configs.common import COMPILE, FP8, NO_MEMORY, PATH, Reading, describe
from app.configs.deepspeed import convention as deepspeed_convention
from app.configs.deepspeed import offload_facts

DISTRIBUTED_TYPES: Final = ("NO", "MULTI_GPU", "DEEPSPEED", "FSDP", "MEGATRON_LM", "MULTI_CPU", "MULTI_NPU",
                            "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU", "XLA", "MULTI_HPU", "MULTI_NEURON")
MIXED_PRECISION: Final = {"no": "no", "fp16": "fp16", "bf16": "bf16", "fp8": "bf16"}
DISTRIBUTED_OPTIMIZER_NOTE: Final = ("Megatron-LM's distributed optimizer shards the fp32 master weights and the "
                                     "optimizer state over the data-parallel GPUs, as ZeRO stage 1 does")
MEGATRON_NOTE: Final = ("Megatron-LM's convention: fp32 main gradients beside the master copy, sharded with the "
                        "optimizer state by its distributed optimizer")
DDP_WHY: Final = "plain data parallelism (DDP), which the pytorch convention counts"
SECTIONS: Final = ("deepspeed_config", "fsdp_config", "megatron_lm_config", "parallelism_config", "dynamo_config")
LAUNCH_KEYS: Final = ("compute_environment", "machine_rank", "gpu_ids", "main_process_ip",
                      "main_process_port", "rdzv_backend", "same_network", "main_training_function",
                      "enable_cpu_affinity", "debug", "tpu_name", "tpu_zone", "tpu_use_cluster", "tpu_use_sudo",
                      "command_file", "commands", "tpu_vm", "tpu_env", "mpirun_config", "downcast_bf16")


def read(data: Any, r: Reading) -> None:
    if not isinstance(data, dict):
        raise r.error("", f"must be a YAML mapping (accelerate's config), got {describe(data)}")
    if "distributed_type" not in data:
        raise r.error("distributed_type", "is missing: accelerate needs it (NO, MULTI_GPU, DEEPSPEED, FSDP, ...)")
    kind = r.choice("distributed_type", data["distributed_type"], DISTRIBUTED_TYPES)
    _distributed_type(kind, r)
    _mixed_precision(data, kind, r)
    _processes(data, r)
    _sections(data, kind, r)
    for key, value in data.items():
        if key in ("distributed_type", "mixed_precision", "num_processes", *SECTIONS):
            continue
        if key in LAUNCH_KEYS:
            r.ignore_all(value, key, "how processes are launched; no memory of its own")
        elif key == "use_cpu":
            r.ignore(key, "training on the CPU: the estimate is for GPUs" if value else "no: GPUs are used")
        else:
            r.ignore_all(value, key)


def _distributed_type(kind: str, r: Reading) -> None:
    """The engine distributed_type names, and the convention it sets."""
    if kind in ("DEEPSPEED", "FSDP"):
        r.said("engine", kind.lower(), "distributed_type", kind, field="")
        r.also("distributed_type", kind, "parallelism.zero_stage", f"{kind} shards the model states")
    elif kind == "MEGATRON_LM":
        r.said("engine", "megatron", "distributed_type", kind, field="")
        r.said("training.implementation", "megatron", "distributed_type", kind,
               note="accelerate's Megatron-LM plugin runs the model with Megatron-LM's layers")
        r.said("training.framework", "megatron", "distributed_type", kind, note=MEGATRON_NOTE)
    elif kind not in ("NO", "MULTI_GPU"):
        r.ignore("distributed_type", f"{kind}: the estimate is for CUDA GPUs")
    else:
        r.also("distributed_type", kind, "parallelism.zero_stage", "plain data parallelism (DDP), no sharding")
        r.said("parallelism.zero_stage", 0, "distributed_type", kind, field="")
        r.default("training.framework", "pytorch", "distributed_type", DDP_WHY)


def _mixed_precision(data: dict[str, Any], kind: str, r: Reading) -> None:
    precision = data.get("mixed_precision")
    if precision is not None:
        amp = r.choice("mixed_precision", precision, MIXED_PRECISION)
        r.said("amp", amp, "mixed_precision", precision)
        if precision == "fp8":
            r.assume("training.precision", "bf16", f"mixed_precision fp8: {_fp8_why(data, kind)}; accelerate runs "
                                                   "bf16 autocast around the fp8 matmuls, counted as bf16")
    else:
        r.default("amp", "no", "mixed_precision", "accelerate's default: no mixed precision")


def _processes(data: dict[str, Any], r: Reading) -> None:
    """num_processes, one per GPU of the job, and the GPUs a machine holds (num_processes ÷ num_machines)."""
    processes = data.get("num_processes")
    if processes is None:
        return
    count = r.integer("num_processes", processes, low=-1)
    if count == 0:
        raise r.error("num_processes", "must be -1 (set at launch) or at least 1")
    if count > 0:
        r.said("world_size", count, "num_processes", count,
               note="every process of the job, one per GPU: data × tensor × pipeline")
        machines = data.get("num_machines", 1)
        machines = r.integer("num_machines", machines) if machines is not None else 1
        if count % machines == 0:
            r.said("parallelism.gpus_per_node", count // machines, "num_machines", machines,
                   note="num_processes ÷ num_machines: the GPUs one host's memory serves")
        else:
            r.ignore("num_machines", f"{count} processes do not split evenly over {machines} machines")
    else:
        r.ignore("num_processes", "-1: the number of processes is given at launch")


def _sections(data: dict[str, Any], kind: str, r: Reading) -> None:
    """The plugins' sections (read where distributed_type runs them), and the plugin's defaults without one."""
    for key in SECTIONS:
        value = data.get(key)
        if value in (None, {}):
            continue
        value = r.mapping(key, value)
        if key == "deepspeed_config":
            _deepspeed(value, r, active=kind == "DEEPSPEED")
        elif key == "fsdp_config":
            _fsdp(value, r, kind)
        elif key == "megatron_lm_config":
            _megatron(value, r, active=kind == "MEGATRON_LM")
        elif key == "parallelism_config":
            _parallelism(value, r)
        else:
            r.ignore_all(value, key, COMPILE)
    _plugin_defaults(data, kind, r)


def _fsdp(config: dict[str, Any], r: Reading, kind: str) -> None:
    key = "fsdp_config"
    if kind == "FSDP":
        fsdp.read_config(r, key, config, strategy=None, version=fsdp.find_version(r, key, config))
    else:
        r.ignore_all(config, key, f"distributed_type is {kind}, not FSDP")


def _plugin_defaults(data: dict[str, Any], kind: str, r: Reading) -> None:
    """FSDP's or DeepSpeed's plugin defaults, where distributed_type runs it without its section."""
    if kind == "FSDP" and data.get("fsdp_config") in (None, {}):
        fsdp.default_strategy(r, "fsdp_config")
        fsdp.convention(r, fsdp.Version(), 3, "fsdp_config")
    if kind == "DEEPSPEED" and data.get("deepspeed_config") in (None, {}):
        r.default("parallelism.zero_stage", 2, "deepspeed_config.zero_stage",
                  "accelerate's DeepSpeed plugin defaults to ZeRO stage 2")
        deepspeed_convention(r, 2, "distributed_type", kind)


def _fp8_why(data: dict[str, Any], kind: str) -> str:
    """Why accelerate's fp8 is counted without training.fp8: its Transformer Engine backend (fp8_config.backend TE)
    converts the Hugging Face model's nn.Linear layers to te.Linear (accelerate/utils/transformer_engine.py,
    convert_model), which trainmem does not model (its Transformer Engine recipes are Megatron-LM's); and its
    Megatron-LM plugin passes only fp16 or bf16 on to Megatron-LM (accelerate/utils/dataclasses.py,
    MegatronLMPlugin.set_mixed_precision), so no --fp8-format reaches it."""
    config = data.get("fp8_config")
    backend = str(config.get("backend", "")).upper() if isinstance(config, dict) else ""
    if kind == "MEGATRON_LM":
        return ("accelerate's Megatron-LM plugin passes only fp16 or bf16 to Megatron-LM "
                "(MegatronLMPlugin.set_mixed_precision), so its layers run without FP8")
    if backend == "TE":
        return ("Transformer Engine's te.Linear in a Hugging Face model (accelerate's convert_model) is not modelled: "
                "training.fp8's Transformer Engine recipes are Megatron-LM's")
    return FP8


def _deepspeed(config: dict[str, Any], r: Reading, *, active: bool) -> None:
    prefix = "deepspeed_config"
    if not active:
        r.ignore_all(config, prefix, "distributed_type is not DEEPSPEED")
        return
    if "zero_stage" not in config and not config.get("deepspeed_config_file"):
        r.default("parallelism.zero_stage", 2, f"{prefix}.zero_stage",
                  "accelerate's DeepSpeed plugin defaults to ZeRO stage 2")
        deepspeed_convention(r, 2, "distributed_type", "DEEPSPEED")
    devices: dict[str, tuple[str, str]] = {}
    for name, value in config.items():
        _deepspeed_setting(r, name, value, f"{prefix}.{name}", devices)
    offload_facts(r, devices)


def _deepspeed_setting(r: Reading, name: str, value: Any, key: str, devices: dict[str, tuple[str, str]]) -> None:
    """One deepspeed_config key: the stage, the accumulation, an offload device (into `devices`), or a reason."""
    if name == "zero_stage":
        stage = r.integer(key, value, low=0, high=3)
        r.said("parallelism.zero_stage", stage, key)
        deepspeed_convention(r, stage, key, value)
    elif name == "gradient_accumulation_steps":
        r.said("training.gradient_accumulation_steps", r.integer(key, value), key)
    elif name == "deepspeed_config_file":
        if value:
            r.ignore(key, f"{PATH}: add the DeepSpeed config as another file to read it")
    elif name in ("offload_optimizer_device", "offload_param_device"):
        _offload_device(r, "optimizer" if name == "offload_optimizer_device" else "parameters", value, key, devices)
    elif name in ("offload_optimizer_nvme_path", "offload_param_nvme_path"):
        r.ignore(key, PATH)
    elif name == "gradient_clipping":
        r.ignore(key, NO_MEMORY)
    else:
        r.ignore_all(value, key, "how DeepSpeed is launched or saves; no memory of its own")


def _offload_device(r: Reading, what: str, value: Any, key: str, devices: dict[str, tuple[str, str]]) -> None:
    device = "none" if value is None else r.choice(key, value, ("none", "cpu", "nvme"))
    if device == "none":
        r.ignore(key, "none: not offloaded")
    else:
        devices[what] = (device, key)


# megatron_lm_config's integers: the field each sets, and a note.
MEGATRON_INTS: Final = {
    "megatron_lm_tp_degree": ("parallelism.tensor", ""),
    "megatron_lm_pp_degree": ("parallelism.pipeline", ""),
    "megatron_lm_num_micro_batches": ("training.gradient_accumulation_steps",
                                      "micro-batches per step per data-parallel rank"),
}


def _megatron(config: dict[str, Any], r: Reading, *, active: bool) -> None:
    prefix = "megatron_lm_config"
    if not active:
        r.ignore_all(config, prefix, "distributed_type is not MEGATRON_LM")
        return
    for name, value in config.items():
        key = f"{prefix}.{name}"
        if name in MEGATRON_INTS:
            field, note = MEGATRON_INTS[name]
            r.said(field, r.integer(key, value), key, note=note)
        elif name == "megatron_lm_sequence_parallelism":
            r.said("parallelism.sequence_parallel", r.boolean(key, value), key)
        elif name == "megatron_lm_recompute_activations":
            on = r.boolean(key, value)
            r.said("training.activation_checkpointing", "selective" if on else "none", key, value,
                   note="Megatron-LM's --recompute-activations: selective recomputation of the attention core")
        elif name == "megatron_lm_use_distributed_optimizer":
            if r.boolean(key, value):
                r.said("parallelism.zero_stage", 1, key, value, note=DISTRIBUTED_OPTIMIZER_NOTE)
                r.assume("parallelism.zero_stage", 1, DISTRIBUTED_OPTIMIZER_NOTE)
            else:
                r.said("parallelism.zero_stage", 0, key, value)
        else:
            r.ignore_all(value, key, NO_MEMORY if "clipping" in name else None)


def _parallelism(config: dict[str, Any], r: Reading) -> None:
    data = 1
    data_keys = []
    for name, value in config.items():
        key = f"parallelism_config.{name}"
        bare = name.removeprefix("parallelism_config_")
        if bare == "tp_size":
            r.said("parallelism.tensor", r.integer(key, value), key)
        elif bare in ("dp_shard_size", "dp_replicate_size"):
            data *= r.integer(key, value)
            data_keys.append(key)
        elif bare == "cp_size":
            r.said("parallelism.context", r.integer(key, value), key,
                   note="each sequence split over this many GPUs (ring attention)")
        else:
            r.ignore_all(value, key)
    if data_keys:
        r.said("parallelism.data", data, data_keys[0], data,
               note="dp_shard_size × dp_replicate_size" if len(data_keys) > 1 else "")
        for key in data_keys[1:]:
            r.also(key, config[key.split(".", 1)[1]], "parallelism.data")
