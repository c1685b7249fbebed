"""axolotl's training YAML.

Keys and defaults from axolotl's config schema (src/axolotl/utils/schemas/config.py, training.py, model.py):
base_model, sequence_len (default 512), micro_batch_size (1), gradient_accumulation_steps (1), optimizer
(adamw_torch_fused; the Trainer's names plus axolotl's own), bf16 ("auto": on where the GPU has bf16),
fp16, bfloat16/float16 (weights in half precision without autocast), gradient_checkpointing (true, "offload"),
attn_implementation (eager, sdpa, flash_attention_2, ...; the older flash_attention/sdp_attention switches),
deepspeed (a path, e.g. axolotl's bundled deepspeed_configs/zero2.json, or a mapping), fsdp/fsdp_config with
fsdp_version (1 unless it says 2), tensor_parallel_size (DeepSpeed AutoTP), dp_shard_size/dp_replicate_size,
context_parallel_size (sequence_parallel_degree before it), adapter (lora, qlora).

axolotl loads the weights in the run's half dtype (resolve_dtype in axolotl/utils/config: bf16 or bfloat16 ->
torch_dtype bfloat16), so without DeepSpeed or FSDP a bf16 run keeps no fp32 copy: pure bf16. DeepSpeed keeps
its fp32 master copy; FSDP's mixed precision keeps the fp32 shards.
"""

from __future__ import annotations

import re
from typing import Any, Final

from app.configs import deepspeed, fsdp
from app.configs.common import (
    FP8,
    LORA,
    OFFLOAD,
    OFFLOAD_ACTIVATIONS,
    PATH,
    QUANTISED,
    Reading,
    describe,
    model_from_id,
    read_torch_compile,
)
from app.configs.optimizers import parse_optim_args, read_trainer_optimizer
from app.configs.trainer import LOOP_WHY

ATTENTION: Final = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash", "flash_attention_3": "flash",
                    "flex_attention": "flash", "xformers": "flash", "sage": "flash", "fp8": "flash"}
ATTENTION_SWITCHES: Final = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa",
                             "eager_attention": "eager", "xformers_attention": "xformers",
                             "flex_attention": "flex_attention", "sage_attention": "sage"}
BUNDLED_DEEPSPEED: Final = re.compile(r"(?:^|/)deepspeed_configs/zero([123])([a-z0-9_]*)\.json$")
BATCH: Final = (
    ("sequence_len", "training.seq_len", 512, "axolotl's default sequence_len"),
    ("micro_batch_size", "training.micro_batch_size", 1, "axolotl's default micro_batch_size"),
    ("gradient_accumulation_steps", "training.gradient_accumulation_steps", 1,
     "axolotl's default gradient_accumulation_steps"),
)
FSDP_STRATEGIES: Final = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2")
QUANTIZATION_KEYS: Final = ("load_in_4bit", "load_in_8bit", "bnb_config_kwargs")
LORA_KEYS: Final = ("lora_r", "lora_target_modules", "lora_target_linear", "lora_dropout", "lora_modules_to_save")
# The keys read's steps read; every other key is sorted by _the_rest.
READ_KEYS: Final = frozenset({
    "base_model", *(key for key, *_ in BATCH), "batch_size", "optimizer", "optim_args",
    "bf16", "fp16", "bfloat16", "float16", "float32", "fp8", "tf32", "fp8_enable_fsdp_float8_all_gather",
    "gradient_checkpointing", "attn_implementation", *ATTENTION_SWITCHES,
    "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "tensor_parallel_size", "dp_shard_size", "dp_replicate_size",
    "adapter", *LORA_KEYS, *QUANTIZATION_KEYS,
    "torch_compile", "torch_compile_backend", "torch_compile_mode", "torch_compile_options",
})


