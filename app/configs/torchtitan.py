"""torchtitan's TOML job configuration (torchtitan/models/*/train_configs/*.toml).

Sections and defaults from torchtitan's JobConfig (torchtitan/config/job_config.py, as of the last TOML
release, February 2026; newer torchtitan configures jobs in Python): [model] name/flavor, [training]
local_batch_size (batch_size before it; default 8), global_batch_size (-1: local × data-parallel),
seq_len (2048), dtype (float32; bfloat16 is pure bf16, no fp32 copy), mixed_precision_param (bfloat16: applied
by FSDP when data_parallel_shard_degree > 1, by torch.autocast under DDP or one GPU), [parallelism]
data_parallel_replicate_degree (1), data_parallel_shard_degree (-1: the GPUs left over), tensor_parallel_degree,
pipeline_parallel_degree, context_parallel_degree, fsdp_reshard_after_forward ("default" reshards after forward
unless pipeline parallelism runs: torchtitan/models/llama3/infra/parallelize.py, apply_fsdp); [activation_checkpoint]
mode (selective by default, every second layer: training.recompute_every) and selective_ac_option ('op' or a
layer interval);
[optimizer] name (AdamW) and implementation (fused by default).

The llama3 flavours 8B, 70B and 405B are the Llama 3 8B, 70B and Llama 3.1 405B shapes
(torchtitan/models/llama3/__init__.py: dim, n_layers, n_heads, n_kv_heads, ffn_dim_multiplier, multiple_of);
torchtitan's training step deletes the logits before backward (train.py, 'del pred'), as the Trainer does.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any, Final

from app.configs import fsdp
from app.configs.common import COMPILE, FP8, MOE, NO_MEMORY, PATH, Reading, describe
from app.core import DomainError

FLAVOURS: Final = {
    ("llama3", "8B"): "llama-3-8b", ("llama3", "8B_flex"): "llama-3-8b", ("llama3", "8B_varlen"): "llama-3-8b",
    ("llama3", "70B"): "llama-3-70b", ("llama3", "405B"): "llama-3.1-405b",
    ("llama2", "7B"): "llama-2-7b", ("llama2", "13B"): "llama-2-13b", ("llama2", "70B"): "llama-2-70b",
}
# torchtitan/models/llama3/__init__.py "debugmodel": dim 256, n_layers 6, n_heads 16, vocab_size 2048; the FFN is
# int(2 × 4 × 256 / 3) = 682 rounded up to a multiple of 256 (multiple_of's default) = 768; a separate output layer.
ARCHITECTURES: Final = {
    (name, flavor): {"num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 16, "num_key_value_heads": 16,
                     "intermediate_size": 768, "vocab_size": 2048, "max_position_embeddings": 131072,
                     "tie_word_embeddings": False, "mlp": "swiglu", "norm": "rmsnorm", "position_embedding": "rope"}
    for name, flavor in (("llama3", "debugmodel"), ("llama3", "debugmodel_flex_attn"), ("llama3", "debugmodel_varlen_attn"))
}
DEFAULT_SHARD: Final = 8  # run_train.sh: NGPU=${NGPU:-"8"}; the 70B and 405B configs say they are for 64 and more
LOOP_WHY: Final = "torchtitan's training step deletes the logits before backward (train.py: 'del pred'): only the loss is kept"
FSDP_NOTE: Final = ("FSDP2 keeps the sharded parameters in fp32 as the master copy and gathers bf16 copies for "
                    "compute (mixed_precision_param)")


# tomllib's cost grows with the square of a dotted key's parts (it keeps every prefix of a key) and its plain parsing
# runs near 2 MB/s: torchtitan's own job configs are under 10 KB, their longest key three parts.
MAX_TOML_BYTES: Final = 64 * 1024
# A dotted key lies on one line (TOML 1.0: dot-sep = ws "." ws, ws = space or tab), so the sum over lines of the
# square of their dots bounds what tomllib stores for keys: 1,000,000 is one key of 1,000 parts, about 20 ms.
MAX_DOT_SQUARES: Final = 1_000_000


def loads(text: str, field: str) -> Any:
    """TOML as data, its size and its dotted keys bounded before the parser sees them."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TOML_BYTES:
        raise DomainError(field, f"is larger than {MAX_TOML_BYTES:,} bytes: no torchtitan job config is")
    if sum(line.count(".") ** 2 for line in text.splitlines()) > MAX_DOT_SQUARES:
        raise DomainError(field, "has keys of too many dotted parts: torchtitan's keys have at most three")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise DomainError(field, f"is not valid TOML: {error}") from None
    except (RecursionError, ValueError) as error:
        raise DomainError(field, f"is not TOML trainmem reads: {error}") from None


