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
from app.core.units import DTYPE_BITS
from app.web.form import CUSTOM_PRECISION, NO_GPU, NO_MASTER, SOURCES, UNITS

LABELS: Final[dict[str, str]] = {
    "source": "Describe the model by",
    "preset": "Model",
    "num_params": "Parameter count",
    "hf_config": "config.json",
    "micro_batch_size": "Micro-batch size",
    "seq_len": "Sequence length",
    "precision": "Precision",
    "optimizer": "Optimizer",
    "optimizer_implementation": "Optimizer implementation",
    "loop": "Training loop",
    "gradient_accumulation_steps": "Gradient accumulation",
    "adafactor_momentum": "Adafactor keeps momentum",
    "activation_checkpointing": "Activation checkpointing",
    "attention": "Attention kernel",
    "implementation": "Implementation",
    "framework_overhead_bytes": "Extra per GPU, outside what is modelled",
    "allocator": "PyTorch's CUDA allocator",
    "data": "Data parallel",
    "zero_stage": "ZeRO stage",
    "framework": "Memory convention",
    "fp8": "FP8 training",
    "tensor": "Tensor parallel",
    "sequence_parallel": "Sequence parallelism",
    "pipeline": "Pipeline stages",
    "gpu": "GPU",
    "unit": "Sizes in",
    "weights": "Weights",
    "gradients": "Gradients",
    "master_weights": "Master weights",
    "optimizer_states": "Optimizer state",
    "activations": "Activations",
    "num_hidden_layers": "Layers",
    "hidden_size": "Hidden size",
    "num_attention_heads": "Attention heads",
    "num_key_value_heads": "Key/value heads",
    "head_dim": "Head size",
    "intermediate_size": "MLP inner size",
    "vocab_size": "Vocabulary size",
    "max_position_embeddings": "Max positions",
    "tie_word_embeddings": "Tied input and output embeddings",
    "attention_bias": "Attention biases",
    "qkv_bias": "Q, K, V biases",
    "mlp_bias": "MLP biases",
    "mlp": "MLP",
    "norm": "Norm",
    "norms_per_layer": "Norms per layer",
    "position_embedding": "Positions",
    "dropout": "Dropout",
    "attention_dropout": "Attention dropout",
    "loss": "Loss",
    "loss_chunks": "Loss chunks",
    "context": "Context parallel",
    "virtual_stages": "Virtual stages per GPU",
    "first_stage_layers": "Layers on the first stage",
    "last_stage_layers": "Layers on the last stage",
    "reduce_bucket_size": "Reduce bucket (elements)",
    "expert": "Expert parallel",
    "expert_tensor": "Expert tensor parallel",
    "expert_load": "Most-loaded expert GPU's load",
    "offload": "Offload to host memory",
    "gpus_per_node": "GPUs per node",
    "host_ram": "Host RAM per node",
    "method": "Method",
    "rank": "LoRA rank",
    "target_modules": "Target modules",
    "lora_dropout": "LoRA dropout",
    "save_embed_tokens": "Train the embeddings in full (embed_tokens)",
    "save_lm_head": "Train the output layer in full (lm_head)",
    "quantization": "Base quantization",
    "freeze_embeddings": "Freeze the embeddings",
    "frozen_layers": "Frozen layers",
}

EXTRA_HELP: Final[dict[str, str]] = {
    "source": "A preset, your own architecture, a bare parameter count (model states only) or a Hugging Face config.json.",
    "preset": "Exact parameter counts from each model's published architecture.",
    "num_params": "Whole number, e.g. 6,738,415,616 or 7B (k, M, B, T). Activations need the architecture, "
    "so only model states are computed.",
    "precision": "The dtype of each kind of tensor; open Per-tensor dtypes to see or set them.",
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
    "first_stage_layers": "Blank: an even split. Fewer layers where the embedding sits balance the stages "
    "(Megatron-LM's --decoder-first-pipeline-num-layers).",
    "last_stage_layers": "Blank: an even split. Fewer layers where the output layer and loss sit balance the stages "
    "(--decoder-last-pipeline-num-layers).",
    "expert_tensor": "Blank: the tensor-parallel degree. Each routed expert's matrices split over this many GPUs "
    "(Megatron-LM's --expert-tensor-parallel-size).",
    "host_ram": "The page's own figure, for the host memory bar: e.g. 512 GiB or 2 TB.",
    "target_modules": "Comma-separated, e.g. q_proj, v_proj, or all-linear.",
    "method": "LoRA and QLoRA need the base in its own dtype: choose a precision that is not autocast.",
    "save_embed_tokens": "modules_to_save: peft keeps a trainable copy beside the frozen original.",
    "save_lm_head": "modules_to_save: peft keeps a trainable copy beside the frozen original.",
}
# Help read from a registry's own texts instead of the schema's description: each choice's label and what it counts.
REGISTRY_HELP: Final[dict[str, str]] = {
    "framework": "Whose accounting the model states follow. "
    + " ".join(f"{item.label}: {item.about}" for item in core.FRAMEWORKS.values()),
    "fp8": "Which linear layers compute in float8. "
    + " ".join(f"{item.label}: {item.about}" for item in core.FP8_RECIPES.values()),
}
# Controls named apart from their API field (the finetuning field `dropout` would clash with the architecture's).
SCHEMA_FIELDS: Final[dict[str, tuple[Any, str]]] = {"lora_dropout": (FinetuningIn, "dropout")}