def read(data: Any, r: Reading) -> None:
    if not isinstance(data, dict):
        raise r.error("", f"must be a YAML mapping (an axolotl config), got {describe(data)}")
    if data.get("base_model") is not None:
        model_from_id(r, "base_model", data["base_model"])
    _batch(data, r)
    _optimizer(data, r)
    _precision(data, r)
    _recomputation(data, r)
    _attention(data, r)
    _engines(data, r)
    _adapter(data, r)
    read_torch_compile(data, r, on_values=(True, "auto"))  # axolotl's schema: "auto" compiles with torch >= 2.6.0
    r.default("training.loop", "hf-trainer", "(axolotl)", f"axolotl trains with the Hugging Face Trainer: {LOOP_WHY}")
    _the_rest(data, r)


def _batch(data: dict[str, Any], r: Reading) -> None:
    for key, field, default, why in BATCH:
        if data.get(key) is not None:
            r.said(field, r.integer(key, data[key]), key)
        else:
            r.default(field, default, key, why)
    if data.get("batch_size") is not None:
        r.ignore("batch_size", "axolotl derives gradient_accumulation_steps from it and the number of GPUs, which "
                               "the file does not say: give gradient_accumulation_steps")


def _optimizer(data: dict[str, Any], r: Reading) -> None:
    optim_args = parse_optim_args(r, "optim_args", data.get("optim_args"))
    if data.get("optimizer") is not None:
        read_trainer_optimizer(r, "optimizer", data["optimizer"], optim_args, "optim_args")
    else:
        r.default("training.optimizer", "adamw", "optimizer", "axolotl's default optimizer, adamw_torch_fused")
        r.default("training.optimizer_implementation", "fused", "optimizer",
                  "axolotl's default optimizer, adamw_torch_fused")
    if optim_args and not any(u["key"] == "optim_args" for u in r.understood):
        r.ignore("optim_args", "optimizer hyperparameters change no count trainmem keeps")


def _recomputation(data: dict[str, Any], r: Reading) -> None:
    if data.get("activation_offloading") is True and not data.get("adapter"):
        _offloading(data, r)
        return
    checkpointing = data.get("gradient_checkpointing")
    if checkpointing is not None and checkpointing is not False:
        if checkpointing not in (True, "offload", "offload_disk"):
            raise r.error("gradient_checkpointing", f"must be true, false, 'offload' or 'offload_disk', got "
                                                    f"{describe(checkpointing)}")
        r.said("training.activation_checkpointing", "full", "gradient_checkpointing", checkpointing,
               note="each decoder layer keeps only its input")
        if checkpointing != True:  # noqa: E712 - a string here
            r.assume("training.activation_checkpointing", "full", f"gradient_checkpointing {checkpointing}: the "
                     "kept layer inputs go to CPU memory or disk, which is not modelled: counted on the GPU")
    elif checkpointing is False:
        r.said("training.activation_checkpointing", "none", "gradient_checkpointing", False)
    else:
        r.default("training.activation_checkpointing", "none", "gradient_checkpointing",
                  "axolotl's default: no gradient checkpointing")


def _offloading(data: dict[str, Any], r: Reading) -> None:
    """activation_offloading true on a full fine-tune: axolotl wraps each decoder layer in a non-reentrant checkpoint
    and offloads with TRL's OffloadActivations, torchtune's hooks with its defaults (min_offload_size 1,024,
    max_fwd_stash_size 5) (axolotl-ai-cloud/axolotl at 067b021, src/axolotl/loaders/model.py,
    _apply_activation_checkpointing; huggingface/trl at f2cd577, trl/models/activation_offloading.py). With an adapter
    it offloads without recomputation, which is not modelled (ignored below)."""
    r.said("training.activation_checkpointing", "full", "activation_offloading", True,
           note="axolotl checkpoints each decoder layer when it offloads a full fine-tune")
    r.said("training.activation_offload", "torchtune", "activation_offloading", True,
           note="TRL's OffloadActivations: each layer's input in pinned host memory")
    if "gradient_checkpointing" in data:
        r.ignore("gradient_checkpointing", "with activation_offloading axolotl checkpoints the layers itself")


