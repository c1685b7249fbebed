"""What the families measured with a layout of their own were measured with (docs/VALIDATION.md): the setup rules
that refuse, by name, what their measurements do not cover. `rules.SETUP_RULES` runs them with the others."""

from __future__ import annotations

from typing import Final

from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.families import family_of
from app.core.setup import Parallelism, Training

# Frameworks whose accounting of model states holds for any model (not Megatron-LM's or torchtitan's, whose own
# model code is a decoder's).
ENCODER_FRAMEWORKS: Final = ("pytorch", "deepspeed", "fsdp2", "hf-trainer")


def encoder_classifier(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """An encoder with a classification head (BERT, RoBERTa: `Family.classifier`) is estimated as it was measured
    (docs/VALIDATION.md, "Encoders"): transformers' modules under sdpa or eager attention, every parameter trained, the
    standard cross entropy over num_labels, no or full recomputation, the model whole on each GPU (data parallelism
    and ZeRO only). Every other setting is refused, naming it."""
    if family_of(arch).classifier is None:
        return
    ft = training.finetuning
    unmodelled = (
        ("training.implementation", training.implementation != "transformers", "transformers' modules only"),
        ("training.framework", training.framework not in ENCODER_FRAMEWORKS,
         f"a framework of {', '.join(ENCODER_FRAMEWORKS)} (Megatron-LM and torchtitan build decoders)"),
        ("finetuning.method", ft.method != "full", "full fine-tuning only (LoRA and QLoRA on encoders not measured)"),
        ("finetuning.frozen_layers", ft.frozen_layers > 0, "every layer trained"),
        ("finetuning.freeze_embeddings", ft.freeze_embeddings, "the embeddings trained"),
        ("parallelism.tensor", parallelism.tensor > 1, "no tensor parallelism"),
        ("parallelism.sequence_parallel", parallelism.sequence_parallel, "no sequence parallelism"),
        ("parallelism.pipeline", parallelism.pipeline > 1, "no pipeline parallelism"),
        ("parallelism.context", parallelism.context > 1, "no context parallelism"),
        ("training.fp8", training.fp8 != "none", "no FP8 training"),
        ("training.loss", training.loss != "standard",
         "the standard cross entropy (the loss is over num_labels, not the vocabulary: nothing to chunk or fuse)"),
        ("training.compile", training.compile != "none", "no torch.compile"),
        ("training.attention", training.attention not in ("sdpa", "eager"), "sdpa or eager attention"),
        ("training.activation_checkpointing", training.activation_checkpointing not in ("none", "full"),
         "no recomputation, or full recomputation of every layer"),
        ("training.recompute_every", training.recompute_every != 1, "full recomputation of every layer"),
        ("training.recompute_first_layers", training.recompute_first_layers is not None, "every layer recomputed"),
        ("training.activation_offload", training.activation_offload != "none", "no activation offloading"),
    )
    for field_name, refused, measured in unmodelled:
        if refused:
            raise DomainError(field_name, f"an encoder with a classification head ({arch.model_type}) is estimated as "
                                          f"measured: {measured}")


LLAMA4_ADAPTED: Final = frozenset(("q_proj", "k_proj", "v_proj", "o_proj"))


def llama4_modelled(training: Training, parallelism: Parallelism, arch: Architecture) -> None:
    """Llama 4 as measured on CPU (docs/VALIDATION.md, "More families" and "Fine-tuning"): trained in full or by LoRA
    on the attention's projections, by transformers' sdpa or eager attention (Llama4PreTrainedModel has no
    flash-attention path), on one GPU's share of the data only."""
    if not family_of(arch).llama4_attention:
        return
    ft = training.finetuning
    adapters = ft.method != "full"
    why = {"training.attention": training.attention == "flash" and "has no flash-attention path in transformers",
           "finetuning.method": adapters and ft.method != "lora" and f"is not measured with {ft.method}",
           "finetuning.target_modules": adapters and (isinstance(ft.target_modules, str)
                                                      or not set(ft.target_modules) <= LLAMA4_ADAPTED)
           and "is measured with LoRA on q_proj, k_proj, v_proj and o_proj alone",
           "finetuning.modules_to_save": adapters and bool(ft.modules_to_save) and "is measured without modules_to_save",
           "parallelism.tensor": parallelism.tensor > 1 and "is measured without tensor parallelism",
           "parallelism.context": parallelism.context > 1 and "is measured without context parallelism",
           "parallelism.expert": parallelism.expert > 1 and "has no expert-parallel plan in transformers"}
    for field_name, reason in why.items():
        if reason:
            raise DomainError(field_name, f"Llama 4 {reason}")


# The memory convention LitGPT's published fine-tuning tables ran under (one GPU; PyTorch's accounting). Fabric's
# FSDPStrategy on several GPUs would be the fsdp2 convention, where fine-tuning is not modelled.
LITGPT_FRAMEWORKS: Final = ("pytorch",)


def litgpt_modelled(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """LitGPT's model (implementation litgpt, saved.common) as its published LoRA and QLoRA tables ran it
    (docs/VALIDATION.md, "Fine-tuning"). Accepted: LoRA or QLoRA on a dense Llama-style decoder (a family marked
    litgpt, or one given field by field) with an untied output layer, sdpa or flash attention, the standard or chunked
    loss, no recomputation or every layer's, under PyTorch's accounting with data parallelism and ZeRO. Refused by
    name: everything else, full fine-tuning among it: LitGPT's RMSNorm multiplies by a trainable weight in fp32, which
    keeps an fp32 product the Hugging Face layers do not (LitGPT's RMSNorm.forward: ``(self.weight *
    x_normed).to(dtype=dtype)``, x_normed in fp32). A tied output layer is refused with its remedy: LitGPT's GPT
    builds its own lm_head (litgpt/model.py, GPT.__init__) and its checkpoint conversion copies the embedding into
    it, so the model LitGPT trains is the untied one."""
    if training.implementation != "litgpt":
        return
    ft = training.finetuning
    unmodelled = (
        ("training.implementation", arch is not None and (not family_of(arch).litgpt or arch.is_moe),
         "a Llama-style decoder (llama, mistral, qwen2 or one given field by field), not a mixture of experts"),
        ("model.tie_word_embeddings", arch is not None and arch.tie_word_embeddings,
         "an untied output layer: LitGPT's GPT builds its own lm_head and copies the embedding into it; turn "
         "tie_word_embeddings off to estimate the model it trains"),
        ("finetuning.method", not ft.adapters, "LoRA or QLoRA (full fine-tuning is not modelled)"),
        ("finetuning.modules_to_save", bool(ft.modules_to_save), "no modules_to_save (LitGPT has none)"),
        ("training.framework", training.framework not in LITGPT_FRAMEWORKS,
         "PyTorch's accounting (memory convention pytorch), with data parallelism and ZeRO if any"),
        ("training.attention", training.attention == "eager", "sdpa or flash (LitGPT calls torch's sdpa)"),
        ("training.loss", training.loss == "fused-linear", "the standard or chunked loss (no Liger Kernel)"),
        ("training.activation_checkpointing", training.activation_checkpointing not in ("none", "full"),
         "no recomputation, or full recomputation of every layer"),
        ("training.recompute_every", training.recompute_every != 1, "every layer recomputed, if any"),
        ("training.recompute_first_layers", training.recompute_first_layers is not None,
         "every layer recomputed, if any"),
        ("parallelism.offload", parallelism.offload != "none", "no offloading of the model's states"),
        ("training.activation_offload", training.activation_offload != "none", "no activation offloading"),
        ("training.fp8", training.fp8 != "none", "no FP8 training"),
        ("parallelism.tensor", parallelism.tensor > 1, "no tensor parallelism"),
        ("parallelism.sequence_parallel", parallelism.sequence_parallel, "no sequence parallelism"),
        ("parallelism.pipeline", parallelism.pipeline > 1, "no pipeline parallelism"),
        ("parallelism.context", parallelism.context > 1, "no context parallelism"),
    )
    for field_name, refused, modelled in unmodelled:
        if refused:
            raise DomainError(field_name, f"LitGPT's model (implementation litgpt) is modelled with {modelled}")