def read(data: Any, r: Reading) -> None:
    if not isinstance(data, dict):
        raise r.error("", f"must be a TOML table, got {describe(data)}")
    sections = {name: r.mapping(name, value) for name, value in data.items() if isinstance(value, dict)}
    for name, value in data.items():
        if not isinstance(value, dict):
            r.ignore(name, "a key outside any section: torchtitan reads none")
    model = sections.get("model", {})
    training = sections.get("training", {})
    parallel = sections.get("parallelism", {})
    checkpointing = sections.get("activation_checkpoint")
    optimizer = sections.get("optimizer", {})
    experimental = sections.get("experimental", {})

    _model(model, r)
    _optimizer(optimizer, r)
    tensor, pipeline, data_degree, shard = _parallelism(parallel, experimental, r)  # shard: the FSDP degree
    _float8(sections.get("float8"), r)
    _training(training, r, data_degree)
    _precision(training, r, shard=shard, tensor=tensor, pipeline=pipeline, data=data_degree)
    _checkpointing(checkpointing, r)
    r.said("training.implementation", "transformers", "model.name", model.get("name", "llama3"), field="")
    r.default("training.loop", "hf-trainer", "(torchtitan)", LOOP_WHY)
    r.default("training.attention", "sdpa", "model.flavor", "torchtitan's attention is PyTorch's "
                                                            "scaled_dot_product_attention")
    for name, value in sections.items():
        if name in ("model", "training", "parallelism", "activation_checkpoint", "optimizer", "experimental"):
            continue
        if name == "float8":
            continue  # _float8
        why = {"quantize": FP8, "mx": FP8, "compile": COMPILE, "job": NO_MEMORY, "metrics": NO_MEMORY,
               "profiling": NO_MEMORY, "checkpoint": NO_MEMORY, "comm": NO_MEMORY, "lr_scheduler": NO_MEMORY,
               "validation": "evaluation, not the training step", "fault_tolerance": NO_MEMORY,
               "memory_estimation": NO_MEMORY, "debug": NO_MEMORY}.get(name)
        r.ignore_all(value, name, why)


def _float8(section: dict[str, Any] | None, r: Reading) -> None:
    """torchtitan's [float8] section (its Float8LinearConverter): float8 all-gather with FSDP2, when the model's
    converters turn float8 on and the parameters are sharded at ZeRO stage 3 by the fsdp2 convention."""
    if section is None:
        return
    converting = any(fact.name == "training.fp8" for fact in r.facts)
    sharded = any(fact.name == "training.framework" and fact.value == "fsdp2" for fact in r.facts)
    for key, value in section.items():
        if key == "enable_fsdp_float8_all_gather":
            _float8_all_gather(value, r, applies=converting and sharded)
        elif key == "recipe_name":
            r.ignore(f"float8.{key}", "rowwise and tensorwise scaling keep the same float8 copies (one byte per "
                                      "element; rowwise adds a scale per row)")
        elif key == "filter_fqns":
            r.ignore(f"float8.{key}", "the estimate converts every decoder layer's linear layers and not the output "
                                      "layer, as torchtitan's default filter does")
        else:
            r.ignore_all(value, f"float8.{key}", FP8)


def _float8_all_gather(value: Any, r: Reading, *, applies: bool) -> None:
    key = "float8.enable_fsdp_float8_all_gather"
    on = r.boolean(key, value)
    if on and applies:
        r.said("training.fp8", "torchao-fsdp-fp8", key, value,
               note="FSDP2 gathers the float8 linear weights in one byte each")
    elif on:
        r.ignore(key, "float8 all-gather needs the float8 converter (model.converters) and FSDP "
                      "sharding at ZeRO stage 3")
    else:
        r.ignore(key, "off")