# Keys left aside whole (a mapping's every leaf) with one reason; None for the reason a key's name gives.
IGNORED_WHOLE: Final = {
    **dict.fromkeys(("plugins", "liger_rope", "liger_rms_norm", "liger_glu_activation",
                     "liger_fused_linear_cross_entropy", "liger_layer_norm", "cut_cross_entropy",
                     "chunked_cross_entropy"),
                    "fused-kernel plugins (Liger, Cut Cross Entropy) are not modelled: the logits are counted as "
                    "Hugging Face's modules hold them"),
}
# Keys left aside with one reason.
IGNORED: Final = {
    **dict.fromkeys(("sample_packing", "pad_to_sequence_len", "eval_sample_packing"),
                    "packing fills each sequence up to sequence_len, which the estimate already assumes"),
    **dict.fromkeys(("model_type", "tokenizer_type", "base_model_config", "tokenizer_config", "trust_remote_code",
                     "model_config_type", "is_llama_derived_model", "is_mistral_derived_model", "is_qwen_derived_model",
                     "is_falcon_derived_model"),
                    "the model comes from base_model; class and tokenizer names are not read"),
}
# Keys left aside with a reason that depends on whether they are on: key -> (on, off).
IGNORED_SWITCHES: Final = {"gptq": (QUANTISED, "not quantised"),
                           "activation_offloading": (OFFLOAD_ACTIVATIONS, "no offload"),
                           "layer_offloading": (OFFLOAD, "no offload")}
# Liger's switches that change what is counted when on: key -> (field, value, note).
LIGER: Final = {
    "liger_rms_norm": ("training.implementation", "liger", "Liger Kernel's RMSNorm and SwiGLU"),
    "liger_glu_activation": ("training.implementation", "liger", "Liger Kernel's RMSNorm and SwiGLU"),
    "liger_fused_linear_cross_entropy": ("training.loss", "fused-linear", "Liger's fused linear cross entropy"),
}


def _the_rest(data: dict[str, Any], r: Reading) -> None:
    """Every key no step read: adapters' details, kernels and plugins, packing, and what changes no buffer."""
    for key, value in data.items():
        if key in READ_KEYS or (key == "activation_offloading" and any(u["key"] == key for u in r.understood)):
            continue
        if key in LIGER and value is True:
            field, said, note = LIGER[key]
            r.said(field, said, key, value, note=note)
        elif key in ("context_parallel_size", "sequence_parallel_degree"):
            _context(data, key, r)
        elif key in IGNORED_SWITCHES:
            on, off = IGNORED_SWITCHES[key]
            r.ignore(key, on if value else off)
        elif key in IGNORED:
            r.ignore(key, IGNORED[key])
        elif _is_lora_key(key):
            r.ignore_all(value, key, LORA)
        else:
            r.ignore_all(value, key, IGNORED_WHOLE.get(key))


def _is_lora_key(key: str) -> bool:
    return key.startswith(("lora_", "peft_", "qlora", "relora", "loraplus")) or key in ("peft", "loftq_config")


def _precision(data: dict[str, Any], r: Reading) -> None:
    """axolotl/utils/config resolve_dtype: bf16 'auto' is on where the GPU has bf16; bf16/bfloat16 load the
    weights in bf16, fp16/float16 in fp16 (torch_dtype); the Trainer's bf16/fp16 then run autocast over them."""
    bf16, fp16 = data.get("bf16", "auto"), data.get("fp16")
    _check_precision_switches(data, r)
    _unmodelled_precision(data, r)
    if fp16 is True and bf16 in (True, "full"):
        raise r.error("fp16", "bf16 and fp16 cannot both be true")
    if fp16 is True:
        r.said("amp", "fp16", "fp16", True)
        r.said("load_dtype", "fp16", "fp16", True, field="",
               note="axolotl loads the weights in fp16 (torch_dtype)")
        if "bf16" in data:
            r.also("bf16", bf16, "training.precision", "fp16 wins over bf16 auto")
    elif bf16 in (True, "full"):
        r.said("amp", "bf16", "bf16", bf16)
        r.said("load_dtype", "bf16", "bf16", bf16, field="", note="axolotl loads the weights in bf16 (torch_dtype)")
    elif bf16 == "auto" and data.get("float32") is not True and not data.get("float16"):
        _bf16_auto(data, r)
    else:
        _without_autocast(data, r)
    _unused_switches(data, fp16, r)


