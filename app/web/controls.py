"""The form's controls: their labels, help texts and options, taken from the API schema and the core's catalogues.

Allowed values come from the schema's ``Literal`` types and the core's data (presets, GPUs,
optimizers), so the page offers exactly what the API accepts. Help texts are the schema's field
descriptions, so the page and the API documentation say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, get_args, get_origin

from app import core
from app.api.schemas import ARCHITECTURE_FIELDS, FinetuningIn, ModelIn, ParallelismIn, PrecisionIn, TrainingIn
from app.core.finetuning import BNB_VERSION_HELP
from app.core.units import DTYPE_BITS
from app.web.form import CUSTOM_GPU, CUSTOM_PRECISION, GPU_LIKE, NO_GPU, NO_MASTER, SOURCES, UNITS
from app.web.form import LOOP_SHOWN as LOOP_SHOWN  # noqa: F401  (the page reads them through controls)
from app.web.form import condition_holds as condition_holds  # noqa: F401
from app.web.labels import DECLARED_CONTROLS
from app.web.labels import LABELS as LABELS  # the page's labels, read by the templates as controls.LABELS

EXTRA_HELP: Final[dict[str, str]] = {
    "source": "A preset, your own architecture, a bare parameter count (model states only), a Hugging Face "
    "config.json, or a model's id on the Hugging Face Hub.",
    "gpu": "Usable memory as the driver reports it.",
    "seq_len": "Tokens per sequence: 4096, 4,096 or 4k (k = 1,024 tokens, as context lengths are quoted).",
    "unit": "GB = 10⁹ bytes; GiB = 2³⁰ bytes (what nvidia-smi and PyTorch report).",
    "framework_overhead_bytes": "e.g. 512 MiB for communication buffers. The CUDA context, the libraries' "
    "workspaces and the allocator's cache are counted already.",
    "allocator": "expandable segments: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which PyTorch's own "
    "out-of-memory message suggests.",
    "fill": "Set the fields below to the chosen model's.",
    "expert_load": "× balanced routing: 1.25 for a capacity factor of 1.25 (tokens over it dropped), or the "
    "imbalance a dropless run expects.",
    "host_ram": "The page's own figure, for the host memory bar: e.g. 512 GiB or 2 TB.",
    "target_modules": "Comma-separated, e.g. q_proj, v_proj, or all-linear; anything else is a regular expression "
                      "that peft matches against each module's full name, e.g. .*\\.(q_proj|v_proj), selecting the "
                      "same modules in every layer.",
}
# The page's own words where the schema's description speaks the API's (its paths, its field names, null): the
# whole help text of these controls. A test keeps the API's names out of every help text on the page.
PAGE_HELP: Final[dict[str, str]] = {
    "preset": "Models grouped by their organisation on the Hugging Face Hub, each with the architecture of its "
    "published config.json; the source of every one is in the presets list of the API.",
    "hub": "A model on the Hugging Face Hub, as its page names it: e.g. Qwen/Qwen2.5-7B-Instruct. A model among the "
    "presets is read from its stored config.json; any other's is fetched and read as a pasted one is, where this "
    "server's operator allows it.",
    "num_params": "Whole number, e.g. 6,738,415,616 or 7B (k, M, B, T). Activations need the architecture, "
    "so only model states are computed.",
    "precision": "The dtype of each kind of tensor: weights, gradients, master copy, optimizer state and "
    "activations. Open Per-tensor dtypes to see or set them.",
    "attention": "eager stores the s × s score matrix; flash is a fused kernel that does not; sdpa is the kernel "
    "PyTorch's scaled_dot_product_attention picks on CUDA (flash for fp16/bf16 and head size ≤ 256, else "
    "memory-efficient unless K/V heads are grouped, else math). The line under these choices names the kernel.",
    "tensor": "Tensor-parallel degree; it must divide the attention heads and the key/value heads.",
    "pipeline": "Pipeline-parallel degree (stages); it must divide the layers unless the layers on the first or "
    "last stage are given.",
    "master_weights": "Dtype of the optimizer's master copy, or none.",
    "num_key_value_heads": "Key/value heads g (grouped-query attention); blank: as many as the attention heads, "
    "which they must divide.",
    "qkv_bias": "Biases on query, key and value only (Qwen2); overrides Attention biases there.",
    "num_experts_per_tok": "Experts each token is routed to (k), at most the experts per layer.",
    "moe_intermediate_size": "Each expert's MLP width; defaults to the MLP inner size.",
    "norm_topk_prob": "The k routing weights renormalised to sum to 1 (Mixtral: always; Qwen3-MoE: as its "
    "config.json says).",
    "position_embedding": "learned: a table of max positions × h; rope: no parameters.",
    "loss": "standard: the model returns the logits and the loss upcasts them to fp32; chunked: the output layer "
    "and loss run a few chunks of tokens at a time (torchtune); fused-linear: Liger Kernel's fused linear cross "
    "entropy, which never materialises the logits.",
    "context": "Context parallelism: each sequence split over this many GPUs (ring attention); activations shrink "
    "with it, and ZeRO shards over data × context. 2 × context must divide the sequence length; gpt-oss (attention "
    "with sinks) needs the flash attention kernel.",
    "virtual_stages": "Interleaved pipeline schedule (Megatron's virtual stages): model chunks per GPU; the first "
    "GPU then holds (p - 1) chunks of activations more. Needs 2 or more pipeline stages, pipeline × virtual stages "
    "dividing the layers, and gradient accumulation a multiple of the pipeline stages.",
    "activation_checkpointing": "None keeps every tensor for backward; selective recomputes the attention core; "
    "op-level is torchtitan's policy, each layer recomputed but every other matmul's output and the attention "
    "kernel's kept; full keeps only each layer's input, of every layer or of those chosen below.",
    "bitsandbytes_version": f"{BNB_VERSION_HELP} Blank: 0.43.2 or later.",
    "recompute_every": "1: every layer. k: every k-th layer of each stage is recomputed (layer i, from 1, when "
    "i % k == 0) and the others keep all they save, as torchtitan's selective_ac_option does (its default is 2).",
    "recompute_first_layers": "Blank: every layer. N: only the first N layers of each stage are recomputed, the "
    "rest keep all they save (Megatron-LM's --recompute-method block --recompute-num-layers N).",
    "use_reentrant": "Full recomputation of every layer with PyTorch's reentrant checkpoint, as scripts that ask "
    "gradient checkpointing for it run: in backward it runs each layer's whole forward again and holds the layer's "
    "output through that layer's backward. Unticked: the non-reentrant one, transformers' default.",
    "activation_offload": "torchtune: each layer's input kept for its recomputation is copied to pinned host "
    "memory in forward and back in backward (torchtune's enable_activation_offloading); the GPU keeps only the last "
    "few copies in flight. Checkpoints in host memory: the same inputs copied by transformers' own offload "
    "(activation checkpointing's offload option) on the compute stream, none left waiting on the GPU. Both need "
    "full recomputation of every layer, Hugging Face's modules and one pipeline stage. Megatron-LM: its "
    "--cpu-offloading-num-layers, the saved tensors of the first layers (how many below) moved to pinned host memory, "
    "at most the other layers' on the GPU at once; it needs Megatron-LM's layers, no recomputation and one pipeline "
    "stage.",
    "activation_offload_layers": "With Megatron-LM's offloading: how many layers, from the first, have their saved "
    "tensors moved to host memory (--cpu-offloading-num-layers); at least 1 and fewer than the model's layers.",
    "first_stage_layers": "Blank: an even split. Decoder layers on the first stage; fewer where the embedding sits "
    "balance the stages (Megatron-LM's --decoder-first-pipeline-num-layers). The other stages share the rest "
    "evenly, at least one each; with two stages, first and last add up to the layers.",
    "last_stage_layers": "Blank: an even split. Decoder layers on the last stage; fewer where the output layer and "
    "loss sit balance the stages (Megatron-LM's --decoder-last-pipeline-num-layers).",
    "reduce_bucket_size": "DeepSpeed's gradient bucket, in elements (zero_optimization.reduce_bucket_size in its "
    "config; its default 500,000,000): the contiguous buffer it reduces from, counted in the gradients' dtype under "
    "the DeepSpeed memory convention.",
    "expert": "Expert parallelism: a mixture of experts' routed experts split over this many GPUs (it divides the "
    "experts, and expert tensor × expert parallel divides tensor × data × context); each expert's ZeRO shards "
    "spread over the rest of the stage's GPUs.",
    "expert_tensor": "Blank: the tensor-parallel degree. Each routed expert's matrices split over this many GPUs "
    "instead (Megatron-LM's --expert-tensor-parallel-size); expert tensor × expert parallel must divide tensor × "
    "data × context. A dense model takes only the tensor-parallel degree.",
    "method": "full: every parameter trains; lora: rank-r adapters beside the frozen base (peft); qlora: the same "
    "beside a base quantized by bitsandbytes. Anything but full needs an architecture (not a bare parameter count), "
    "the transformers, liger or litgpt implementation, no fp8 and a memory convention other than FSDP2; LoRA and "
    "QLoRA need the base in its own dtype: choose a precision that is not autocast. Of mixtures of experts, which "
    "parts may be frozen or adapted depends on the family.",
    "lora_dropout": "Dropout on each adapter's input (peft's LoraConfig.lora_dropout); above 0 each adapter keeps "
    "its own dropped copy of its input.",
    "save_embed_tokens": "peft's LoraConfig.modules_to_save: a trainable copy kept beside the frozen original.",
    "save_lm_head": "peft's LoraConfig.modules_to_save: a trainable copy kept beside the frozen original.",
    "gpu_capacity": "The memory the driver reports (nvidia-smi's total): e.g. 24 GiB, 96 GB or a byte count; "
    "between 1 GiB and 4 TiB.",
    "gpu_like": "The catalogue GPU whose CUDA context, libraries' workspace and interconnect the custom one takes.",
    "compile": "torch.compile of each decoder layer (torchtune's compile: True): the compiled layer keeps less for "
    "backward (each norm's input instead of its fp32 copy, no activation output) and recomputes the cheap pointwise "
    "steps. Measured for Llama, Mistral, Qwen2 and Gemma trained in full, with sdpa or flash attention; costs "
    "compile time at start-up and for each new shape.",
    "frozen_layers": "Full fine-tuning: keep the first k decoder layers frozen; fewer than the layers, and with "
    "pipeline stages at most the first stage's layers.",
}
# Help read from a registry's own texts instead of the schema's description: each choice's label (what each one
# counts is in the explanation of the result and the API's documentation).
REGISTRY_HELP: Final[dict[str, str]] = {
    "framework": "Whose accounting the model states follow: "
    + "; ".join(item.label for item in core.FRAMEWORKS.values()) + ".",
    "fp8": "Which linear layers compute in float8: " + "; ".join(item.label for item in core.FP8_RECIPES.values()) + ".",
}
# Controls named apart from their API field (the finetuning field `dropout` would clash with the architecture's).
SCHEMA_FIELDS: Final[dict[str, tuple[Any, str]]] = {"lora_dropout": (FinetuningIn, "dropout")}

CHOICE_LABELS: Final[dict[str, dict[str, str]]] = {
    "source": {"preset": "Preset", "custom": "Architecture", "params": "Parameter count", "config": "config.json",
               "hub": "Hub id"},
    "activation_checkpointing": {c.id: c.label for c in core.CHECKPOINTING_CHOICES.values()},
    "attention": {c.id: c.label for c in core.ATTENTION_CHOICES.values()},
    "implementation": {c.id: c.label for c in core.IMPLEMENTATION_CHOICES.values()},
    "loop": {loop.id: loop.label for loop in core.LOOPS.values()},
    "framework": {item.id: item.label for item in core.FRAMEWORKS.values()},
    "fp8": {item.id: item.label for item in core.FP8_RECIPES.values()},
    "optimizer_implementation": {"foreach": "foreach (torch's default)", "fused": "fused", "for-loop": "for-loop"},
    "allocator": {"default": "Default (as shipped)", "expandable-segments": "Expandable segments"},
    "compile": {c.id: c.label for c in core.COMPILE_CHOICES.values()},
    "zero_stage": {"0": "0: none", "1": "1: optimizer state", "2": "2: + gradients", "3": "3: + weights"},
    "mlp": {"gelu": "GeLU (2 matrices)", "relu": "ReLU (2 matrices)", "swiglu": "SwiGLU (3 matrices)", "geglu": "GeGLU (3 matrices)"},
    "norm": {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"},
    "position_embedding": {"learned": "Learned table", "rope": "RoPE (no parameters)"},
    "qkv_bias": {"": "As attention biases", "true": "Yes", "false": "No"},
    "method": {"full": "Full", "lora": "LoRA", "qlora": "QLoRA"},
    "quantization": {"nf4": "NF4", "nf4-double": "NF4, double quantization", "int8": "int8 (LLM.int8())"},
    "loss": {"standard": "Standard (logits in fp32)", "chunked": "Chunked (torchtune)",
             "fused-linear": "Fused linear cross entropy (Liger)"},
    "offload": {"none": "None", "optimizer": "Optimizer (ZeRO-Offload)",
                "optimizer+parameters": "Optimizer and parameters (ZeRO-Infinity)"},
}


@dataclass(frozen=True)
class Option:
    value: str
    label: str
    group: str = ""  # the select's optgroup, where it has them


def _preset_options() -> tuple[Option, ...]:
    """The model presets grouped by Hub organisation, the groups in the order they first appear."""
    presets = list(core.model_presets().values())
    order = {group: rank for rank, group in enumerate(dict.fromkeys(p.group for p in presets))}
    return tuple(Option(p.id, p.name, p.group) for p in sorted(presets, key=lambda p: order[p.group]))


def _schema_field(name: str) -> Any:
    if name in SCHEMA_FIELDS:
        model, field_name = SCHEMA_FIELDS[name]
        return model.model_fields[field_name]
    for model in (TrainingIn, ParallelismIn, ModelIn, PrecisionIn, FinetuningIn):
        if name in model.model_fields:
            return model.model_fields[name]
    return None


def help_text(name: str) -> str:
    """The schema's description of the field (or its registry's texts), then anything the page adds; or the page's
    own words for it."""
    if name in PAGE_HELP:
        return PAGE_HELP[name]
    schema_field = _schema_field(name)
    parts = [schema_field.description] if schema_field is not None and schema_field.description else []
    if name in REGISTRY_HELP:
        parts = [REGISTRY_HELP[name]]
    if name in EXTRA_HELP:
        parts.append(EXTRA_HELP[name])
    return " ".join(parts)


def _literal_values(annotation: Any) -> tuple[str, ...]:
    if get_origin(annotation) is Literal:
        return tuple(str(v) for v in get_args(annotation))
    for arg in get_args(annotation):
        values = _literal_values(arg)
        if values:
            return values
    return ()


def _labelled(name: str, values: tuple[str, ...]) -> tuple[Option, ...]:
    labels = CHOICE_LABELS.get(name, {})
    return tuple(Option(value, labels.get(value, value)) for value in values)


# The model's selects whose options are a schema field's allowed values; the run's come from their declarations.
MODEL_CHOICES: Final = ("mlp", "norm", "position_embedding")


def options() -> dict[str, tuple[Option, ...]]:
    """Every select and radio group's options, in the order the page lists them."""
    dtypes = tuple(DTYPE_BITS)
    result = {
        "source": _labelled("source", SOURCES),
        "unit": tuple(Option(unit, unit) for unit in UNITS),
        **_catalogue_options(),
        "zero_stage": _labelled("zero_stage", tuple(str(stage) for stage in range(4))),
        "master_weights": (Option(NO_MASTER, "none (no copy)"),) + tuple(Option(d, d) for d in dtypes),
        "qkv_bias": _labelled("qkv_bias", ("", "true", "false")),
    }
    for name in ("weights", "gradients", "optimizer_states", "activations"):
        result[name] = tuple(Option(d, d) for d in dtypes)
    for name in MODEL_CHOICES:
        result[name] = _labelled(name, _literal_values(ModelIn.model_fields[name].annotation))
    for control, (_, _, spec) in DECLARED_CONTROLS.items():
        if spec.kind == "choice" and control not in result:
            result[control] = _labelled(control, spec.choices)
    return result


def _catalogue_options() -> dict[str, tuple[Option, ...]]:
    """The options from the core's catalogues: model presets, GPUs, precision presets and optimizers."""
    gpus = tuple(Option(g.id, g.name) for g in core.gpu_catalogue().values())
    return {
        "preset": _preset_options(),
        "gpu": (Option(NO_GPU, "None (no fit check)"),) + gpus + (Option(CUSTOM_GPU, "Custom capacity…"),),
        GPU_LIKE: gpus,
        "precision": tuple(Option(p.id, p.name) for p in core.PRECISION_PRESETS.values())
        + (Option(CUSTOM_PRECISION, "Custom (per-tensor dtypes below)"),),
        "optimizer": tuple(Option(o.id, o.name) for o in core.OPTIMIZER_INFO.values()),
    }


ARCH_MAIN: Final = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings")
ARCH_MORE: Final = tuple(name for name in ARCHITECTURE_FIELDS if name not in ARCH_MAIN)