def _model(model: dict[str, Any], r: Reading) -> None:
    name = model.get("name", "llama3")
    flavor = model.get("flavor", "debugmodel")
    if "name" in model:
        r.string("model.name", name)
    if "flavor" in model:
        r.string("model.flavor", flavor)
    _flavour(model, name, flavor, r)
    for key, value in model.items():
        if key in ("name", "flavor"):
            continue
        if key in ("hf_assets_path", "tokenizer_path", "hf_assets_url"):
            r.ignore(f"model.{key}", PATH)
        elif key == "converters":
            _converters(value, r)
        else:
            r.ignore_all(value, f"model.{key}")


def _flavour(model: dict[str, Any], name: str, flavor: str, r: Reading) -> None:
    """The model a name and flavour make: its architecture, a preset of its shape, or neither."""
    preset = FLAVOURS.get((name, flavor))
    arch = ARCHITECTURES.get((name, flavor))
    if arch:
        r.said("model", dict(arch), "model.flavor", f"{name} {flavor}", field="model.hidden_size",
               note=f"torchtitan's {name} {flavor}: its TransformerModelArgs")
        if "name" in model:
            r.also("model.name", name, "model.hidden_size")
    elif preset:
        r.said("model", {"preset": preset}, "model.flavor", f"{name} {flavor}", field="model.preset",
               note=f"torchtitan's {name} {flavor} has the shape of the preset {preset}")
        if "name" in model:
            r.also("model.name", name, "model.preset")
    else:
        r.ignore("model.flavor" if "flavor" in model else "model.name",
                 f"torchtitan's {name} {flavor} is not a shape trainmem has a preset for "
                 f"({', '.join(f'{n} {f}' for n, f in [*FLAVOURS, *ARCHITECTURES])}): give the model's architecture")
        if "flavor" in model and "name" in model:
            r.ignore("model.name", f"{name} {flavor}: no preset")


def _converters(value: Any, r: Reading) -> None:
    converters = value if isinstance(value, list) else [value]
    if "float8" in converters:
        r.said("training.fp8", "torchao", "model.converters", value,
               note="torchao's Float8Linear on the decoder layers' linear layers (torchtitan filters out the "
               "output layer)")
    else:
        r.ignore("model.converters", FP8 if value else "no converters")


def _optimizer(optimizer: dict[str, Any], r: Reading) -> None:
    name = optimizer.get("name", "AdamW")
    key = "optimizer.name"
    mapped = {"AdamW": "adamw", "Adam": "adam"}.get(r.string(key, name)) if "name" in optimizer else "adamw"
    if mapped is None:
        r.ignore(key, f"the {name} optimizer is not modelled here: AdamW assumed")
        mapped = "adamw"
    implementation = optimizer.get("implementation", "fused")
    if "implementation" in optimizer:
        implementation = r.choice("optimizer.implementation", implementation, ("for-loop", "foreach", "fused"))
    if "name" in optimizer:
        r.said("training.optimizer", mapped, key, name)
    else:
        r.default("training.optimizer", mapped, key, "torchtitan's default optimizer, AdamW")
    if "implementation" in optimizer:
        r.said("training.optimizer_implementation", implementation, "optimizer.implementation")
    else:
        r.default("training.optimizer_implementation", "fused", "optimizer.implementation",
                  "torchtitan's default optimizer implementation, fused")
    for other, value in optimizer.items():
        if other not in ("name", "implementation"):
            r.ignore(f"optimizer.{other}", "the update happens in backward: not modelled" if other ==
                     "early_step_in_backward" and value else NO_MEMORY)


@dataclass(frozen=True)
class _Degrees:
    """The [parallelism] degrees as given, each with the key that gave it (None: torchtitan's default)."""

    tensor: int
    tensor_key: str | None
    pipeline: int
    pipeline_key: str | None
    context: int
    context_key: str | None
    replicate: int
    replicate_key: str | None
    shard: int  # -1: the GPUs left over
    shard_key: str | None