def _unused_switches(data: dict[str, Any], fp16: Any, r: Reading) -> None:
    """The dtype switches no fact came from: superseded, or off."""
    for key in ("bfloat16", "float16", "float32"):
        if key in data and not any(f.key == key for f in r.facts):
            r.ignore(key, "superseded by bf16/fp16" if data[key] else "off")
    if fp16 is False and not any(f.key == "fp16" for f in r.facts):
        r.also("fp16", False, "training.precision")


def _check_precision_switches(data: dict[str, Any], r: Reading) -> None:
    for key in ("bf16", "fp16", "bfloat16", "float16", "float32"):
        value = data.get(key)
        if value is not None and not isinstance(value, bool) and not (key == "bf16" and value in ("auto", "full")):
            raise r.error(key, f"must be true or false{' or auto' if key == 'bf16' else ''}, got {describe(value)}")


def _unmodelled_precision(data: dict[str, Any], r: Reading) -> None:
    """FP8 and TF32: read, and left aside."""
    if data.get("fp8"):
        r.ignore("fp8", FP8)
    elif "fp8" in data:
        r.ignore("fp8", "no fp8")
    if "fp8_enable_fsdp_float8_all_gather" in data:
        r.ignore("fp8_enable_fsdp_float8_all_gather", FP8)
    if "tf32" in data:
        r.ignore("tf32", "tf32 matmuls change no buffer's size")


def _bf16_auto(data: dict[str, Any], r: Reading) -> None:
    key = "bf16"
    r.default("amp", "bf16", key, "axolotl's bf16 'auto' turns bf16 on where the GPU supports it "
                                  "(Ampere and later): assumed on")
    r.default("load_dtype", "bf16", key, "with bf16 on, axolotl loads the weights in bf16")
    if "bf16" in data:
        r.also("bf16", "auto", "training.precision", "on where the GPU supports bf16: assumed on")


def _without_autocast(data: dict[str, Any], r: Reading) -> None:
    """Weights loaded in bf16 (bfloat16) or fp16 (float16) without autocast, else in fp32."""
    if data.get("bfloat16"):
        r.said("amp", "no", "bfloat16", True)
        r.said("load_dtype", "bf16", "bfloat16", True, field="", note="bf16 weights without autocast")
    elif data.get("float16"):
        r.said("amp", "no", "float16", True)
        r.said("load_dtype", "fp16", "float16", True, field="", note="fp16 weights without autocast")
    else:
        key = "bf16" if "bf16" in data else "float32" if "float32" in data else "bf16"
        r.said("amp", "no", key, data.get(key, False))
        r.said("load_dtype", "fp32", key, data.get(key, False), field="")


def _attention(data: dict[str, Any], r: Reading) -> None:
    value = data.get("attn_implementation")
    if value is not None:
        _attn_implementation(data, value, r)
        return
    on = _attention_switches_on(data, r)
    if on:
        name = ATTENTION_SWITCHES[on[0]]
        r.said("training.attention", ATTENTION[name], on[0], True)
    else:
        r.default("training.attention", "sdpa", "attn_implementation",
                  "no attention set: transformers' default, PyTorch's scaled_dot_product_attention")


def _attention_switches_on(data: dict[str, Any], r: Reading) -> list[str]:
    """The older attention switches that are on (at most one), each of the others left aside as off."""
    on = [switch for switch in ATTENTION_SWITCHES if data.get(switch) is True]
    if len(on) > 1:
        raise r.error(on[1], f"only one attention switch can be on ({on[0]} is on too)")
    for switch in ATTENTION_SWITCHES:
        if switch in data and data[switch] is not None and not isinstance(data[switch], bool):
            raise r.error(switch, f"must be true or false, got {describe(data[switch])}")
        if switch in data and switch not in on:
            r.ignore(switch, "off")
    return on


