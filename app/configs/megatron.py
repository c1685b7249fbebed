"""Megatron-LM's command line (pretrain_gpt.py's flags, as a launch script writes them).

The text is read as words, never run (`app.configs.megatron_flags`); the architecture its flags describe is read by
`app.configs.megatron_model`, and the run here. torchrun's --nproc_per_node and --nnodes give the number of GPUs,
and so the data-parallel degree: world size ÷ (tensor × pipeline × context).

Flag meanings and defaults from Megatron-LM (megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py): global batch = micro-batch × data-parallel × micro-batches
per step; --bf16 accumulates and reduces gradients in fp32 (accumulate_allreduce_grads_in_fp32), --fp16 in fp16
unless asked; --optimizer adam is fused Adam with decoupled weight decay (AdamW), sgd has momentum 0.9;
--recompute-activations is --recompute-granularity selective. The memory convention is Megatron-LM's own
(training.framework megatron), except under its FSDP (--use-torch-fsdp2, --use-megatron-fsdp). --fp8-format with
--transformer-impl transformer_engine (the default) is Transformer Engine's FP8 with --fp8-recipe's recipe (delayed
by default; tensorwise and mxfp8 too): training.fp8 te-delayed, te-tensorwise, te-mxfp8.
"""

from __future__ import annotations

from typing import Any, Final

from app.configs.common import COMMS, FP8, MOE, NO_MEMORY, PATH, Reading
from app.configs.megatron_flags import LAUNCHER, Flags, flags, words
from app.configs.megatron_flags import TORCHRUN as TORCHRUN
from app.configs.megatron_flags import looks_like as looks_like
from app.configs.megatron_model import architecture

DISTRIBUTED_OPTIMIZER_NOTE: Final = ("Megatron-LM's distributed optimizer shards the fp32 master weights and the "
                                     "optimizer state over the data-parallel GPUs, as ZeRO stage 1 does")
CONVENTION_NOTE: Final = ("Megatron-LM's convention (docs/source/api-guide/dist_optimizer.md): the optimizer steps from "
                          "fp32 main gradients, kept beside the master copy when the gradient buffer is narrower")
FSDP_WHY: Final = ("Megatron-LM's FSDP (--use-torch-fsdp2, --use-megatron-fsdp) replaces the distributed optimizer "
                   "whose buffers the megatron convention counts, and the fsdp2 convention is for transformers' "
                   "modules: counted with the pytorch convention")
AUTO_ATTENTION: Final = ("Transformer Engine picks a fused kernel (no score matrix) for bf16/fp16 and head sizes it "
                         "supports, else the unfused softmax: modelled as sdpa (flash where it runs, else eager)")
SHARDING: Final = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
DTYPES: Final = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16", "fp8": None}
# --fp8-recipe (TransformerConfig.fp8_recipe, default delayed) -> training.fp8: Transformer Engine's recipes as
# megatron/core/fp8_utils.py, get_fp8_recipe builds them; blockwise and custom are not modelled.
FP8_RECIPE_IDS: Final = {"delayed": "te-delayed", "tensorwise": "te-tensorwise", "mxfp8": "te-mxfp8"}
FP8_RECIPE_CHOICES: Final = ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
FP8_DEFAULT_HISTORY: Final = 1  # TransformerConfig.fp8_amax_history_len
# The flags that tune --fp8-format, left aside without it.
FP8_FLAGS: Final = ("fp8-recipe", "fp8-param-gather", "fp8-amax-history-len", "fp8-amax-compute-algo", "fp8-margin",
                    "first-last-layers-bf16")
PATH_FLAGS: Final = frozenset({"data-path", "train-data-path", "valid-data-path", "test-data-path", "vocab-file",
                               "merge-file", "save", "load", "tensorboard-dir", "data-cache-path", "tokenizer-model"})