def _parallelism(parallel: dict[str, Any], experimental: dict[str, Any], r: Reading) -> tuple[int, int, int, int]:
    """(tensor, pipeline, data, FSDP shard degree: dp_shard × context, ParallelDims.fsdp_enabled)."""
    d = _degrees(parallel, experimental, r)
    _model_parallel(d, r)
    shard, data, key = _data_parallel(d, r)
    _sharding(parallel, d, shard, key, r)
    _other_parallelism(parallel, experimental, d, r)
    return d.tensor, d.pipeline, data, shard * d.context  # FSDP shards over data_parallel_shard × context


def _degrees(parallel: dict[str, Any], experimental: dict[str, Any], r: Reading) -> _Degrees:
    def degree(name: str, default: int, *, where: dict[str, Any] = parallel, section: str = "parallelism",
               low: int = 1) -> tuple[int, str | None]:
        if name in where:
            return r.integer(f"{section}.{name}", where[name], low=low), f"{section}.{name}"
        return default, None

    tensor, tensor_key = degree("tensor_parallel_degree", 1)
    pipeline, pipeline_key = degree("pipeline_parallel_degree", 1)
    if pipeline_key is None and "pipeline_parallel_degree" in experimental:  # before it moved to [parallelism]
        pipeline, pipeline_key = degree("pipeline_parallel_degree", 1, where=experimental, section="experimental")
    context, context_key = degree("context_parallel_degree", 1)
    replicate, replicate_key = degree("data_parallel_replicate_degree", 1)
    shard, shard_key = degree("data_parallel_shard_degree", -1, low=-1)
    if shard == 0:
        raise r.error("parallelism.data_parallel_shard_degree", "must be -1 (the GPUs left over) or at least 1")
    return _Degrees(tensor, tensor_key, pipeline, pipeline_key, context, context_key, replicate, replicate_key,
                    shard, shard_key)


def _model_parallel(d: _Degrees, r: Reading) -> None:
    """Tensor (with torchtitan's sequence parallelism), pipeline and context parallelism."""
    if d.tensor_key:
        r.said("parallelism.tensor", d.tensor, d.tensor_key)
    if d.pipeline_key:
        r.said("parallelism.pipeline", d.pipeline, d.pipeline_key)
    if d.tensor > 1:
        r.said("parallelism.sequence_parallel", True, d.tensor_key or "parallelism.tensor_parallel_degree", d.tensor,
               note="torchtitan's tensor parallelism shards the norms and dropout over the sequence "
                    "(SequenceParallel)")
        r.assume("parallelism.sequence_parallel", True, "torchtitan applies sequence parallelism with tensor "
                                                        "parallelism (parallelize_llama)")
    if d.context_key:
        r.said("parallelism.context", d.context, d.context_key,
               note="each sequence split over this many GPUs (ring attention); FSDP shards over data × context")


def _data_parallel(d: _Degrees, r: Reading) -> tuple[int, int, str]:
    """(FSDP shard degree, data-parallel degree, the key that says it): shard × replicate, HSDP counted as FSDP."""
    shard, replicate = d.shard, d.replicate
    if shard == -1:
        shard = DEFAULT_SHARD
        r.assume("parallelism.data", shard * replicate,
                 f"data_parallel_shard_degree -1 takes the GPUs left over after the other degrees; the file does not "
                 f"say how many GPUs run: {DEFAULT_SHARD} FSDP shards assumed (a node of 8 GPUs per tensor × "
                 f"pipeline group, {DEFAULT_SHARD * d.tensor * d.pipeline * d.context * replicate} GPUs in all; "
                 "torchtitan's run_train.sh starts 8)")
    data = shard * replicate
    if shard > 1 and replicate > 1:
        note = (f"HSDP: sharded over {shard} GPUs, replicated {replicate} times; the estimate shards over all "
                f"{data} data-parallel GPUs")
        r.assume("parallelism.zero_stage", 3, note)
    key = d.shard_key or d.replicate_key or "parallelism.data_parallel_shard_degree"
    r.said("parallelism.data", data, key, shard if d.shard_key else replicate,
           note="data_parallel_shard_degree × data_parallel_replicate_degree")
    if d.shard_key and d.replicate_key:
        r.also(d.replicate_key, replicate, "parallelism.data")
    return shard, data, key