def _attn_implementation(data: dict[str, Any], value: Any, r: Reading) -> None:
    """attn_implementation names the kernel (a Hub kernel counts as flash); the older switches then say nothing."""
    text = r.string("attn_implementation", value)
    if "/" in text:  # a hub kernel, e.g. kernels-community/flash-attn3
        r.said("training.attention", "flash", "attn_implementation", text,
               note="a fused kernel from the Hub, counted as flash attention (no score matrix kept)")
        r.assume("training.attention", "flash", f"{text}: a Hub attention kernel, counted as flash")
    else:
        attention = r.choice("attn_implementation", text, ATTENTION)
        r.said("training.attention", attention, "attn_implementation", text)
        if text not in ("eager", "sdpa", "flash_attention_2", "flash_attention_3"):
            r.assume("training.attention", attention, f"{text} keeps no score matrix: counted as flash attention")
    for switch in ATTENTION_SWITCHES:
        if data.get(switch):
            r.ignore(switch, "attn_implementation says which attention runs")
        elif switch in data:
            r.ignore(switch, "off")


def _engines(data: dict[str, Any], r: Reading) -> None:
    """DeepSpeed or FSDP (not both), then DeepSpeed AutoTP's and the data-parallel degrees."""
    ds = data.get("deepspeed")
    if isinstance(ds, dict):
        deepspeed.read(ds, r.child("deepspeed"), "deepspeed.")
    elif isinstance(ds, str) and ds:
        r.said("engine", "deepspeed", "deepspeed", ds, field="")
        bundled = BUNDLED_DEEPSPEED.search(ds)
        if bundled:
            _bundled_deepspeed(ds, bundled, r)
        else:
            r.ignore("deepspeed", f"{PATH}: add the DeepSpeed config as another file to read its ZeRO stage")
    elif ds is not None:
        raise r.error("deepspeed", f"must be a path or a DeepSpeed config mapping, got {describe(ds)}")
    _fsdp(data, ds, r)
    _degrees(data, r)


def _bundled_deepspeed(ds: str, bundled: re.Match[str], r: Reading) -> None:
    """One of axolotl's deepspeed_configs/zero*.json, not opened: its stage and offload from its name."""
    stage = int(bundled.group(1))
    why = (f"{ds} is axolotl's bundled ZeRO-{stage} config (not opened): stage {stage} from its name, "
           "its bf16/fp16 'auto' filled from bf16/fp16 here")
    r.said("parallelism.zero_stage", stage, "deepspeed", ds, note=why)
    r.assume("parallelism.zero_stage", stage, why)
    deepspeed.convention(r, stage, "deepspeed", ds)
    offload = {"": "optimizer" if stage == 2 else None, "_bf16_cpuoffload_all": "optimizer+parameters"}.get(
        bundled.group(2))
    if offload:
        r.said("parallelism.offload", offload, "deepspeed", ds)
        r.assume("parallelism.offload", offload, f"{ds} offloads the "
                 + ("optimizer state" if offload == "optimizer" else "optimizer state and the parameters")
                 + " to the CPU (from its name)")
    elif "cpuoffload" in bundled.group(2):
        r.assume("parallelism.offload", "none", f"{ds} offloads the parameters alone, which is not modelled: "
                                                "counted on the GPU")


def _fsdp(data: dict[str, Any], ds: Any, r: Reading) -> None:
    options = data.get("fsdp")
    config = data.get("fsdp_config")
    if options or config:
        _fsdp_engine(data, ds, options, config, r)
    elif "fsdp" in data or "fsdp_config" in data:
        r.ignore("fsdp" if "fsdp" in data else "fsdp_config", "empty: no FSDP")
    if "fsdp_version" in data and not (options or config):
        r.ignore("fsdp_version", "no FSDP: fsdp_config is not set")