CHOICE_LABELS: Final[dict[str, dict[str, str]]] = {
    "source": {"preset": "Preset", "custom": "Architecture", "params": "Parameter count", "config": "config.json"},
    "activation_checkpointing": {c.id: c.label for c in core.CHECKPOINTING_CHOICES.values()},
    "attention": {c.id: c.label for c in core.ATTENTION_CHOICES.values()},
    "implementation": {c.id: c.label for c in core.IMPLEMENTATION_CHOICES.values()},
    "loop": {loop.id: loop.label for loop in core.LOOPS.values()},
    "framework": {item.id: item.label for item in core.FRAMEWORKS.values()},
    "fp8": {item.id: item.label for item in core.FP8_RECIPES.values()},
    "optimizer_implementation": {"foreach": "foreach (torch's default)", "fused": "fused", "for-loop": "for-loop"},
    "allocator": {"default": "Default (as shipped)", "expandable-segments": "Expandable segments"},
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


def _schema_field(name: str) -> Any:
    if name in SCHEMA_FIELDS:
        model, field_name = SCHEMA_FIELDS[name]
        return model.model_fields[field_name]
    for model in (TrainingIn, ParallelismIn, ModelIn, PrecisionIn, FinetuningIn):
        if name in model.model_fields:
            return model.model_fields[name]
    return None


def help_text(name: str) -> str:
    """The schema's description of the field (or its registry's texts), then anything the page adds."""
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


def options() -> dict[str, tuple[Option, ...]]:
    """Every select and radio group's options, in the order the page lists them."""
    dtypes = tuple(DTYPE_BITS)
    result = {
        "source": _labelled("source", SOURCES),
        "unit": tuple(Option(unit, unit) for unit in UNITS),
        "preset": tuple(Option(p.id, p.name) for p in core.model_presets().values()),
        "gpu": (Option(NO_GPU, "None (no fit check)"),) + tuple(Option(g.id, g.name) for g in core.gpu_catalogue().values()),
        "precision": tuple(Option(p.id, p.name) for p in core.PRECISION_PRESETS.values())
        + (Option(CUSTOM_PRECISION, "Custom (per-tensor dtypes below)"),),
        "optimizer": tuple(Option(o.id, o.name) for o in core.OPTIMIZER_INFO.values()),
        "zero_stage": _labelled("zero_stage", tuple(str(stage) for stage in range(4))),
        "master_weights": (Option(NO_MASTER, "none (no copy)"),) + tuple(Option(d, d) for d in dtypes),
        "qkv_bias": _labelled("qkv_bias", ("", "true", "false")),
    }
    for name in ("weights", "gradients", "optimizer_states", "activations"):
        result[name] = tuple(Option(d, d) for d in dtypes)
    for name in ("activation_checkpointing", "attention", "implementation", "loop", "optimizer_implementation",
                 "allocator"):
        result[name] = _labelled(name, _literal_values(TrainingIn.model_fields[name].annotation))
    for name in ("mlp", "norm", "position_embedding"):
        result[name] = _labelled(name, _literal_values(ModelIn.model_fields[name].annotation))
    result["loss"] = _labelled("loss", _literal_values(TrainingIn.model_fields["loss"].annotation))
    result["offload"] = _labelled("offload", _literal_values(ParallelismIn.model_fields["offload"].annotation))
    result["framework"] = _labelled("framework", _literal_values(TrainingIn.model_fields["framework"].annotation))
    result["fp8"] = _labelled("fp8", _literal_values(TrainingIn.model_fields["fp8"].annotation))
    for name in ("method", "quantization"):
        result[name] = _labelled(name, _literal_values(FinetuningIn.model_fields[name].annotation))
    return result


ARCH_MAIN: Final = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings")
ARCH_MORE: Final = tuple(name for name in ARCHITECTURE_FIELDS if name not in ARCH_MAIN)


# The training-loop control shows under the conventions that do not run a loop of their own (setup.FRAMEWORKS).
LOOP_SHOWN: Final = "framework=" + ",".join(key for key, item in core.FRAMEWORKS.items() if item.loop is None)


def condition_holds(expression: str, values: dict[str, str]) -> bool:
    """When a control is shown: ``name=a,b`` (value is one of) or ``name>n`` (a number above n).

    static/app.js evaluates the same expressions in the browser as the person changes the form.
    """
    if ">" in expression:
        name, threshold = expression.split(">", 1)
        text = "".join(values.get(name, "").replace(",", "").replace("_", "").split())
        return text.isdigit() and int(text) > int(threshold)
    name, choices = expression.split("=", 1)
    return values.get(name, "") in choices.split(",")