def _sharding(parallel: dict[str, Any], d: _Degrees, shard: int, key: str, r: Reading) -> None:
    """FSDP2 when anything is sharded: ZeRO stage 3, or 2 when the layers stay gathered after forward."""
    reshard_key = "parallelism.fsdp_reshard_after_forward"
    reshard = parallel.get("fsdp_reshard_after_forward", "default")
    if "fsdp_reshard_after_forward" in parallel:
        reshard = r.choice(reshard_key, reshard, ("default", "always", "never"))
    if shard > 1 or d.context > 1:
        _fsdp2(parallel, d, shard, key, reshard, r)
    else:
        r.said("parallelism.zero_stage", 0, key, shard, note="no sharding (DDP or one GPU)")
        r.default("training.framework", "pytorch", key, "no FSDP: DDP or one GPU, which the pytorch convention counts")
        if "fsdp_reshard_after_forward" in parallel:
            r.ignore("parallelism.fsdp_reshard_after_forward", "no FSDP: nothing is sharded")


def _fsdp2(parallel: dict[str, Any], d: _Degrees, shard: int, key: str, reshard: str, r: Reading) -> None:
    """FSDP2's ZeRO stage: 3, or 2 when the layers stay gathered after forward."""
    # apply_fsdp: "default" reshards after forward unless pipeline parallelism runs (reshard_after_forward =
    # not pp_enabled), to spare each micro-batch an all-gather
    gathered = reshard == "never" or (reshard == "default" and d.pipeline > 1)
    stage_raw: Any
    if "fsdp_reshard_after_forward" in parallel:
        stage_key, stage_raw = "parallelism.fsdp_reshard_after_forward", reshard
    elif gathered:
        stage_key, stage_raw = d.pipeline_key or "parallelism.pipeline_parallel_degree", d.pipeline
    else:
        stage_key, stage_raw = key, shard
    r.said("engine", "fsdp", key, shard, field="")
    if gathered:
        why = (f"fsdp_reshard_after_forward {reshard}" + (" with pipeline parallelism" if reshard == "default"
                                                          else "") + ": FSDP2 keeps each layer's parameters "
               "gathered after forward: ZeRO stage 2")
        r.said("parallelism.zero_stage", 2, stage_key, stage_raw, note=why)
        r.said("training.framework", "pytorch", stage_key, stage_raw, note=fsdp.FSDP2_GATHERED_WHY)
        r.assume("training.framework", "pytorch", fsdp.FSDP2_GATHERED_WHY)
    else:
        r.said("parallelism.zero_stage", 3, stage_key, stage_raw,
               note="FSDP2 shards parameters, gradients and optimizer state: ZeRO stage 3")
        r.said("training.framework", "fsdp2", key, shard, note=fsdp.FSDP2_NOTE)


def _other_parallelism(parallel: dict[str, Any], experimental: dict[str, Any], d: _Degrees, r: Reading) -> None:
    handled = {"tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
               "data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward"}
    for name, value in parallel.items():
        if name in handled:
            continue
        why = _parallelism_reason(name)
        if why is None:
            r.ignore_all(value, f"parallelism.{name}")
        else:
            r.ignore(f"parallelism.{name}", why)
    for name, value in experimental.items():
        if name != "pipeline_parallel_degree" or d.pipeline_key != "experimental.pipeline_parallel_degree":
            r.ignore_all(value, f"experimental.{name}")


def _parallelism_reason(name: str) -> str | None:
    """Why a [parallelism] key the degrees do not use is left aside; None to list it by its own name."""
    if name.startswith("expert"):
        return MOE
    if name == "num_layers_per_virtual_pipeline_stage" or name.startswith("pipeline_parallel"):
        return "the pipeline schedule's details are not modelled: 1F1B is assumed"
    if name == "disable_loss_parallel":
        return "the loss is counted as a vocabulary-parallel cross entropy"
    if name in ("enable_async_tensor_parallel", "enable_compiled_autograd"):
        return NO_MEMORY
    return None


# [training] keys that change no count, each with its reason; and those left aside whole for no memory.
TRAINING_IGNORED: Final = {
    "compile": COMPILE,
    **dict.fromkeys(("tensor_parallel_degree", "data_parallel_shard_degree", "data_parallel_replicate_degree",
                     "pipeline_parallel_degree", "context_parallel_degree"),
                    "torchtitan reads the degrees from [parallelism]"),
}
TRAINING_NO_MEMORY: Final = frozenset({"dataset", "dataset_path", "steps", "max_norm", "gc_freq", "gc_debug", "seed",
                                       "deterministic", "warmup_steps", "dataloader"})