def _fsdp_engine(data: dict[str, Any], ds: Any, options: Any, config: Any, r: Reading) -> None:
    """FSDP from the Trainer's fsdp options and fsdp_config, at the version axolotl reads."""
    key = "fsdp_config" if config else "fsdp"
    if ds:
        raise r.error(key, "DeepSpeed and FSDP cannot both run the model")
    r.said("engine", "fsdp", key, config or options, field="")
    # axolotl reads the top-level fsdp_version first (schemas/validation.py, check_fsdp_version_in_fsdp_config)
    version = fsdp.find_version(r, "fsdp_config", config, outer="fsdp_version", value=data.get("fsdp_version"))
    if options and not isinstance(options, list):
        options = str(options).split()
    strategy = _fsdp_options(options, version, r) if options else None
    if isinstance(config, dict):
        # axolotl hands fsdp_config to the Trainer (core/builders/base.py), which passes it on to accelerate
        fsdp.read_config(r, "fsdp_config", config, strategy=strategy, version=version, trainer=True)
    else:
        _fsdp_without_config(version, strategy, r)
    if "fsdp_version" in data and version.key != "fsdp_version":
        r.ignore("fsdp_version", "empty: not set")


def _fsdp_without_config(version: fsdp.Version, strategy: str | None, r: Reading) -> None:
    """No fsdp_config mapping: FSDP2 reshards after forward (ZeRO-2's count), FSDP1 shards fully by default."""
    if version.number == 2 and not strategy:
        r.default("parallelism.zero_stage", 2, "fsdp_version", fsdp.TRAINER_RESHARD_WHY)
    elif not strategy:
        fsdp.default_strategy(r, "fsdp_config")
    stage = 2 if version.number == 2 and not strategy else fsdp.STRATEGY_STAGES[strategy or "FULL_SHARD"]
    fsdp.convention(r, version, stage, "fsdp")


def _fsdp_options(options: list[Any], version: fsdp.Version, r: Reading) -> str | None:
    """The Trainer's fsdp options ("full_shard auto_wrap"); the sharding strategy they name, if any."""
    strategy = None
    for item in options:
        name = str(item).lower()
        if name in FSDP_STRATEGIES and version.number == 2:
            r.ignore("fsdp", f"{item}: FSDP2 reads fsdp_config's reshard_after_forward, not a sharding "
                             "strategy (the Trainer's TrainingArguments._process_fsdp_args)")
        elif name in FSDP_STRATEGIES:
            fsdp.set_strategy(r, "fsdp", item, name.upper())
            strategy = name.upper()
        elif name == "offload":
            r.said("parallelism.offload", "optimizer+parameters", "fsdp", item,
                   note="FSDP's CPUOffload(offload_params=True)")
        else:
            r.also("fsdp", item, "parallelism.zero_stage", "how FSDP wraps modules changes no count")
    return strategy


def _degrees(data: dict[str, Any], r: Reading) -> None:
    if data.get("tensor_parallel_size") is not None:
        r.said("parallelism.tensor", r.integer("tensor_parallel_size", data["tensor_parallel_size"]),
               "tensor_parallel_size", note="DeepSpeed AutoTP")
    sizes = [(k, r.integer(k, data[k])) for k in ("dp_shard_size", "dp_replicate_size") if data.get(k) is not None]
    if sizes:
        degree = 1
        for _, size in sizes:
            degree *= size
        r.said("parallelism.data", degree, sizes[0][0], sizes[0][1],
               note="dp_shard_size × dp_replicate_size" if len(sizes) > 1 else "")
        for key, size in sizes[1:]:
            r.also(key, size, "parallelism.data")


def _context(data: dict[str, Any], key: str, r: Reading) -> None:
    """context_parallel_size (sequence_parallel_degree before it, read only without the new name): each sequence
    split over that many GPUs with ring-flash-attn (schemas/config.py; validation.py, check_context_parallel_size)."""
    if data[key] is None:
        r.ignore(key, "empty: not set")
    elif key == "sequence_parallel_degree" and data.get("context_parallel_size") is not None:
        r.ignore(key, "the old name of context_parallel_size, which is set: axolotl reads that")
    else:
        r.said("parallelism.context", r.integer(key, data[key]), key,
               note="each sequence split over this many GPUs (ring-flash-attn's ring attention)")


