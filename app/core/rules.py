"""The setup's cross-field rules, as data: each rule names the fields it reads and the reason it exists, and
raises DomainError naming the field to change. `validate_setup` runs them in order, the architecture's rules only
when there is an architecture; the first that fails decides the message."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from app.core import activations as act
from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.families import family_of
from app.core.family_rules import encoder_classifier, litgpt_modelled, llama4_modelled
from app.core.finetuning import Finetuning, experts_wrapped, validate_finetuning
from app.core.inputs import check_declared
from app.core.optimizers import check_optimizer
from app.core.saved.op_policy import FUSED_KERNELS
from app.core.setup import (
    FP8_RECIPES,
    FRAMEWORKS,
    OFFLOADS,
    PARALLELISM_INPUTS,
    TRAINING_INPUTS,
    Parallelism,
    Training,
    activation_setup,
    check_int,
    fsdp2_convention,
)


@dataclass(frozen=True)
class Rule:
    fields: tuple[str, ...]  # the inputs it reads ("training" for all of a section)
    check: Callable[[Training, Parallelism, Architecture], None]
    needs_architecture: bool = False


def _autocast(training: Training) -> bool:
    """Whether the model runs under torch.autocast: wider weights than activations, outside Megatron-LM."""
    precision = training.precision
    return training.implementation != "megatron" and precision.bits("weights") > precision.bits("activations")


def _check_moe_finetuning(arch: Architecture, finetuning: Finetuning, parallelism: Parallelism) -> None:
    """Fine-tuning a mixture of experts is modelled for Mixtral, Qwen3-MoE, Qwen2-MoE (its gated shared expert
    frozen), gpt-oss and, with LoRA on the attention, DeepSeek-V2 and -V3 (their dense first layers, ungated shared
    experts and routers frozen), measured with peft on CPU (docs/VALIDATION.md "Fine-tuning"), on one expert
    layout."""
    why = None
    if not finetuning.adapters:
        if arch.dense_layers:
            why = "with dense layers among the sparse ones"
        elif arch.has_shared_expert and not arch.shared_expert_gate:
            why = "with ungated shared experts"
    if why is not None:
        raise DomainError("finetuning.method", f"freezing parts of a mixture of experts {why} is not modelled yet; "
                                               "LoRA on its attention is")
    if experts_wrapped(arch, finetuning) and parallelism.tensor > 1:
        raise DomainError("parallelism.tensor", "adapters on a mixture's stacked experts (all-linear) are modelled "
                                                "without tensor parallelism")
    if parallelism.experts_apart:
        raise DomainError("parallelism.expert" if parallelism.expert > 1 else "parallelism.expert_tensor",
                          "fine-tuning a mixture of experts is modelled with the experts split like the rest of the "
                          "layer (no expert or expert tensor parallelism)")


def _check_uneven_stages(arch: Architecture, parallelism: Parallelism) -> None:
    """Uneven first and last stages (Megatron-LM's --decoder-first/last-pipeline-num-layers): more than one stage,
    the plain 1F1B schedule, and the layers left by the stages given split evenly over the others."""
    p, layers = parallelism.pipeline, arch.num_hidden_layers
    field_name = "parallelism.first_stage_layers" if parallelism.first_stage_layers is not None else \
        "parallelism.last_stage_layers"
    for name in ("first_stage_layers", "last_stage_layers"):
        value = getattr(parallelism, name)
        if value is not None:
            check_int(f"parallelism.{name}", value, low=1, high=layers)
    if p == 1:
        raise DomainError(field_name, "uneven stages need more than one pipeline stage")
    if parallelism.virtual_stages > 1:
        raise DomainError(field_name, "uneven first and last stages are modelled with the plain 1F1B schedule, not "
                                      "with virtual stages")
    # The split the stages would get (Parallelism.stage_layers) must hold every layer, at least one a stage.
    first, between, last = parallelism.stage_layers(layers)
    given = (parallelism.first_stage_layers or 0) + (parallelism.last_stage_layers or 0)
    if p == 2 and first + last != layers:
        raise DomainError(field_name, f"with two stages, the first's and the last's layers must add up to "
                                      f"num_hidden_layers ({layers}), got {first + last}")
    if min(first, last, between if p > 2 else 1) < 1 or first + (p - 2) * between + last != layers:
        raise DomainError(field_name, f"of num_hidden_layers ({layers}), the stages given take {given}: the "
                                      f"{layers - given} layers left must split evenly over the other stages, at "
                                      "least one each")


def _check_expert_load(arch: Architecture, parallelism: Parallelism) -> None:
    """The most-loaded GPU takes between its balanced share and everything its experts can be sent: every token
    of its expert-parallel group, each routing min(k, its experts) copies to it. Without expert parallelism a GPU
    holds every expert and takes all n·k copies, so the load is 1."""
    load, ep = parallelism.expert_load, parallelism.expert
    if isinstance(load, bool) or not isinstance(load, int | float) or not math.isfinite(load):
        raise DomainError("parallelism.expert_load", f"must be a number, got {load!r}")
    k = arch.num_experts_per_tok
    most = ep * min(k, arch.num_local_experts // ep) / k
    if not 1.0 <= load <= most:
        where = (f"with {ep} expert-parallel GPUs and k = {k} it is at most {most:g}" if ep > 1 else
                 "without expert parallelism every GPU takes all the copies: it is 1")
        raise DomainError("parallelism.expert_load", f"must be from 1 (balanced routing) up to what one GPU's "
                                                     f"experts can be sent; {where}, got {load:g}")


def _check_expert_grid(parallelism: Parallelism) -> None:
    """The expert grid (expert-tensor × expert GPUs) is carved from the GPUs of one pipeline stage, tensor × data ×
    context, which it must divide; each expert is then replicated over the rest (Megatron-LM's expert data-parallel
    group). With the expert-tensor degree equal to the tensor-parallel one this asks that the expert degree divide
    data × context."""
    p = parallelism
    if not p.experts_apart:
        return
    stage = p.tensor * p.shard_group
    grid = p.expert * p.expert_tensor_degree
    if stage % grid == 0:
        return
    if p.expert_tensor_degree == p.tensor:
        raise DomainError("parallelism.expert", f"the expert-parallel GPUs come from the data-parallel group: "
                                                f"{p.expert} must divide data × context ({p.shard_group})")
    field_name = "parallelism.expert_tensor" if p.expert == 1 else "parallelism.expert"
    raise DomainError(field_name, f"the expert grid, expert_tensor × expert = {p.expert_tensor_degree} × {p.expert} = "
                                  f"{grid} GPUs, must divide tensor × data × context ({stage})")


def _training_ranges(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Each training field of its kind, within its range or among its choices (an optimizer refused by name)."""
    check_optimizer(training.optimizer)
    check_declared("training", training, TRAINING_INPUTS)
    _recomputed_layers(training)
    _reentrant(training, parallelism)


def _recomputed_layers(training: Training) -> None:
    """Which layers recomputation applies to: every k-th or the first N, of full recomputation only."""
    first = training.recompute_first_layers
    partial = [name for name, given in (("recompute_every", training.recompute_every != 1),
                                        ("recompute_first_layers", first is not None)) if given]
    if partial and training.activation_checkpointing != "full":
        raise DomainError(f"training.{partial[0]}", "chooses which layers full recomputation applies to: set "
                                                    "activation_checkpointing to full")
    if len(partial) == 2:
        raise DomainError("training.recompute_first_layers", "give either recompute_every (every k-th layer) or "
                                                             "recompute_first_layers (the first N of each stage)")


def _reentrant(training: Training, parallelism: Parallelism) -> None:
    """The reentrant checkpoint where it was measured: transformers' modules recomputing every layer, on one GPU's
    share of a layer (docs/VALIDATION.md, "Reentrant checkpoints")."""
    if not training.use_reentrant:
        return
    partial = training.recompute_every != 1 or training.recompute_first_layers is not None
    if training.activation_checkpointing != "full" or partial:
        raise DomainError("training.use_reentrant", "is the checkpoint variant of full recomputation of every layer: "
                                                    "set activation_checkpointing to full, of every layer")
    if training.implementation == "megatron" or parallelism.tensor > 1:
        raise DomainError("training.use_reentrant", "is modelled for Hugging Face's modules without tensor "
                                                    "parallelism (Megatron-LM has a checkpoint function of its own)")
    if training.compile != "none":
        raise DomainError("training.use_reentrant", "is measured without torch.compile; set compile to none")


def _op_policy(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """torchtitan's op-level recomputation where it was measured: dense Hugging Face layers with a gated MLP, no
    fused projections, trained in full in half precision, a fused attention kernel (app/core/saved/op_policy.py)."""
    if training.activation_checkpointing != "op":
        return
    why = None
    if training.implementation != "transformers":
        why = "is modelled for Hugging Face's modules; choose the transformers implementation"
    elif arch.is_moe or arch.is_mla or not arch.is_gated or arch.fused_qkv or arch.fused_gate_up \
            or arch.sliding_window_layers or family_of(arch).gpt2_modules:
        why = ("is modelled for dense layers with separate q, k, v and gate, up, down projections and full attention "
               "(Llama, Mistral, Qwen2 and the like)")
    elif training.finetuning != Finetuning():
        why = "is modelled for training every weight: an adapter's matmuls change which outputs the policy saves"
    elif training.fp8 != "none" or _autocast(training):
        why = "is modelled for half-precision weights without autocast or FP8"
    elif act.attention_kernel(arch, activation_setup(training, parallelism)) not in FUSED_KERNELS:
        why = "saves the fused attention kernel's outputs: choose sdpa or flash attention"
    if why:
        raise DomainError("training.activation_checkpointing", f"op (torchtitan's op-level recomputation) {why}")


def _compiled(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """torch.compile (inductor) where it was measured (app/core/saved/compiled.py): Llama, Mistral, Qwen2 and Gemma
    trained in full in one precision, under a fused attention kernel, without recomputation or with all of it."""
    if training.compile == "none":
        return
    setup = activation_setup(training, parallelism)
    why = None
    if training.implementation != "transformers":
        why = "is measured with Hugging Face's modules; choose the transformers implementation"
    elif not family_of(arch).compile_measured or arch.is_moe or arch.is_mla or arch.norm != "rmsnorm" \
            or not arch.is_gated or arch.fused_qkv or arch.fused_gate_up:
        why = ("is measured for Llama, Mistral, Qwen2 and Gemma (dense layers, RMSNorm, a gated MLP); not for "
               "mixtures of experts or other families")
    elif training.finetuning != Finetuning():
        why = "is measured training every weight, not with LoRA, QLoRA or frozen parts"
    elif training.fp8 != "none" or _autocast(training):
        why = "is measured with weights in the activations' precision, not under autocast or FP8"
    elif training.activation_checkpointing not in ("none", "full") or training.recompute_every != 1 \
            or training.recompute_first_layers is not None:
        why = "is measured without recomputation and with full recomputation of every layer"
    elif parallelism.tensor > 1:
        why = "is measured without tensor parallelism"
    elif act.attention_kernel(arch, setup) not in FUSED_KERNELS:
        why = ("is measured with a fused attention kernel (sdpa or flash); eager attention and sdpa's math path are "
               "decomposed under compile")
    elif arch.sliding_window_layers and arch.sliding_window is not None and setup.seq_len > arch.sliding_window:
        why = "is measured with sequences within the sliding window"
    if why:
        raise DomainError("training.compile", f"inductor {why}")


def _framework_implementation(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """A framework's convention runs the implementation it was written for: Megatron-LM keeps its own loop, gradient
    buffer and optimizer."""
    if training.framework == "deepspeed" and training.implementation == "megatron":
        raise DomainError("training.framework", "Megatron-LM keeps its own gradient buffer and distributed optimizer; "
                                                "choose the pytorch convention")
    if training.framework in ("hf-trainer", "torchtitan") and training.implementation == "megatron":
        raise DomainError("training.framework", "Megatron-LM runs its own loop and optimizer; choose the megatron "
                                                "convention")
    if FRAMEWORKS[training.framework].fsdp2_when_sharded and parallelism.zero_stage == 3 \
            and training.finetuning != Finetuning():
        raise DomainError("training.framework", "fine-tuning under FSDP2's convention (torchtitan at ZeRO stage 3) is "
                                                "not modelled yet; choose the pytorch convention")


def _fp8_recipe(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """An FP8 recipe runs where it was measured: Transformer Engine's as Megatron-LM runs it in bf16 without FSDP;
    torchao's in bf16 with PyTorch's modules; neither with adapters; float8 all-gather under FSDP2."""
    if FP8_RECIPES[training.fp8].transformer_engine is not None:
        if training.implementation != "megatron" or training.precision.activations != "bf16":
            raise DomainError("training.fp8", "Transformer Engine's FP8 recipes are modelled as Megatron-LM runs them "
                                              "(--transformer-impl transformer_engine with --bf16): choose the "
                                              "megatron implementation and a bf16 precision preset")
        if parallelism.zero_stage > 1:
            raise DomainError("training.fp8", "Transformer Engine under FSDP keeps no FP8 weight cache and re-quantizes "
                                              "in backward (transformer_engine/pytorch/module/linear.py: no workspace "
                                              "when is_fsdp2): not modelled; choose ZeRO stage 0 or 1 (Megatron-LM's "
                                              "distributed optimizer)")
    elif training.fp8 != "none":
        if training.precision.activations != "bf16" or training.implementation == "megatron":
            raise DomainError("training.fp8", "torchao's float8 recipes run the model in bf16 (a bf16 precision preset) "
                                              "with PyTorch's own modules, not Megatron-LM's")
    if training.fp8 != "none":
        if training.finetuning != Finetuning():
            raise DomainError("training.fp8", "float8 training with adapters or frozen parts is not modelled")
        if FP8_RECIPES[training.fp8].fp8_all_gather and not fsdp2_convention(training, parallelism):
            raise DomainError("training.fp8", "float8 all-gather is FSDP2's: choose the fsdp2 convention (or torchtitan "
                                              "at ZeRO stage 3), or torchao float8 without it")


def _fsdp2_convention(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """The fsdp2 convention shards everything (ZeRO stage 3), with PyTorch's modules, trained in full."""
    if training.framework == "fsdp2":
        if parallelism.zero_stage != 3:
            raise DomainError("parallelism.zero_stage", "the fsdp2 convention shards parameters, gradients and optimizer "
                                                        "state (fully_shard with reshard_after_forward=True): choose ZeRO "
                                                        "stage 3")
        if training.implementation == "megatron":
            raise DomainError("training.framework", "Megatron-LM keeps its own gradient buffer and distributed "
                                                    "optimizer; choose the megatron convention")
        if training.finetuning != Finetuning():
            raise DomainError("training.framework", "fine-tuning under the fsdp2 convention is not modelled yet; "
                                                    "choose the pytorch convention")


def _megatron_convention(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """The megatron convention is Megatron-LM's own implementation, its distributed optimizer at most ZeRO stage 1."""
    if training.framework == "megatron":
        if training.implementation != "megatron":
            raise DomainError("training.framework", "the megatron convention is Megatron-LM's own: choose the megatron "
                                                    "implementation")
        if parallelism.zero_stage > 1:
            raise DomainError("parallelism.zero_stage", "Megatron-LM's distributed optimizer shards the optimizer state "
                                                        "and main gradients (ZeRO stage 1); choose stage 0 or 1")


def _loss_implementation(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Megatron-LM computes its own vocabulary-parallel cross entropy."""
    if training.loss != "standard" and training.implementation == "megatron":
        raise DomainError("training.loss", "Megatron-LM computes its own vocabulary-parallel cross entropy; "
                                           "choose the standard loss")


def _parallel_ranges(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Each parallel degree within its range, and the expert grid carved from a stage's GPUs."""
    # expert_load's upper bound depends on the mixture: _check_expert_load says which
    check_declared("parallelism", parallelism, PARALLELISM_INPUTS, skip=("expert_load",))
    _check_expert_grid(parallelism)


def _context_chunks(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Context parallelism takes two chunks of every sequence per GPU, through a fused attention kernel."""
    if parallelism.context > 1:
        if training.seq_len % (2 * parallelism.context):
            raise DomainError("parallelism.context", f"seq_len ({training.seq_len:,}) must be divisible by 2 × context "
                                                     f"({2 * parallelism.context}): each rank takes two chunks of every "
                                                     "sequence to balance causal attention (Megatron-LM)")
        if training.attention == "eager":
            raise DomainError("parallelism.context", "context parallelism runs a fused attention kernel per chunk "
                                                     "(ring attention); choose sdpa or flash")


def _offload_zero(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Offloading moves ZeRO's partitions: the optimizer's from stage 1, the parameters' at stage 3."""
    offload = OFFLOADS[parallelism.offload]
    if offload.optimizer and parallelism.zero_stage == 0:
        raise DomainError("parallelism.offload", "offloading runs under ZeRO: choose ZeRO stage 1, 2 or 3")
    if offload.parameters and parallelism.zero_stage < 3:
        raise DomainError("parallelism.offload", "parameters are offloaded only with ZeRO stage 3 (their "
                                                 "partitions are what moves)")


def _finetuning(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Fine-tuning's own rules, for the transformers implementation."""
    autocast = _autocast(training)
    validate_finetuning(training.finetuning, arch, autocast=autocast)
    if training.finetuning != Finetuning() and training.implementation == "megatron":
        raise DomainError("finetuning.method", "fine-tuning with adapters or frozen parts is modelled for the "
                                               "transformers implementation")


def _liger_families(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """Liger Kernel's patches are modelled for the Llama family's gated MLPs."""
    if training.implementation == "liger" and (family_of(arch).gpt2_modules or not arch.is_gated or arch.is_moe):
        raise DomainError("training.implementation", "Liger Kernel's patches are modelled for the Llama family's "
                                                     "gated MLPs (llama, mistral, qwen2/3, gemma, phi3); not for GPT-2, "
                                                     "other ungated MLPs or mixtures of experts")


def _context_sinks(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """gpt-oss's attention with sinks runs a fused kernel per chunk only under flash."""
    if parallelism.context > 1 and arch.attention_sinks and training.attention != "flash":
        raise DomainError("parallelism.context", "context parallelism runs a fused attention kernel per chunk; "
                                                 "transformers runs gpt-oss's attention with sinks eagerly under sdpa "
                                                 "(GptOssPreTrainedModel._supports_sdpa is False): choose flash")


def _expert_degrees(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """Expert parallelism, expert tensor parallelism and the expert load apply to a mixture's routed experts, which
    must split evenly."""
    if arch.is_moe:
        _check_expert_load(arch, parallelism)
    elif parallelism.expert_load != 1.0:
        raise DomainError("parallelism.expert_load", "the expert load applies to a mixture of experts' routed "
                                                     "experts; this model has none")
    if parallelism.expert_tensor_degree != parallelism.tensor and not arch.is_moe:
        raise DomainError("parallelism.expert_tensor", "expert tensor parallelism splits a mixture of experts' routed "
                                                       "experts; this model has none")
    if parallelism.expert > 1:
        if not arch.is_moe:
            raise DomainError("parallelism.expert", "expert parallelism splits a mixture of experts' routed experts; "
                                                    "this model has none")
        if arch.num_local_experts % parallelism.expert:
            raise DomainError("parallelism.expert", f"the {arch.num_local_experts} routed experts must split evenly "
                                                    f"over {parallelism.expert} GPUs")


def _moe_fp8(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """float8 training of mixture-of-experts layers is not modelled."""
    if arch.is_moe and training.fp8 != "none":
        raise DomainError("training.fp8", "float8 training of mixture-of-experts layers (torchao's grouped-GEMM path, "
                                          "Transformer Engine's GroupedLinear) is not modelled")


def _te_shapes(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """Transformer Engine's FP8 GEMMs need their dimensions divisible as its kernels ask, on dense standard attention."""
    te = FP8_RECIPES[training.fp8].transformer_engine
    if te is None:
        return
    if arch.is_mla:
        raise DomainError("training.fp8", "Transformer Engine's FP8 is modelled for Megatron-LM's dense layers with "
                                          "standard attention, not multi-head latent attention")
    # transformer_engine/pytorch/utils.py, assert_dim_for_fp8_exec: an FP8 GEMM's input and weight have leading
    # dimensions divisible by 8 and a last dimension divisible by 16 (the tokens, and the linear layers'
    # output and input widths, on this GPU).
    t = parallelism.tensor
    tokens = training.micro_batch_size * training.seq_len // parallelism.context
    local = tokens // t if parallelism.sequence_parallel else tokens
    inputs = (arch.hidden_size, arch.num_attention_heads * arch.head_size // t, arch.ffn_size // t)
    outputs = ((arch.num_attention_heads + 2 * arch.kv_heads) * arch.head_size // t,
               (2 if arch.is_gated else 1) * arch.ffn_size // t)
    if tokens % 8 or local % 8 or any(width % 16 for width in inputs) or any(width % 8 for width in outputs):
        raise DomainError("training.fp8", f"Transformer Engine's FP8 GEMMs need the tokens on a GPU ({local:,}) "
                                          "and the linear layers' output widths divisible by 8, and their input "
                                          f"widths ({', '.join(f'{w:,}' for w in inputs)}) by 16 "
                                          "(transformer_engine/pytorch/utils.py, assert_dim_for_fp8_exec)")
    if te.block and local % te.block:
        raise DomainError("training.fp8", f"MXFP8's scales are modelled for whole blocks of {te.block} tokens; "
                                          f"this GPU's {local:,} tokens are not a multiple "
                                          "(transformer_engine/pytorch/tensor/mxfp8_tensor.py, get_scale_shape)")


def _moe_modelled(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """A mixture of experts is modelled as transformers runs it; under autocast only where measured."""
    autocast = _autocast(training)
    if arch.is_moe:
        if training.implementation == "megatron":
            raise DomainError("training.implementation", "mixture-of-experts layers are modelled as transformers runs "
                                                         "them; Megatron-LM's MoE is not modelled yet")
        if training.finetuning != Finetuning():
            _check_moe_finetuning(arch, training.finetuning, parallelism)
        if autocast:
            # Measured exact on CPU under torch.autocast (docs/VALIDATION.md, "Mixture of experts" and "gpt-oss"):
            # Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss (eager attention with sinks, whose fp32 sinks make the
            # softmax fp32, _hf_sink_eager_attention in saved/attention.py), their routed experts on transformers'
            # default grouped_mm path (fp32 under autocast, _hf_moe in saved/experts.py); a custom mixture is modelled
            # as Mixtral. DeepSeek's multi-head latent attention is not modelled under autocast, nor DeepSeek's
            # routers and shared experts; frozen parts and expert parallelism's send buffer (fp32 tokens) are not measured.
            why = None
            if not family_of(arch).moe_autocast_measured or arch.n_shared_experts:
                why = f"of model type {arch.model_type}" if arch.model_type else "with DeepSeek-style shared experts"
            elif training.finetuning != Finetuning():
                why = "with frozen parts"
            elif parallelism.expert > 1:
                why = "with expert parallelism"
            if why is not None:
                raise DomainError("training.precision", f"mixture-of-experts models {why} are modelled in their "
                                                        "training dtype (bf16, fp16 or fp32), not under autocast "
                                                        "(Mixtral, Qwen2-MoE, Qwen3-MoE and gpt-oss are)")


def _heads_and_layers(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """Heads split evenly over tensor-parallel GPUs, layers over pipeline stages."""
    t, p = parallelism.tensor, parallelism.pipeline
    if arch.num_attention_heads % t:
        raise DomainError(
            "parallelism.tensor",
            f"num_attention_heads ({arch.num_attention_heads}) must be divisible by the tensor-parallel degree ({t})",
        )
    if arch.kv_heads % t:
        raise DomainError(
            "parallelism.tensor",
            f"num_key_value_heads ({arch.kv_heads}) must be divisible by the tensor-parallel degree ({t})",
        )
    if parallelism.uneven_stages:
        _check_uneven_stages(arch, parallelism)
    elif arch.num_hidden_layers % p:
        raise DomainError(
            "parallelism.pipeline",
            f"num_hidden_layers ({arch.num_hidden_layers}) must be divisible by the pipeline degree ({p})",
        )


def _virtual_stages(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """The interleaved schedule: more than one stage, layers that split over stages × virtual stages, and a multiple of
    the pipeline degree of micro-batches."""
    p, v = parallelism.pipeline, parallelism.virtual_stages
    if v > 1:
        if p == 1:
            raise DomainError("parallelism.virtual_stages", "interleaving needs more than one pipeline stage")
        if arch.num_hidden_layers % (p * v):
            raise DomainError("parallelism.virtual_stages", f"num_hidden_layers ({arch.num_hidden_layers}) must be "
                                                            f"divisible by pipeline × virtual stages ({p} × {v})")
        if training.gradient_accumulation_steps % p:
            raise DomainError("parallelism.virtual_stages", "the interleaved schedule runs a multiple of the pipeline "
                                                            f"degree of micro-batches per step (Megatron-LM): make "
                                                            f"gradient_accumulation_steps a multiple of {p}")


def _frozen_pipeline(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """Frozen layers lie on the first pipeline stage."""
    p, frozen = parallelism.pipeline, training.finetuning.frozen_layers
    first_stage = parallelism.stage_layers(arch.num_hidden_layers)[0]
    if p > 1 and frozen > first_stage:
        raise DomainError("finetuning.frozen_layers", f"with {p} pipeline stages, freeze at most the first stage's "
                                                      f"{first_stage} layers (got {frozen})")


def _activation_offload(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Activation offloading as torchtune, transformers and Megatron-LM run it (`app.core.activation_offload`):
    torchtune's recipes refuse it without activation checkpointing, transformers offloads only the checkpoints; both
    are modelled with every layer recomputed, for Hugging Face-style modules on one pipeline stage. Megatron-LM
    refuses its own with any recomputation or pipeline parallelism, and unless 0 < layers offloaded < num_layers."""
    if training.activation_offload == "megatron":
        refused = _megatron_offload(training, parallelism, arch)
        if refused:
            raise DomainError(*refused)
        return
    if training.activation_offload_layers:
        raise DomainError("training.activation_offload_layers", "is Megatron-LM's --cpu-offloading-num-layers: set "
                                                                "activation_offload to megatron, or this to 0")
    if training.activation_offload == "none":
        return
    why = None
    if training.activation_checkpointing != "full":
        why = "needs activation_checkpointing full (torchtune refuses it without; transformers moves checkpoints)"
    elif training.recompute_every != 1 or training.recompute_first_layers is not None:
        why = "is modelled with every layer recomputed: set recompute_every 1 and recompute_first_layers null"
    elif training.implementation == "megatron":
        why = "is modelled for the transformers and liger implementations; with megatron, choose megatron"
    elif parallelism.pipeline > 1:
        why = "is not modelled with pipeline parallelism; set parallelism.pipeline to 1"
    elif training.compile != "none":
        why = "is not measured with torch.compile; set compile to none"
    if why:
        raise DomainError("training.activation_offload", why)


def _megatron_offload(training: Training, parallelism: Parallelism,
                      arch: Architecture | None) -> tuple[str, str] | None:
    """Megatron-LM's checks of --cpu-offloading-num-layers (transformer_config.py at d98e8a6), as (field, why)."""
    field = "training.activation_offload"
    if training.implementation != "megatron":
        return field, "megatron is Megatron-LM's --cpu-offloading-num-layers: set implementation to megatron"
    if training.activation_checkpointing != "none":
        return field, "Megatron-LM refuses CPU offloading with any recomputation: set activation_checkpointing none"
    if parallelism.pipeline > 1:
        return field, "Megatron-LM refuses CPU offloading with pipeline parallelism: set parallelism.pipeline to 1"
    layers = arch.num_hidden_layers if arch is not None else None
    if training.activation_offload_layers < 1 or (layers is not None and training.activation_offload_layers >= layers):
        limit = f" and below num_hidden_layers ({layers})" if layers is not None else ""
        return "training.activation_offload_layers", f"must be at least 1{limit} with activation_offload megatron"
    return None


SETUP_RULES: Final = (
    Rule(("training",), _training_ranges),
    Rule(("training.framework", "training.implementation",
          "parallelism.zero_stage", "finetuning"),
         _framework_implementation),
    Rule(("training.fp8", "training.implementation",
          "training.precision", "parallelism.zero_stage", "finetuning"),
         _fp8_recipe),
    Rule(("training.framework", "parallelism.zero_stage", "training.implementation", "finetuning"), _fsdp2_convention),
    Rule(("training.framework", "training.implementation", "parallelism.zero_stage"), _megatron_convention),
    Rule(("training.loss", "training.implementation"), _loss_implementation),
    Rule(("parallelism",), _parallel_ranges),
    Rule(("parallelism.context", "training.seq_len", "training.attention"), _context_chunks),
    Rule(("parallelism.offload", "parallelism.zero_stage"), _offload_zero),
    Rule(("training.activation_offload", "training.activation_offload_layers", "training.activation_checkpointing",
          "training.recompute_every", "training.recompute_first_layers", "training.implementation",
          "parallelism.pipeline", "training.compile"),
         _activation_offload),
    Rule(("finetuning", "training.implementation", "training.precision"), _finetuning),
    Rule(("training.implementation", "training.framework", "finetuning", "parallelism.tensor",
          "parallelism.sequence_parallel", "parallelism.pipeline", "parallelism.context", "training.fp8",
          "training.loss", "training.compile", "training.attention", "training.activation_checkpointing",
          "training.recompute_every", "training.recompute_first_layers", "training.activation_offload"),
         encoder_classifier, needs_architecture=True),
    Rule(("training.implementation",), _liger_families, needs_architecture=True),
    Rule(("training.implementation", "finetuning", "training.framework", "training.attention", "training.loss",
          "training.activation_checkpointing", "training.recompute_every", "training.recompute_first_layers",
          "parallelism.offload", "training.activation_offload", "training.fp8", "parallelism.tensor",
          "parallelism.sequence_parallel", "parallelism.pipeline", "parallelism.context"), litgpt_modelled),
    Rule(("training.activation_checkpointing", "training.implementation", "training.attention", "training.fp8",
          "training.precision", "finetuning"), _op_policy, needs_architecture=True),
    Rule(("training.compile", "training.implementation", "training.attention", "training.activation_checkpointing",
          "training.fp8", "training.precision", "finetuning", "parallelism.tensor"), _compiled, needs_architecture=True),
    Rule(("parallelism.context", "training.attention"), _context_sinks, needs_architecture=True),
    Rule(("parallelism.expert", "parallelism.expert_tensor",
          "parallelism.expert_load"),
         _expert_degrees, needs_architecture=True),
    Rule(("training.fp8",), _moe_fp8, needs_architecture=True),
    Rule(("training.fp8", "training.micro_batch_size",
          "training.seq_len", "parallelism.tensor"),
         _te_shapes, needs_architecture=True),
    Rule(("training.implementation", "training.precision",
          "finetuning", "parallelism.expert"),
         _moe_modelled, needs_architecture=True),
    Rule(("training.attention", "finetuning", "parallelism.tensor", "parallelism.context", "parallelism.expert"),
         llama4_modelled, needs_architecture=True),
    Rule(("parallelism.tensor", "parallelism.pipeline",
          "parallelism.first_stage_layers", "parallelism.last_stage_layers"),
         _heads_and_layers, needs_architecture=True),
    Rule(("parallelism.virtual_stages", "parallelism.pipeline",
          "training.gradient_accumulation_steps"),
         _virtual_stages, needs_architecture=True),
    Rule(("finetuning.frozen_layers", "parallelism.pipeline"), _frozen_pipeline, needs_architecture=True),
)


def validate_setup(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Cross-field rules the schema cannot see, each naming the field to change."""
    for rule in SETUP_RULES:
        if rule.needs_architecture and arch is None:
            continue
        rule.check(training, parallelism, arch)  # type: ignore[arg-type]