# --use-precision-aware-optimizer's dtypes, read only with that switch.
OPTIMIZER_DTYPE_FLAGS: Final = ("main-grads-dtype", "main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype")
# The presets whose (weights, gradients, master weights, optimizer states, activations) dtypes a command line can
# name; any other combination is sent as the dtypes themselves.
PRECISION_PRESETS: Final = {"megatron-bf16": ("bf16", "fp32", "fp32", "fp32", "bf16"),
                            "fp16-fp32-master": ("fp16", "fp16", "fp32", "fp32", "fp16"),
                            "fp32": ("fp32", "fp32", None, "fp32", "fp32"),
                            "bf16-fp32-master": ("bf16", "bf16", "fp32", "fp32", "bf16")}


def _uneven_stages(f: Flags, r: Reading) -> None:
    """Uneven first and last pipeline stages: Megatron-LM's decoder layers on each (the rest split evenly)."""
    for flag, field_name in (("decoder-first-pipeline-num-layers", "parallelism.first_stage_layers"),
                             ("decoder-last-pipeline-num-layers", "parallelism.last_stage_layers")):
        if f.has(flag):
            r.said(field_name, f.integer(flag), f.key(flag))


def _virtual_stages(f: Flags, r: Reading, layers: int | None, pipeline: int) -> None:
    """The interleaved schedule: Megatron-LM's chunks per pipeline rank, given directly or as layers per chunk."""
    if f.has("num-virtual-stages-per-pipeline-rank"):
        r.said("parallelism.virtual_stages", f.integer("num-virtual-stages-per-pipeline-rank"),
               f.key("num-virtual-stages-per-pipeline-rank"))
    elif f.has("num-layers-per-virtual-pipeline-stage"):
        chunk = f.integer("num-layers-per-virtual-pipeline-stage") or 1
        if layers:
            r.said("parallelism.virtual_stages", max(1, layers // pipeline // chunk),
                   f.key("num-layers-per-virtual-pipeline-stage"), chunk,
                   note=f"{layers} layers ÷ {pipeline} pipeline ranks ÷ {chunk} layers a chunk")
        else:
            r.ignore(f.key("num-layers-per-virtual-pipeline-stage"), "needs --num-layers to count the chunks")


def read(text: str, r: Reading) -> None:
    tokens, variables = words(text, r.where)
    found = flags(tokens)
    if not found:
        raise r.error("", "has no --flags: expected Megatron-LM's command line (pretrain_gpt.py --num-layers ...)")
    f = Flags(found, r)
    del variables

    tensor = f.integer("tensor-model-parallel-size") or 1
    pipeline = f.integer("pipeline-model-parallel-size") or 1
    context = f.integer("context-parallel-size") or 1
    r.said("training.implementation", "megatron", "(Megatron-LM)", "pretrain_gpt.py", field="",
           note="Megatron-LM's fused layers")
    for name, value in (("tensor-model-parallel-size", tensor), ("pipeline-model-parallel-size", pipeline),
                        ("context-parallel-size", context)):
        if f.has(name):
            r.said(f"parallelism.{name.split('-')[0]}", value, f.key(name))

    layers = architecture(f, r, tensor)
    _virtual_stages(f, r, layers, pipeline)
    _uneven_stages(f, r)
    _batch(f, r, tensor * pipeline * context)
    _precision(f, r)
    _optimizer(f, r)
    _recompute(f, r, layers // pipeline if layers else None)
    _cpu_offloading(f, r)
    _attention(f, r)
    _fp8(f, r)
    _sharding(f, r, tensor)
    r.default("training.loop", "plain", "(Megatron-LM)", "Megatron-LM computes the loss inside the model: the "
                                                         "loop's choice does not apply")
    for name in f.values:
        if name not in f.used:
            r.ignore(f.key(name), _unread_reason(name))


def _unread_reason(name: str) -> str | None:
    """Why a flag no reader used is left aside; None for the reason its name gives."""
    if name in LAUNCHER:
        return "how torchrun starts the processes; no memory of its own"
    if name in ("num-experts", "expert-model-parallel-size", "expert-tensor-parallel-size") or "moe" in name:
        return MOE
    if "fp8" in name:
        return FP8
    if name in PATH_FLAGS:
        return PATH
    if name.startswith(("overlap-", "tp-comm", "no-async", "ddp-", "distributed-timeout")) or "bucket" in name:
        return COMMS
    return None


def _batch(f: Flags, r: Reading, model_parallel: int) -> None:
    micro = f.integer("micro-batch-size")
    if micro is None:
        micro = 1
        r.default("training.micro_batch_size", 1, "--micro-batch-size", "no --micro-batch-size: 1 assumed "
                                                                        "(Megatron-LM requires the flag)")
    else:
        r.said("training.micro_batch_size", micro, "--micro-batch-size")
    seq = f.values.get("seq-length")
    if seq is not None:
        r.said("training.seq_len", f.integer("seq-length"), "--seq-length")
    data, data_key = _data_parallel(f, r, model_parallel)
    _accumulation(f, r, micro, data, data_key)


def _data_parallel(f: Flags, r: Reading, model_parallel: int) -> tuple[int, str | None]:
    """The data-parallel degree from torchrun's GPU count, and the key it came from (None when assumed)."""
    nproc_name = "nproc-per-node"
    nproc = f.integer(nproc_name) if f.has(nproc_name) else None
    nodes = f.integer("nnodes") if f.has("nnodes") else None
    world = nproc * (nodes or 1) if nproc is not None else None
    if world is not None and world % model_parallel:
        r.ignore(f.key(nproc_name), f"torchrun starts {world} GPUs, not a multiple of tensor × pipeline × context = "
                                    f"{model_parallel}: Megatron-LM would refuse this launch, so the GPU count is "
                                    "not used (set --nproc_per_node and --nnodes for the real job)")
        if nodes is not None:
            r.ignore("--nnodes", "see --nproc-per-node")
        world = None
    if world is None:
        r.default("parallelism.data", 1, "--nproc_per_node", "no usable GPU count (torchrun's --nproc_per_node × "
                                                             "--nnodes): one data-parallel rank assumed")
        return 1, None
    data = world // model_parallel
    data_key = f.key(nproc_name)
    r.said("parallelism.data", data, data_key, nproc,
           note=f"{world} GPUs (--nproc_per_node × --nnodes) ÷ {model_parallel} (tensor × pipeline × context)")
    if nodes is not None:
        r.also("--nnodes", nodes, "parallelism.data")
    r.assume("parallelism.data", data, f"torchrun's {world} GPUs ÷ (tensor × pipeline × context = "
                                       f"{model_parallel})")
    r.said("parallelism.gpus_per_node", nproc, data_key, nproc)
    return data, data_key


def _accumulation(f: Flags, r: Reading, micro: int, data: int, data_key: str | None) -> None:
    """Micro-batches per step: --global-batch-size ÷ (micro-batch × data-parallel)."""
    global_batch = f.integer("global-batch-size")
    if global_batch is None:
        r.default("training.gradient_accumulation_steps", 1, "--global-batch-size",
                  "no --global-batch-size: Megatron-LM sets it to micro-batch × data-parallel, one micro-batch a step")
        return
    per_step = micro * data
    if global_batch % per_step:
        raise r.error("--global-batch-size", f"{global_batch} is not a multiple of micro-batch × data-parallel = "
                                             f"{micro} × {data} = {per_step} (Megatron-LM refuses it)")
    steps = global_batch // per_step
    if data_key:
        r.said("training.gradient_accumulation_steps", steps, "--global-batch-size", global_batch,
               note=f"global ÷ (micro-batch {micro} × data-parallel {data}): micro-batches per step")
    else:
        r.said("training.gradient_accumulation_steps", steps, "--global-batch-size", global_batch,
               note="global ÷ micro-batch, with one data-parallel rank assumed")
        r.assume("training.gradient_accumulation_steps", steps, f"--global-batch-size {global_batch} ÷ "
                 f"--micro-batch-size {micro} with one data-parallel rank; with d ranks it is {steps} ÷ d")


def _precision(f: Flags, r: Reading) -> None:
    bf16, fp16 = f.switch("bf16"), f.switch("fp16")
    if bf16 and fp16:
        raise r.error("--fp16", "--bf16 and --fp16 cannot both be given")
    half, key = _half(bf16=bf16, fp16=fp16)
    grads = "fp32" if bf16 or f.switch("accumulate-allreduce-grads-in-fp32") else half
    value = _precision_value(half, *_optimizer_dtypes(f, r, grads))
    if not (bf16 or fp16):
        r.default("training.precision", value, key, "no --bf16 or --fp16: Megatron-LM trains in fp32")
        return
    note = "bf16 weights, gradients accumulated in fp32, an fp32 master copy" if value == "megatron-bf16" else ""
    r.said("training.precision", value, key, True, note=note)


def _half(*, bf16: bool, fp16: bool) -> tuple[str, str]:
    """The weights' dtype, and the flag that states it (--bf16 when neither is given)."""
    if fp16:
        return "fp16", "--fp16"
    return "bf16" if bf16 else "fp32", "--bf16"


def _precision_value(half: str, grads: str, master: str, states: str) -> Any:
    """The preset these dtypes make, else the dtypes themselves."""
    dtypes = {"weights": half, "gradients": grads, "master_weights": None if half == "fp32" else master,
              "optimizer_states": states, "activations": half}
    return next((name for name, d in PRECISION_PRESETS.items() if tuple(dtypes.values()) == d), dtypes)


def _optimizer_dtypes(f: Flags, r: Reading, grads: str) -> tuple[str, str, str]:
    """(gradients, master weights, optimizer states): --use-precision-aware-optimizer's dtypes, else `grads` and
    fp32."""
    if not f.switch("use-precision-aware-optimizer"):
        for name in OPTIMIZER_DTYPE_FLAGS:
            if f.has(name):
                f.text(name)
                r.ignore(f.key(name), "Megatron-LM reads it only with --use-precision-aware-optimizer")
        return grads, "fp32", "fp32"
    r.also("--use-precision-aware-optimizer", True, "training.precision")
    grad_dtype = f.choice("main-grads-dtype", ("fp32", "bf16"))
    if grad_dtype:
        grads = grad_dtype
        r.also("--main-grads-dtype", grad_dtype, "training.precision")
    param_dtype = f.choice("main-params-dtype", ("fp32", "fp16"))
    if param_dtype:
        r.also("--main-params-dtype", param_dtype, "training.precision")
    return grads, param_dtype or "fp32", _moments_dtype(f, r)


def _moments_dtype(f: Flags, r: Reading) -> str:
    """Adam's two moments in one dtype (--exp-avg-dtype, --exp-avg-sq-dtype); fp32 unless both agree on a wider
    than fp8 one."""
    avg = f.choice("exp-avg-dtype", ("fp32", "fp16", "bf16", "fp8"))
    avg_sq = f.choice("exp-avg-sq-dtype", ("fp32", "fp16", "bf16", "fp8"))
    if not (avg or avg_sq):
        return "fp32"
    key = "--exp-avg-dtype" if avg else "--exp-avg-sq-dtype"
    if (avg or "fp32") != (avg_sq or "fp32") or "fp8" in (avg, avg_sq):
        r.ignore(key, "the two Adam moments in different dtypes, or fp8, are not modelled: fp32 assumed")
        return "fp32"
    states = avg or avg_sq or "fp32"
    r.also(key, states, "training.precision")
    return states


def _optimizer(f: Flags, r: Reading) -> None:
    name = f.text("optimizer")
    if name is None or name == "adam":
        value, impl = "adamw", "fused"
        why = "fused Adam with decoupled weight decay (Apex or Transformer Engine FusedAdam, adam_w_mode): AdamW"
        if name is None:
            r.default("training.optimizer", value, "--optimizer", f"Megatron-LM's default optimizer, adam: {why}")
            r.default("training.optimizer_implementation", impl, "--optimizer", why)
        else:
            r.said("training.optimizer", value, "--optimizer", name, note=why)
            r.said("training.optimizer_implementation", impl, "--optimizer", name, note=why)
    elif name == "sgd":
        momentum = f.number("sgd-momentum") if f.has("sgd-momentum") else 0.9
        value = "sgd-momentum" if momentum else "sgd"
        r.said("training.optimizer", value, "--optimizer", name, note=f"momentum {momentum}")
        r.said("training.optimizer_implementation", "fused", "--optimizer", name, note="Apex's FusedSGD")
        if f.has("sgd-momentum"):
            r.also("--sgd-momentum", momentum, "training.optimizer")
    else:
        r.ignore("--optimizer", f"the {name} optimizer is not modelled: AdamW assumed")
        r.default("training.optimizer", "adamw", "--optimizer", f"{name} is not modelled: AdamW assumed")
        r.default("training.optimizer_implementation", "fused", "--optimizer", "with AdamW assumed: fused")


def _recompute(f: Flags, r: Reading, per_stage: int | None) -> None:
    granularity = f.choice("recompute-granularity", ("full", "selective"))
    if f.switch("recompute-activations"):
        if granularity is None:
            granularity = "selective"
            r.said("training.activation_checkpointing", "selective", "--recompute-activations", True,
                   note="--recompute-activations is --recompute-granularity selective")
        else:
            r.ignore("--recompute-activations", "--recompute-granularity is given too")
    elif granularity is not None:
        _recompute_granularity(f, r, granularity, per_stage)
    else:
        r.default("training.activation_checkpointing", "none", "--recompute-granularity",
                  "no --recompute-granularity: no recomputation")
        for name in ("recompute-method", "recompute-num-layers"):
            if f.has(name):
                f.text(name)
                r.ignore(f.key(name), "no --recompute-granularity: nothing is recomputed")


def _recompute_granularity(f: Flags, r: Reading, granularity: str, per_stage: int | None) -> None:
    """--recompute-granularity with its method: block recomputation of only some layers counts as none."""
    method = f.choice("recompute-method", ("uniform", "block"))
    count = f.integer("recompute-num-layers")
    if granularity == "full" and method == "block" and count is not None and (per_stage is None or
                                                                               count < per_stage):
        _first_layers(r, granularity, method, count)
        return
    r.said("training.activation_checkpointing", granularity, "--recompute-granularity", granularity,
           note="full: each layer keeps only its input" if granularity == "full" else
           "selective: the attention core is recomputed")
    for name in ("recompute-method", "recompute-num-layers"):
        if f.has(name):
            r.also(f.key(name), f.values[name], "training.activation_checkpointing")


def _first_layers(r: Reading, granularity: str, method: str, count: int) -> None:
    """Block recomputation of the first `count` layers of each pipeline stage (of none, when 0)."""
    if count == 0:  # Megatron-LM recomputes no layer then
        r.said("training.activation_checkpointing", "none", "--recompute-num-layers", count,
               note="block recomputation of 0 layers recomputes none")
        r.also("--recompute-granularity", granularity, "training.activation_checkpointing")
        r.also("--recompute-method", method, "training.activation_checkpointing")
        return
    r.said("training.activation_checkpointing", "full", "--recompute-granularity", granularity,
           note="full: a recomputed layer keeps only its input")
    r.said("training.recompute_first_layers", count, "--recompute-num-layers", count,
           note=f"--recompute-method block: the first {count} layers of each pipeline stage are recomputed, "
                "the others keep their activations")
    r.also("--recompute-method", method, "training.recompute_first_layers")


def _cpu_offloading(f: Flags, r: Reading) -> None:
    """--cpu-offloading-num-layers N: N > 0 turns Megatron-LM's activation offloading on (arguments.py at d98e8a6;
    there is no --cpu-offloading switch); keeping the pinned buffers across steps changes no GPU memory."""
    count = f.integer("cpu-offloading-num-layers", low=0)
    if count:
        r.said("training.activation_offload", "megatron", "--cpu-offloading-num-layers", count,
               note="Transformer Engine's CPU offloading of the first layers' saved tensors")
        r.said("training.activation_offload_layers", count, "--cpu-offloading-num-layers", count)
    elif count == 0:
        r.ignore("--cpu-offloading-num-layers", "0 layers: nothing is offloaded")
    if f.switch("cpu-offloading-retain-pinned-cpu-buffers"):
        r.ignore("--cpu-offloading-retain-pinned-cpu-buffers", "keeps the pinned host buffers across steps: the same "
                                                                 "host memory, no GPU memory")


def _attention(f: Flags, r: Reading) -> None:
    backend = f.choice("attention-backend", ("flash", "fused", "unfused", "local", "auto"))
    impl = f.choice("transformer-impl", ("transformer_engine", "local", "inference_optimized"))
    if impl:
        r.also("--transformer-impl", impl, "training.attention")
    if f.switch("use-flash-attn"):
        r.said("training.attention", "flash", "--use-flash-attn", True)
    elif backend in ("flash", "fused"):
        r.said("training.attention", "flash", "--attention-backend", backend,
               note="a fused attention kernel (flash or cuDNN) keeps no score matrix")
    elif backend in ("unfused", "local"):
        r.said("training.attention", "eager", "--attention-backend", backend,
               note="the unfused softmax keeps the score matrix")
    elif backend == "auto":
        r.said("training.attention", "sdpa", "--attention-backend", backend, note=AUTO_ATTENTION)
    elif impl != "local":
        r.default("training.attention", "sdpa", "--attention-backend", f"Megatron-LM's default backend, auto: "
                                                                      f"{AUTO_ATTENTION}")
    else:
        r.said("training.attention", "eager", "--transformer-impl", impl, note="the local spec's unfused attention")


def _fp8(f: Flags, r: Reading) -> None:
    """--fp8-format runs the decoder layers' linear layers in FP8 through Transformer Engine
    (TransformerConfig.fp8; megatron/core/fp8_utils.py, get_fp8_recipe and get_fp8_context), with --fp8-recipe's
    recipe (delayed by default). e4m3 and hybrid differ in the gradients' FP8 format, not in bytes."""
    fmt = f.choice("fp8-format", ("e4m3", "hybrid"))
    if fmt is None:
        _ignore_fp8_flags(f, r, "no --fp8-format: Megatron-LM trains without FP8")
        return
    impl = f.values.get("transformer-impl") or "transformer_engine"
    recipe = f.choice("fp8-recipe", FP8_RECIPE_CHOICES) or "delayed"
    value = FP8_RECIPE_IDS.get(recipe)
    if impl != "transformer_engine" or value is None:
        why = (f"--transformer-impl {impl}: Megatron-LM's FP8 runs through Transformer Engine's modules"
               if impl != "transformer_engine" else f"Transformer Engine's {recipe} FP8 recipe is not modelled")
        r.ignore("--fp8-format", f"{why}; {FP8}")
        _ignore_fp8_flags(f, r, why)
        return
    r.said("training.fp8", value, "--fp8-format", fmt, note=f"Transformer Engine FP8, --fp8-recipe {recipe}"
           + ("" if f.has("fp8-recipe") else " (Megatron-LM's default)") + "; e4m3 and hybrid take the same bytes")
    if f.has("fp8-recipe"):
        r.also("--fp8-recipe", recipe, "training.fp8")
    if f.has("transformer-impl"):
        r.also("--transformer-impl", impl, "training.fp8")
    _fp8_extras(f, r, recipe)


def _fp8_extras(f: Flags, r: Reading, recipe: str) -> None:
    """The flags that tune Transformer Engine's FP8 without changing what is counted."""
    if f.switch("fp8-param-gather"):
        r.ignore("--fp8-param-gather", "FP8 primary weights (fp8_model_params) are not modelled: counted with 16-bit "
                                       "weights beside Transformer Engine's FP8 weight cache, an upper bound")
    _fp8_history(f, r, recipe)
    for name in ("fp8-amax-compute-algo", "fp8-margin"):
        if f.has(name):
            f.text(name)
            r.ignore(f.key(name), "how the scales are computed: " + NO_MEMORY)
    if f.switch("first-last-layers-bf16"):
        r.ignore("--first-last-layers-bf16", "all decoder layers are counted in FP8: the bf16 ones keep 16-bit "
                                              "inputs and no FP8 weight cache")


def _ignore_fp8_flags(f: Flags, r: Reading, why: str) -> None:
    for name in FP8_FLAGS:
        if f.has(name):
            f.used.add(name)
            r.ignore(f.key(name), why)


def _fp8_history(f: Flags, r: Reading, recipe: str) -> None:
    """--fp8-amax-history-len: read by the delayed recipe, counted at its default length."""
    history = f.integer("fp8-amax-history-len")
    if history is None:
        return
    if recipe != "delayed":
        r.ignore("--fp8-amax-history-len", "read only with --fp8-recipe delayed")
    elif history == FP8_DEFAULT_HISTORY:
        r.also("--fp8-amax-history-len", history, "training.fp8")
    else:
        r.ignore("--fp8-amax-history-len", f"counted at Megatron-LM's default length {FP8_DEFAULT_HISTORY}: "
                                           f"{history} rows add ({history} − 1) × 5 × 4 bytes per linear layer "
                                           "(five FP8 tensors, fp32 amax), a few MB at most")


def _sharding(f: Flags, r: Reading, tensor: int) -> None:
    if f.switch("sequence-parallel"):
        if tensor > 1:
            r.said("parallelism.sequence_parallel", True, "--sequence-parallel")
        else:
            r.ignore("--sequence-parallel", "Megatron-LM turns it off without tensor parallelism")
    fsdp = f.switch("use-torch-fsdp2") or f.switch("use-megatron-fsdp")
    strategy = f.choice("data-parallel-sharding-strategy", tuple(SHARDING))
    if fsdp:
        _fsdp(f, r, strategy)
    elif f.switch("use-distributed-optimizer"):
        r.said("parallelism.zero_stage", 1, "--use-distributed-optimizer", True, note=DISTRIBUTED_OPTIMIZER_NOTE)
        r.assume("parallelism.zero_stage", 1, DISTRIBUTED_OPTIMIZER_NOTE)
        r.said("training.framework", "megatron", "--use-distributed-optimizer", True, note=CONVENTION_NOTE)
    else:
        r.default("parallelism.zero_stage", 0, "--use-distributed-optimizer", "no --use-distributed-optimizer: each "
                                                                              "data-parallel rank keeps every state")
        r.said("training.framework", "megatron", "(Megatron-LM)", "pretrain_gpt.py", note=CONVENTION_NOTE)
        if strategy:
            r.ignore("--data-parallel-sharding-strategy", "read only with --use-megatron-fsdp or --use-torch-fsdp2")
    for name in ("use-mcore-models", "use-legacy-models"):
        if f.has(name):
            f.switch(name)
            r.ignore(f.key(name), "both model code paths keep the same tensors here")


def _fsdp(f: Flags, r: Reading, strategy: str | None) -> None:
    """Megatron-LM's FSDP: its sharding strategy as a ZeRO stage, counted with the pytorch convention."""
    stage = SHARDING[strategy or "optim_grads_params"]
    switch = "--use-torch-fsdp2" if f.has("use-torch-fsdp2") else "--use-megatron-fsdp"
    key = "--data-parallel-sharding-strategy" if strategy else switch
    r.said("parallelism.zero_stage", stage, key, strategy or True)
    r.assume("parallelism.zero_stage", stage, f"FSDP sharding {strategy or 'optim_grads_params (the default)'}: "
                                              f"ZeRO stage {stage}")
    r.said("training.framework", "pytorch", switch, True, note=FSDP_WHY)
    r.assume("training.framework", "pytorch", FSDP_WHY)