def _adapter(data: dict[str, Any], r: Reading) -> None:
    """adapter lora/qlora (axolotl/loaders/adapter.py) as peft counts it: lora_r, lora_target_modules or
    lora_target_linear (every linear layer but the output, peft's all-linear), lora_dropout,
    lora_modules_to_save. The base: qlora with load_in_4bit is NF4 with double quantization
    (axolotl/loaders/model.py: bnb_4bit_use_double_quant True unless bnb_config_kwargs says otherwise); lora with
    load_in_8bit is LLM.int8()."""
    adapter = data.get("adapter")
    for key in ("load_in_4bit", "load_in_8bit"):
        if data.get(key) is not None:
            r.boolean(key, data[key])
    if not adapter:
        _no_adapter(data, adapter, r)
        return
    kind = r.choice("adapter", adapter, ("lora", "qlora"))
    method = _base(data, kind, r)
    r.said("finetuning.method", method, "adapter", adapter,
           note="peft adapters beside the frozen base" + (", quantized" if method == "qlora" else ""))
    if data.get("lora_r") is not None:
        r.said("finetuning.rank", r.integer("lora_r", data["lora_r"], high=1 << 14), "lora_r")
    else:
        r.default("finetuning.rank", 8, "lora_r", "no lora_r: peft's LoraConfig default, r = 8")
    _targets(data, r)
    _dropout_and_saved(data, r)


def _no_adapter(data: dict[str, Any], adapter: Any, r: Reading) -> None:
    """Full fine-tuning: a quantized base or LoRA's settings have nothing to apply to."""
    if "adapter" in data:
        r.said("finetuning.method", "full", "adapter", adapter, field="finetuning.method",
               note="no adapter: full fine-tuning")
    for key in QUANTIZATION_KEYS:
        if data.get(key):
            r.ignore_all(data[key], key, "a quantized base without an adapter cannot be fine-tuned: not read")
        elif key in data:
            r.ignore(key, "not quantized")
    for key in LORA_KEYS:
        if key in data:
            r.ignore_all(data[key], key, "no adapter: full fine-tuning")


def _base(data: dict[str, Any], kind: str, r: Reading) -> str:
    """The frozen base under the adapters: NF4 for qlora, LLM.int8() for lora with load_in_8bit, else as loaded;
    the finetuning method it makes."""
    four, eight = data.get("load_in_4bit"), data.get("load_in_8bit")
    if kind == "qlora":
        _nf4_base(data, r)
        return "qlora"
    if eight is True:
        r.said("finetuning.quantization", "int8", "load_in_8bit", True, note="LoRA over an LLM.int8() base")
        if four:
            raise r.error("load_in_4bit", "cannot be true with load_in_8bit")
        return "qlora"
    if four:
        raise r.error("load_in_4bit", "is for adapter qlora; with lora, use load_in_8bit or neither")
    for key in ("load_in_4bit", "load_in_8bit"):
        if key in data:
            r.ignore(key, "not quantized")
    if data.get("bnb_config_kwargs"):
        r.ignore_all(data["bnb_config_kwargs"], "bnb_config_kwargs", "no quantized base")
    return "lora"


def _nf4_base(data: dict[str, Any], r: Reading) -> None:
    """qlora's base: load_in_4bit, NF4 with double quantization unless bnb_config_kwargs turns it off."""
    if data.get("load_in_4bit") is not True:
        raise r.error("load_in_4bit", "must be true for adapter qlora (axolotl loads the base in 4-bit)")
    double = _double_quantization(data, r)
    r.said("finetuning.quantization", "nf4-double" if double else "nf4", "load_in_4bit", True,
           note="bitsandbytes NF4" + (" with double quantization, axolotl's default" if double else ""))
    if data.get("load_in_8bit"):
        r.ignore("load_in_8bit", "load_in_4bit wins for qlora")
    elif "load_in_8bit" in data:
        r.ignore("load_in_8bit", "not quantized in 8 bits")


