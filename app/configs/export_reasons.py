"""Why a field does not come back from an exported file, for each kind of file written: what the answer's
``unexpressed`` list says beside each field the file loses."""

from __future__ import annotations

from typing import Final

# Why a field does not come back from a kind's file.
WHY: Final[dict[str, dict[str, str]]] = {
    "deepspeed": {
        "training.activation_offload": "DeepSpeed's cpu_checkpointing offloads deepspeed.checkpointing's checkpoints, "
                                         "which a Hugging Face model does not use",
        "model": "a DeepSpeed config does not name the model: the training script loads it",
        "training.seq_len": "a DeepSpeed config does not say the sequence length: the data pipeline does",
        "training.activation_checkpointing": "DeepSpeed's activation_checkpointing section only configures "
                                             "deepspeed.checkpointing; a Hugging Face model recomputes with "
                                             "model.gradient_checkpointing_enable()",
        "training.attention": "the attention kernel is the model's (attn_implementation when it is loaded)",
        "training.implementation": "whose layers run the model is the script's choice",
        "training.loop": "how the loop holds the model's output is the script's",
        "parallelism.pipeline": "DeepSpeed's pipeline stages are set in code, PipelineModule(num_stages=...)",
        "parallelism.sequence_parallel": "Megatron-style sequence parallelism is not a DeepSpeed setting",
        "training.precision": "DeepSpeed keeps an fp32 master copy with bf16 or fp16 (and accumulates in fp32 "
                              "only with ZeRO stage 1): this precision has no DeepSpeed form",
        "training.optimizer": "not one of DeepSpeed's optimizers nor a torch.optim class: pass it to "
                              "deepspeed.initialize(optimizer=...) as the client optimizer",
        "training.optimizer_implementation": "this implementation has no DeepSpeed form",
        "training.adafactor_momentum": "torch.optim.Adafactor keeps no first moment",
        "finetuning": "adapters and frozen layers are the script's (peft's get_peft_model, requires_grad)",
        "parallelism.gpus_per_node": "a DeepSpeed config does not say how many GPUs share a host: the hostfile does",
        "training.framework": "DeepSpeed runs this file: from ZeRO stage 1 on its memory follows DeepSpeed's own "
                              "convention, at stage 0 plain data parallelism's",
    },
    "training-arguments": {
        "training.activation_offload": "TrainingArguments offload with transformers' own save_on_cpu "
                                         "(checkpoints-to-host), not torchtune's hooks",
        "model": "TrainingArguments do not name the model: from_pretrained does",
        "training.seq_len": "the sequence length is the tokenizer's or the data collator's (max_length)",
        "training.attention": "the attention kernel is the model's: from_pretrained(..., attn_implementation=...)",
        "training.implementation": "the Trainer runs Hugging Face modules",
        "training.loop": "the Trainer's loss step keeps only the loss (hf-trainer)",
        "training.activation_checkpointing": "the Trainer recomputes whole layers (gradient_checkpointing) or "
                                             "nothing",
        "parallelism.pipeline": "the Trainer has no pipeline parallelism",
        "parallelism.sequence_parallel": "the Trainer has no Megatron-style sequence parallelism",
        "parallelism.data": "the number of GPUs is the launcher's (torchrun --nproc_per_node); it is in the "
                            "DeepSpeed section's train_batch_size when there is one",
        "training.precision": "the Trainer's bf16/fp16 is autocast, and DeepSpeed keeps an fp32 master copy: for "
                              "pure half precision load the model in that dtype (from_pretrained(..., "
                              "dtype=torch.bfloat16)) instead",
        "training.optimizer": "not one of the Trainer's optim names (transformers' OptimizerNames)",
        "training.optimizer_implementation": "the Trainer's optim name fixes the implementation",
        "training.adafactor_momentum": "the Trainer's adafactor passes no beta1",
        "parallelism.tensor": "tensor parallelism goes in the DeepSpeed section (AutoTP)",
        "finetuning": "adapters and frozen layers are the script's (peft's get_peft_model, requires_grad)",
        "parallelism.gpus_per_node": "the Trainer's arguments do not say how many GPUs share a host",
        "training.framework": "the engine the Trainer's file names sets the convention: DeepSpeed's from ZeRO stage "
                              "1 on, else pytorch's (this file writes no FSDP section, so not fsdp2's)",
    },
    "accelerate": {
        "training.activation_offload": "accelerate's config has no activation offloading",
        "model": "accelerate's config does not name the model",
        "training.micro_batch_size": "the batch size is the script's data loader's",
        "training.seq_len": "the sequence length is the script's",
        "training.optimizer": "the optimizer is the script's",
        "training.optimizer_implementation": "the optimizer is the script's",
        "training.adafactor_momentum": "the optimizer is the script's",
        "training.attention": "the attention kernel is the model's",
        "training.loop": "the training loop is the script's",
        "training.gradient_accumulation_steps": "without DeepSpeed, accumulation is Accelerator("
                                                "gradient_accumulation_steps=...) in the script",
        "training.activation_checkpointing": "accelerate's config recomputes only under FSDP "
                                             "(fsdp_activation_checkpointing) or Megatron-LM",
        "training.precision": "accelerate's mixed_precision is autocast without an engine, and DeepSpeed or FSDP "
                              "keep an fp32 master copy: this precision has no accelerate form",
        "training.implementation": "Megatron-LM runs through accelerate's MEGATRON_LM plugin only",
        "parallelism.tensor": "tensor parallelism needs the MEGATRON_LM plugin or FSDP2's parallelism_config",
        "parallelism.pipeline": "pipeline parallelism needs the MEGATRON_LM plugin",
        "parallelism.sequence_parallel": "sequence parallelism needs the MEGATRON_LM plugin",
        "parallelism.zero_stage": "this sharding has no form under the chosen plugin",
        "finetuning": "adapters and frozen layers are the script's (peft's get_peft_model, requires_grad)",
        "parallelism.offload": "offload goes through accelerate's DeepSpeed plugin, not the Megatron-LM one",
        "parallelism.gpus_per_node": "num_processes does not split evenly into machines of that many GPUs",
        "training.framework": "the plugin sets the convention: DeepSpeed's from ZeRO stage 1 on, Megatron-LM's with "
                              "MEGATRON_LM, else pytorch's (this file writes no FSDP section, so not fsdp2's)",
    },
    "axolotl": {
        "training.activation_offload": "axolotl offloads with torchtune's hooks (TRL's copy), and with an adapter "
                                         "without recomputation, which is not modelled",
        "model": "base_model is a Hugging Face id or a path: give your model's (no preset matches this model)",
        "training.precision": "axolotl loads the weights in the run's half dtype: bf16 alone is pure bf16, "
                              "DeepSpeed adds an fp32 master copy; autocast over fp32 weights has no axolotl form",
        "training.implementation": "axolotl runs Hugging Face modules",
        "training.loop": "axolotl trains with the Trainer, which keeps only the loss (hf-trainer)",
        "training.activation_checkpointing": "axolotl recomputes whole layers (gradient_checkpointing) or nothing",
        "training.optimizer": "not one of axolotl's optimizer names",
        "training.optimizer_implementation": "axolotl's optimizer name fixes the implementation",
        "training.adafactor_momentum": "axolotl's adafactor passes no beta1",
        "parallelism.pipeline": "axolotl has no pipeline parallelism",
        "parallelism.sequence_parallel": "axolotl has no Megatron-style sequence parallelism",
        "parallelism.data": "the number of GPUs is the launcher's; it is in the DeepSpeed section's "
                            "train_batch_size when there is one",
        "training.attention": "this attention has no axolotl form",
        "finetuning": "axolotl freezes layers with unfrozen_parameters patterns, which trainmem does not write; "
                      "adapters other than lora and qlora have no trainmem form",
        "parallelism.gpus_per_node": "axolotl's config does not say how many GPUs share a host",
        "training.framework": "the engine the file names sets the convention: DeepSpeed's from ZeRO stage 1 on, else "
                              "pytorch's (this file writes no FSDP section, so not fsdp2's)",
    },
}
GENERIC_WHY: Final = "the file does not carry it"
# Set in the training script for every kind of file written here.
SCRIPT_WHY: Final = {
    "parallelism.expert": "expert parallelism is the model code's (DeepSpeed's deepspeed.moe.layer.MoE(ep_size=...), "
                          "Megatron-LM's --expert-model-parallel-size, torchtitan's expert_parallel_degree); none of "
                          "these files sets it for a Hugging Face model",
    "parallelism.expert_tensor": "expert tensor parallelism is Megatron-LM's (--expert-tensor-parallel-size); none of "
                                 "these files sets it",
    "parallelism.first_stage_layers": "uneven pipeline stages are Megatron-LM's (--decoder-first-pipeline-num-layers); "
                                      "none of these files sets them",
    "parallelism.last_stage_layers": "uneven pipeline stages are Megatron-LM's (--decoder-last-pipeline-num-layers); "
                                     "none of these files sets them",
    "parallelism.expert_load": "the most-loaded expert GPU's load is an outcome of routing (bounded by a capacity "
                               "factor set in the model code or Megatron-LM's --moe-expert-capacity-factor), not a "
                               "setting of these files",
    "training.allocator": "PyTorch's allocator is set in the environment of the process, not in these files: "
                          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "training.fp8": "torchao's float8 training is applied in the script (convert_to_float8_training, or torchtitan's "
                    "float8 converter); Transformer Engine's recipes by Megatron-LM's own flags (--fp8-format, "
                    "--fp8-recipe), which accelerate's Megatron-LM plugin does not pass on",
    "finetuning.bitsandbytes_version": "the bitsandbytes version is the environment's (pip install "
                                       "'bitsandbytes>=0.43.2' for the 4-bit layers that keep no input), not a config's",
}
for _kind in WHY.values():
    for _field, _why in SCRIPT_WHY.items():
        _kind.setdefault(_field, _why)


def why(kind: str, field: str) -> str:
    """Why a `kind` file does not carry `field` (a model or finetuning field by its section's reason)."""
    if field in WHY[kind]:
        return WHY[kind][field]
    key = "model" if field.startswith("model") else "finetuning" if field.startswith("finetuning") else field
    return WHY[kind].get(key, GENERIC_WHY)