def _training(training: dict[str, Any], r: Reading, data: int) -> None:
    local_key = "training.local_batch_size" if "local_batch_size" in training else "training.batch_size"
    local = 8
    if local_key.rsplit(".", 1)[1] in training:
        local = r.integer(local_key, training[local_key.rsplit(".", 1)[1]])
        r.said("training.micro_batch_size", local, local_key)
    else:
        r.default("training.micro_batch_size", 8, local_key, "torchtitan's default local_batch_size")
    if "seq_len" in training:
        r.said("training.seq_len", r.integer("training.seq_len", training["seq_len"]), "training.seq_len")
    else:
        r.default("training.seq_len", 2048, "training.seq_len", "torchtitan's default seq_len")
    _accumulation(training, r, local, data)
    for name, value in training.items():
        if name in ("local_batch_size", "batch_size", "seq_len", "global_batch_size", "dtype",
                    "mixed_precision_param", "mixed_precision_reduce"):
            continue
        if name == "enable_cpu_offload":
            _cpu_offload(value, r)
        elif name in TRAINING_IGNORED:
            r.ignore(f"training.{name}", TRAINING_IGNORED[name])
        else:
            r.ignore_all(value, f"training.{name}", NO_MEMORY if name in TRAINING_NO_MEMORY else None)


def _accumulation(training: dict[str, Any], r: Reading, local: int, data: int) -> None:
    """Micro-batches per step: global_batch_size ÷ (local_batch_size × data-parallel degree); -1 for one."""
    global_batch = training.get("global_batch_size", -1)
    if "global_batch_size" in training:
        global_batch = r.integer("training.global_batch_size", global_batch, low=-1)
    if global_batch <= 0:
        r.default("training.gradient_accumulation_steps", 1, "training.global_batch_size",
                  "global_batch_size -1: local_batch_size × data-parallel degree, no accumulation")
        return
    per_step = local * data
    if global_batch % per_step:
        raise r.error("training.global_batch_size", f"must be a multiple of local_batch_size × data-parallel "
                                                    f"degree ({local} × {data} = {per_step})")
    r.said("training.gradient_accumulation_steps", global_batch // per_step, "training.global_batch_size",
           global_batch, note=f"global_batch_size ÷ (local_batch_size × data-parallel degree {data})")


def _cpu_offload(value: Any, r: Reading) -> None:
    key = "training.enable_cpu_offload"
    if r.boolean(key, value):
        r.said("parallelism.offload", "optimizer+parameters", key, value,
               note="FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer state in host memory")
    else:
        r.ignore(key, "off")


def _precision(training: dict[str, Any], r: Reading, *, shard: int, tensor: int, pipeline: int, data: int) -> None:
    dtype_key, param_key = "training.dtype", "training.mixed_precision_param"
    dtype, param = _dtypes(training, r)
    if "mixed_precision_reduce" in training:
        r.ignore("training.mixed_precision_reduce", "gradients are reduced in fp32 into the fp32 shards")
    if dtype == "bfloat16":
        _pure_bf16(training, r)
        return
    key = param_key if "mixed_precision_param" in training else dtype_key
    said = "mixed_precision_param" in training or "dtype" in training
    value, why = _mixed_precision(param, shard=shard, plain=tensor == 1 and pipeline == 1)
    if said:
        r.said("training.precision", value, key, training.get(key.rsplit(".", 1)[1]), note=why)
        if key != dtype_key and "dtype" in training:
            r.also(dtype_key, dtype, "training.precision")
    else:
        r.default("training.precision", value, key, f"torchtitan's defaults (dtype float32, mixed_precision_param "
                                                    f"bfloat16): {why}")
    if value in ("bf16-fp32-master", "autocast-bf16"):
        r.assume("training.precision", value, why)


def _pure_bf16(training: dict[str, Any], r: Reading) -> None:
    r.said("training.precision", "bf16", "training.dtype", "bfloat16", note="every parameter, gradient and optimizer "
                                                                           "state in bf16, no fp32 copy")
    if "mixed_precision_param" in training:
        r.ignore("training.mixed_precision_param", "training.dtype bfloat16 puts everything in bf16")