def _double_quantization(data: dict[str, Any], r: Reading) -> bool:
    """bnb_config_kwargs' bnb_4bit_use_double_quant, True by axolotl's default; its other keys change no size."""
    double = True
    kwargs = data.get("bnb_config_kwargs")
    if kwargs is not None:
        kwargs = r.mapping("bnb_config_kwargs", kwargs)
        for name, value in kwargs.items():
            if name == "bnb_4bit_use_double_quant":
                double = r.boolean(f"bnb_config_kwargs.{name}", value)
                r.also(f"bnb_config_kwargs.{name}", value, "finetuning.quantization")
            elif name == "bnb_4bit_quant_type" and value != "nf4":
                r.ignore(f"bnb_config_kwargs.{name}", f"{value} 4-bit storage is counted as NF4's (same size)")
            else:
                r.ignore(f"bnb_config_kwargs.{name}", "compute dtype and storage details change no count "
                                                      "trainmem keeps")
    return double


def _targets(data: dict[str, Any], r: Reading) -> None:
    """lora_target_linear (peft's all-linear) or lora_target_modules: one of them is needed."""
    linear = data.get("lora_target_linear")
    if linear is not None and r.boolean("lora_target_linear", linear):
        r.said("finetuning.target_modules", ["all-linear"], "lora_target_linear", True,
               note="every linear layer of the decoder layers but the output layer (peft's all-linear)")
        if data.get("lora_target_modules"):
            r.also("lora_target_modules", data["lora_target_modules"], "finetuning.target_modules",
                   "inside all-linear already")
    elif data.get("lora_target_modules"):
        modules = data["lora_target_modules"]
        if isinstance(modules, str):
            # axolotl hands a string to peft's LoraConfig as it is (loaders/adapter.py, _build_peft_lora_config,
            # commit 01883e3): all-linear, or a regular expression full-matched against each module's name.
            r.said("finetuning.target_modules", modules, "lora_target_modules", modules,
                   note="a regular expression, matched as peft matches it")
            return
        if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
            raise r.error("lora_target_modules", "must be a regular expression or a list of module names")
        r.said("finetuning.target_modules", list(modules), "lora_target_modules", modules)
    else:
        raise r.error("lora_target_modules", "is missing: axolotl needs lora_target_modules or lora_target_linear "
                                             "with an adapter")


def _dropout_and_saved(data: dict[str, Any], r: Reading) -> None:
    _dropout(data, r)
    _saved(data, r)


def _dropout(data: dict[str, Any], r: Reading) -> None:
    if data.get("lora_dropout") is None:
        r.default("finetuning.dropout", 0.0, "lora_dropout", "axolotl's default lora_dropout, 0")
        return
    value = data["lora_dropout"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise r.error("lora_dropout", f"must be a probability below 1, got {describe(value)}")
    r.said("finetuning.dropout", float(value), "lora_dropout", value)


def _saved(data: dict[str, Any], r: Reading) -> None:
    """lora_modules_to_save: embed_tokens and lm_head are counted as saved modules, any other is left aside."""
    saved = data.get("lora_modules_to_save")
    if saved:
        if not isinstance(saved, list) or not all(isinstance(m, str) for m in saved):
            raise r.error("lora_modules_to_save", "must be a list of module names")
        kept = [m for m in saved if m in ("embed_tokens", "lm_head")]
        for other in saved:
            if other not in kept:
                r.ignore("lora_modules_to_save", f"{other!r}: only embed_tokens and lm_head are counted as saved "
                                                 "modules")
        r.said("finetuning.modules_to_save", kept, "lora_modules_to_save", saved)
    elif "lora_modules_to_save" in data:
        r.said("finetuning.modules_to_save", [], "lora_modules_to_save", saved)