def _dtypes(training: dict[str, Any], r: Reading) -> tuple[str, str]:
    """(dtype, mixed_precision_param), torchtitan's defaults float32 and bfloat16."""
    dtype = training.get("dtype", "float32")
    if "dtype" in training:
        dtype = r.choice("training.dtype", dtype, ("float32", "bfloat16"))
    param = training.get("mixed_precision_param", "bfloat16")
    if "mixed_precision_param" in training:
        param = r.choice("training.mixed_precision_param", param, ("bfloat16", "float32"))
    return dtype, param


def _mixed_precision(param: str, *, shard: int, plain: bool) -> tuple[str, str]:
    """The precision mixed_precision_param makes, and why: FSDP2's fp32 shards, autocast alone, or none."""
    if param == "float32":
        return "fp32", "mixed_precision_param float32: fp32 throughout"
    if shard > 1:
        return "bf16-fp32-master", FSDP_NOTE
    if plain:  # no tensor or pipeline parallelism
        return "autocast-bf16", ("without FSDP, tensor or pipeline parallelism torchtitan applies "
                                 "mixed_precision_param with torch.autocast")
    return "fp32", ("with tensor or pipeline parallelism and no FSDP, torchtitan applies no mixed "
                    "precision: fp32")


def _checkpointing(section: dict[str, Any] | None, r: Reading) -> None:
    if section is None:
        r.default("training.activation_checkpointing", "full", "activation_checkpoint.mode",
                  "torchtitan's default, selective with option 2, recomputes every second layer in full")
        r.default("training.recompute_every", 2, "activation_checkpoint.selective_ac_option",
                  "torchtitan's default, 2: every second layer recomputed, the others keep their activations")
        return
    mode = section.get("mode", "selective")
    if "mode" in section:
        mode = r.choice("activation_checkpoint.mode", mode, ("none", "selective", "full", "memory_budget"))
    option = str(section.get("selective_ac_option", "2"))
    if mode == "none":
        r.said("training.activation_checkpointing", "none", "activation_checkpoint.mode", mode)
    elif mode == "full":
        r.said("training.activation_checkpointing", "full", "activation_checkpoint.mode", mode)
    elif mode == "memory_budget":
        r.ignore("activation_checkpoint.mode", "memory_budget recomputation is chosen by the compiler: not modelled")
    else:
        _selective(section, mode, option, r)
    _checkpointing_rest(section, mode, r)


def _checkpointing_rest(section: dict[str, Any], mode: str, r: Reading) -> None:
    """The section's other keys, and the selective option where the mode reads none."""
    for name, value in section.items():
        if name not in ("mode", "selective_ac_option"):
            r.ignore_all(value, f"activation_checkpoint.{name}", NO_MEMORY if name in ("preserve_rng_state",
                         "determinism_check", "debug", "early_stop") else None)
    if "mode" in section and mode in ("none", "full") and "selective_ac_option" in section:
        r.ignore("activation_checkpoint.selective_ac_option", f"mode is {mode}")


def _selective(section: dict[str, Any], mode: str, option: str, r: Reading) -> None:
    """Selective recomputation by its option: op-level (training.activation_checkpointing op), every layer (1, full),
    or every n-th layer in full (training.recompute_every)."""
    key = "activation_checkpoint.selective_ac_option"
    if option == "op":
        r.said("training.activation_checkpointing", "op", key, option,
               note="op-level selective recomputation keeps every other matmul's output and the attention kernel's, "
                    "and recomputes the rest")
    elif option.isdigit() and int(option) == 1:
        r.said("training.activation_checkpointing", "full", key, option, note="every layer recomputed in full")
    elif option.isdigit() and int(option) > 1:
        r.said("training.activation_checkpointing", "full", key, option,
               note=f"every layer i (from 1) with i % {int(option)} == 0 recomputed in full")
        r.said("training.recompute_every", int(option), key, option, note="the others keep their activations")
    else:
        raise r.error(key, f"must be 'op' or a positive integer, got {option!r}")
    if "mode" in section:
        r.also("activation_checkpoint.mode", mode, "training.activation_checkpointing")
