"""What a training run is: its inputs, their limits, and the cross-field rules the schema cannot see."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Final, Literal

from app.core import activations as act
from app.core.activation_offload import ACTIVATION_OFFLOADS
from app.core.allocator import ALLOCATORS
from app.core.architecture import MAX_LAYERS
from app.core.errors import DomainError
from app.core.finetuning import Finetuning
from app.core.inputs import declarations, declared
from app.core.optimizers import OPTIMIZER_IMPLEMENTATIONS, OPTIMIZERS
from app.core.precision import DEFAULT_PRECISION_PRESET, Precision, precision_preset

GIB: Final = 1 << 30

# CUDA context plus the caching allocator's reserve beyond live tensors. An empty PyTorch process
# holds about 0.5 GiB on recent data-centre GPUs (CUDA context and kernels, as nvidia-smi shows for
# a process that has only called torch.cuda.init()); fragmentation in the caching allocator adds a
# few hundred MiB more in a training loop. 1 GiB is a round default; set it to your measurement. On an H200
# (torch 2.11), six out-of-memory errors left the process 0.78 to 1.16 GiB above what tensors held
# (docs/VALIDATION.md, "On a GPU").
# An extra a user reserves per GPU beyond what is modelled (the CUDA context, workspaces and the allocator's cache are
# modelled: app.core.gpus, app.core.reserve); none by default.
DEFAULT_FRAMEWORK_OVERHEAD_BYTES: Final = 0
# DeepSpeed 0.19.8's DeepSpeedZeroConfig.reduce_bucket_size default (deepspeed/runtime/zero/config.py:113), and the
# most this calculator takes (elements).
DEEPSPEED_REDUCE_BUCKET_SIZE: Final = 500_000_000
MAX_REDUCE_BUCKET_SIZE: Final = 10**12

MAX_MICRO_BATCH: Final = 1 << 16
MAX_SEQ_LEN: Final = 1 << 24
MAX_DEGREE: Final = 1 << 20
MAX_ACCUMULATION_STEPS: Final = 1 << 20
MAX_OVERHEAD_BYTES: Final = 1 << 40
MAX_PARAM_COUNT: Final = 10**15
# Beyond these a batch shape is accepted but called out: published long-context training stops at
# about 1M tokens per sequence, and micro-batches beyond a few thousand sequences per GPU do not fit
# any model worth estimating.
UNUSUAL_SEQ_LEN: Final = 1 << 20
UNUSUAL_MICRO_BATCH: Final = 4096

LoopId = Literal["plain", "hf-trainer"]
MAX_GPUS_PER_NODE: Final = 64
MAX_LOSS_CHUNKS: Final = 1 << 16


# How the loss is computed, which decides how much of the tokens × vocabulary logits ever exists.
LOSSES: Final = act.choices(
    act.Choice("standard", "Standard cross entropy", "The model returns the logits; the loss upcasts them to fp32 and "
           "its backward makes two fp32 gradients of the same shape (transformers' ForCausalLMLoss)."),
    act.Choice("chunked", "Chunked cross entropy", "The output layer and the loss run chunk by chunk of tokens "
           "(torchtune's CEWithChunkedOutputLoss, num_output_chunks): the fp32 upcast and the loss's gradients "
           "exist for one chunk at a time; the logits and the fp32 log-probabilities saved for backward are as "
           "large as ever."),
    act.Choice("fused-linear", "Fused linear cross entropy (Liger)", "Liger Kernel's fused linear cross entropy "
           "computes the logits chunk by chunk and their gradients in the same pass: no full logits, no fp32 "
           "log-probabilities; it keeps the gradient of its input and of the output layer's weight from forward to "
           "backward (liger_kernel/ops/fused_linear_cross_entropy.py)."),
)


@dataclass(frozen=True)
class Framework:
    """Whose memory convention the model states follow: which buffers beyond the ZeRO paper's are counted."""

    id: str
    label: str
    about: str
    loop: str | None = None  # the training loop the framework runs (a key of LOOPS), in place of training.loop
    fsdp2_when_sharded: bool = False  # FSDP2's convention at ZeRO stage 3, the pytorch one below it


FRAMEWORKS: Final[dict[str, Framework]] = {
    item.id: item
    for item in (
        Framework("pytorch", "PyTorch (the ZeRO paper's accounting)",
                  "Weights, gradients, master copy and optimizer state as Rajbhandari et al. 2019 count them "
                  "(2 + 14/N bytes per parameter for ZeRO-2 with Adam), plus the buffers PyTorch's autograd and "
                  "ZeRO's collectives hold while they run."),
        Framework("deepspeed", "DeepSpeed (its own estimator's convention)",
                  "As DeepSpeed 0.19's estimate_zero2/zero3_model_states_mem_needs count model states: an fp32 copy "
                  "of each rank's gradient partition for the optimizer step (2 + 18/N bytes per parameter for "
                  "ZeRO-2), and under ZeRO-3 the largest layer's 16-bit parameters and gradients gathered whole "
                  "(4 bytes per parameter of it); ZeRO stage 0 is counted as plain data parallelism."),
        Framework("fsdp2", "PyTorch FSDP2 (fully_shard per decoder layer)",
                  "As torch.distributed.fsdp.fully_shard keeps a model wrapped layer by layer and at the root, with "
                  "MixedPrecisionPolicy(param_dtype = the weights' dtype, reduce_dtype = the gradients' dtype): "
                  "the sharded parameter is the master copy (its own dtype, fp32 with a mixed-precision preset) and "
                  "so is its sharded gradient; each layer is gathered in the weights' dtype while it computes (and "
                  "the next one prefetched), the root's embedding and output layer stay gathered from forward to "
                  "the end of backward, and one layer's gradients in the reduce dtype are held until the next "
                  "reduce-scatter. Requires ZeRO stage 3 (reshard_after_forward=True)."),
        Framework("megatron", "Megatron-LM (its distributed optimizer's convention)",
                  "As Megatron-LM's distributed optimizer counts bytes per parameter (docs/source/api-guide/"
                  "dist_optimizer.md): the optimizer steps from fp32 main gradients, so when the gradient buffer is "
                  "narrower than fp32 an fp32 copy of it is kept beside the master copy, sharded with the optimizer "
                  "state (4 + 16/d bytes per parameter for fp16 parameters and gradients; 6 + 12/d for bf16 "
                  "parameters with fp32 gradients). Requires the megatron implementation and ZeRO stage 0 or 1 "
                  "(1 is the distributed optimizer)."),
        Framework("hf-trainer", "Hugging Face Trainer (its loop, PyTorch's accounting)",
                  "The pytorch convention with the Trainer's own loop: compute_loss returns the loss alone, so the "
                  "logits are freed before backward (transformers/trainer.py, compute_loss), whatever "
                  "training.loop says. A Trainer run under DeepSpeed or FSDP2 follows that framework's convention: "
                  "choose it, with training.loop hf-trainer.", loop="hf-trainer"),
        Framework("torchtitan", "torchtitan (FSDP2 and its loop)",
                  "torchtitan's training step deletes the model's output before backward (torchtitan/train.py, "
                  "'del pred'), whatever training.loop says, and shards with FSDP2: at ZeRO stage 3 the fsdp2 "
                  "convention applies (fully_shard per layer, reshard_after_forward), below it the pytorch one.",
                  loop="hf-trainer", fsdp2_when_sharded=True),
    )
}


def data_step(parallelism: Parallelism) -> int:
    """The data-parallel degrees this layout allows are the multiples of this: the expert grid (expert-tensor × expert
    GPUs) is carved from tensor × data × context, which it must divide (validate_setup)."""
    grid = parallelism.expert * parallelism.expert_tensor_degree
    return grid // math.gcd(grid, parallelism.tensor * parallelism.context)


def effective_loop(training: Training) -> str:
    """The training loop that runs: the framework's own where it has one, else `training.loop`."""
    return FRAMEWORKS[training.framework].loop or training.loop


def fsdp2_convention(training: Training, parallelism: Parallelism) -> bool:
    """Whether FSDP2's convention counts the model states and their buffers."""
    framework = FRAMEWORKS[training.framework]
    return training.framework == "fsdp2" or (framework.fsdp2_when_sharded and parallelism.zero_stage == 3)


@dataclass(frozen=True)
class TransformerEngineFp8:
    """How NVIDIA Transformer Engine (2.20, transformer_engine/pytorch/) stores one FP8 recipe's tensors, as
    Megatron-LM runs it (--transformer-impl transformer_engine, megatron/core/fp8_utils.py, get_fp8_recipe)."""

    recipe_class: str  # TE's recipe class (transformer_engine/common/recipe/__init__.py)
    weight_copies: int  # FP8 copies of each linear weight TE caches: row-wise and column-wise (transposed)
    block: int  # elements per scale factor (MXFP8: 32); 0: one fp32 scale_inv per tensor
    amax_history_len: int  # delayed scaling's amax history rows per FP8 tensor (0: the recipe keeps no state)
    # Megatron-LM sets save_original_input on the attention's linear_proj for every recipe but delayed
    # (megatron/core/transformer/attention.py, SelfAttention.__init__): it then saves the 16-bit attention output
    # the fused attention keeps anyway, instead of an FP8 copy of it.
    proj_saves_original: bool


@dataclass(frozen=True)
class Fp8Recipe:
    """FP8 training: which linear layers compute in float8 and what that changes in memory."""

    id: str
    label: str
    about: str
    casts: bool  # the layers' linear layers cast their inputs and weights to float8 for each matmul (torchao)
    fp8_all_gather: bool  # FSDP2 gathers those weights in float8 (torchao's enable_fsdp_float8_all_gather)
    transformer_engine: TransformerEngineFp8 | None = None  # Transformer Engine's modules under Megatron-LM


FP8_RECIPES: Final[dict[str, Fp8Recipe]] = {
    item.id: item
    for item in (
        Fp8Recipe("none", "None (16-bit matmuls)", "Every matmul in the activations' dtype.", False, False),
        Fp8Recipe("torchao", "torchao float8, tensorwise",
                  "torchao's Float8Linear (the torchtitan recipe: every decoder layer's linear layers, not the output "
                  "layer) casts each matmul's input and weight to float8 with one scale each, in forward and again "
                  "in backward. It saves the 16-bit input and weight for backward (torchao/float8/float8_linear.py, "
                  "matmul_with_hp_or_float8_args: ctx.save_for_backward(input_hp, weight_hp_t)), so the activations "
                  "are those of 16-bit training; the float8 copies are short-lived.", True, False),
        Fp8Recipe("torchao-fsdp-fp8", "torchao float8 with float8 all-gather (FSDP2)",
                  "As torchao float8, and FSDP2 gathers those linear weights in float8 "
                  "(enable_fsdp_float8_all_gather, torchao/float8/fsdp_utils.py, fsdp_pre_all_gather): the layers "
                  "gathered while they compute take one byte per weight. Needs the fsdp2 convention (or torchtitan "
                  "at ZeRO stage 3).", True, True),
        Fp8Recipe("te-delayed", "Transformer Engine FP8, delayed scaling (Megatron-LM)",
                  "Megatron-LM with --transformer-impl transformer_engine --fp8-format e4m3|hybrid --fp8-recipe "
                  "delayed (DelayedScaling; the format changes no byte). Each decoder layer's four linear layers "
                  "(the fused QKV and gate/up projections with their norms, TE LayerNormLinear; the attention "
                  "output and down projections, TE Linear) save the FP8 column-wise copy of their input for the "
                  "weight gradient in place of the 16-bit one (transformer_engine/pytorch/module/linear.py, "
                  "_linear_forward_impl: inputmat.update_usage(rowwise_usage=False, columnwise_usage=True); "
                  "layernorm_linear.py, _LayerNormLinear.forward: ln_out), one byte an element; the norms' inputs "
                  "and the activation function's input stay 16-bit. The attention output projection saves its FP8 "
                  "copy beside the 16-bit output the fused attention keeps. The FP8 weights, row-wise and "
                  "transposed (as on Hopper: float8_tensor.py, inner_tensor_specs keeps one copy on Blackwell), are "
                  "cached across micro-batches and steps (module/base.py, quantize_weight; _fp8_workspaces) beside "
                  "the 16-bit weights, which stay the primary copy. Scaling state: a scale and an amax history of "
                  "Megatron-LM's default --fp8-amax-history-len 1 (TransformerConfig.fp8_amax_history_len; TE's "
                  "own DelayedScaling default is 1024) per FP8 tensor, fp32 (quantization.py, "
                  "DelayedScalingRecipeState). The output layer stays 16-bit.", False, False,
                  TransformerEngineFp8("DelayedScaling", weight_copies=2, block=0, amax_history_len=1,
                                       proj_saves_original=False)),
        Fp8Recipe("te-tensorwise", "Transformer Engine FP8, current (tensorwise) scaling (Megatron-LM)",
                  "As Transformer Engine's delayed scaling, with --fp8-recipe tensorwise (Float8CurrentScaling): "
                  "the scale is computed from each tensor as it is cast, so no amax history is kept "
                  "(quantization.py, Float8CurrentScalingRecipeState: 'does not require state'), and Megatron-LM "
                  "has the attention output projection save the 16-bit attention output itself instead of an FP8 "
                  "copy (megatron/core/transformer/attention.py: set_save_original_input(self.linear_proj)). FP8 "
                  "weights cached row-wise and transposed, as on Hopper.", False, False,
                  TransformerEngineFp8("Float8CurrentScaling", weight_copies=2, block=0, amax_history_len=0,
                                       proj_saves_original=True)),
        Fp8Recipe("te-mxfp8", "Transformer Engine MXFP8 (Megatron-LM, Blackwell)",
                  "As Transformer Engine's current scaling, with --fp8-recipe mxfp8 (MXFP8BlockScaling, Blackwell "
                  "GPUs): every FP8 tensor carries one 8-bit E8M0 scale per 32 elements along the axis it is "
                  "scaled on, padded to [128, 4] row-wise and [4, 128] column-wise blocks "
                  "(transformer_engine/pytorch/tensor/mxfp8_tensor.py, MXFP8Quantizer.get_scale_shape); the "
                  "column-wise copy is a second quantization of the same shape, not a transpose, so the cached "
                  "weights take two bytes an element plus both scales. No amax history.", False, False,
                  TransformerEngineFp8("MXFP8BlockScaling", weight_copies=2, block=32, amax_history_len=0,
                                       proj_saves_original=True)),
    )
}


@dataclass(frozen=True)
class Offload:
    """What moves to host memory (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840; ZeRO-Infinity, Rajbhandari et
    al. 2021, arXiv:2104.07857; FSDP's CPUOffload(offload_params=True))."""

    id: str
    label: str
    about: str
    optimizer: bool  # optimizer state, the fp32 master copy, an fp32 gradient partition and the update itself
    parameters: bool  # the 16-bit parameter partitions too (ZeRO-3 only)


OFFLOADS: Final[dict[str, Offload]] = {
    item.id: item
    for item in (
        Offload("none", "No offload", "Everything on the GPU.", False, False),
        Offload("optimizer", "Optimizer to CPU (ZeRO-Offload)",
                "Optimizer state, the fp32 master copy and an fp32 copy of the gradient partition live in host "
                "memory; the update runs on the CPU (DeepSpeed offload_optimizer: cpu).", True, False),
        Offload("optimizer+parameters", "Optimizer and parameters to CPU (ZeRO-Infinity, FSDP offload)",
                "As optimizer offload, and the 16-bit parameter partitions too: each layer's weights are gathered "
                "to the GPU only while it computes (DeepSpeed offload_param: cpu with ZeRO-3; FSDP "
                "CPUOffload(offload_params=True)).", True, True),
    )
}


@dataclass(frozen=True)
class Loop:
    """How the training loop holds the model's output, which decides how long the logits live."""

    id: str
    label: str
    about: str
    keeps_output: bool


LOOPS: Final[dict[str, Loop]] = {
    loop.id: loop
    for loop in (
        Loop("plain", "Plain loop (keeps the output)",
             "outputs = model(...); outputs.loss.backward(): the output, and so the logits, stays alive until "
             "the next forward replaces it.", keeps_output=True),
        Loop("hf-trainer", "Hugging Face Trainer (keeps only the loss)",
             "Trainer.compute_loss returns the loss alone, so the logits are freed before backward.",
             keeps_output=False),
    )
}


_FRAMEWORKS_HELP: Final = ("Whose memory convention the model states and their buffers follow: "
                           + "; ".join(f"{item.id}: {item.about}" for item in FRAMEWORKS.values())
                           + ". The fsdp2 convention (or torchtitan at ZeRO stage 3) is what float8 all-gather "
                           "(torchao-fsdp-fp8) needs.")
_FP8_HELP: Final = ("FP8 training: " + "; ".join(f"{item.id}: {item.about}" for item in FP8_RECIPES.values())
                    + ". Not with fine-tuning or a mixture of experts; Transformer Engine's recipes need the token "
                    "count on a GPU divisible by 8 and the linear layers' widths by 16 (8 for outputs), and standard "
                    "attention.")


@dataclass(frozen=True)
class Training:
    micro_batch_size: int = declared(1, "int", "Micro-batch size", "Sequences per micro-batch per GPU (b).",
                                     low=1, high=MAX_MICRO_BATCH)
    seq_len: int = declared(2048, "int", "Sequence length", "Tokens per sequence (s).", low=1, high=MAX_SEQ_LEN)
    precision: Precision = field(default_factory=lambda: precision_preset(DEFAULT_PRECISION_PRESET))
    optimizer: str = declared("adamw", "choice", "Optimizer", "Optimizer whose state is counted.", choices=OPTIMIZERS)
    optimizer_implementation: str = declared(
        "foreach", "choice", "Optimizer implementation",
        "How optimizer.step() runs, which decides its scratch: foreach (torch's default on CUDA: a state-dtype copy of "
        "every parameter for Adam), fused (none), for-loop (two copies of the largest tensor).",
        choices=OPTIMIZER_IMPLEMENTATIONS)
    adafactor_momentum: bool = declared(False, "bool", "Adafactor keeps momentum",
                                        "Adafactor keeps a first moment (beta1) as well.")
    activation_checkpointing: act.Checkpointing = declared(
        "none", "choice", "Activation checkpointing",
        "none; selective: recompute the attention core; full: keep only each layer's input (of every layer, or of "
        "those recompute_every or recompute_first_layers choose).", choices=act.CHECKPOINTING_CHOICES)
    # Which layers full recomputation applies to (`app.core.recompute`): every k-th layer of a stage, or its first N
    recompute_every: int = declared(
        1, "int", "Recompute every k-th layer",
        "With full recomputation, recompute every k-th layer of each stage (counted from 1: layer i when i % k == 0) "
        "and keep everything of the others, as torchtitan's selective_ac_option \"k\" does (its default is 2). 1: "
        "every layer.", low=1, high=MAX_LAYERS)
    recompute_first_layers: int | None = declared(
        None, "int", "Recompute only the first N layers",
        "With full recomputation, recompute only the first N layers of each pipeline stage and keep everything of the "
        "rest, as Megatron-LM's --recompute-method block --recompute-num-layers N does. null: every layer. Not with "
        "recompute_every.", low=1, high=MAX_LAYERS, nullable=True)
    # torch.utils.checkpoint's variant: transformers 5 passes use_reentrant=False unless told otherwise
    # (modeling_utils.py, _activation_checkpointing_enable); many fine-tuning scripts still pass True.
    use_reentrant: bool = declared(
        False, "bool", "Reentrant checkpoint",
        "With full recomputation of every layer, torch.utils.checkpoint's reentrant variant (use_reentrant=True, "
        "which gradient_checkpointing_kwargs may ask for): in backward it runs the whole layer again, its output "
        "too, and holds that output through the layer's backward; the non-reentrant one (false: transformers' "
        "default) stops once the tensors backward needs are rebuilt.")
    compile: act.Compile = declared(
        "none", "choice", "torch.compile",
        "torch.compile of each decoder layer: " + "; ".join(f"{item.id}: {item.about}" for item in act.COMPILE_CHOICES.values())
        + ". Measured for Llama, Mistral, Qwen2 and Gemma trained in full in one precision under sdpa or flash "
        "attention, without recomputation or with full recomputation of every layer, and refused elsewhere.",
        choices=act.COMPILE_CHOICES)  # app/core/saved/compiled.py
    # Saved activations moved to host memory (`app.core.activation_offload`)
    activation_offload: str = declared(
        "none", "choice", "Activation offloading",
        "none; torchtune: torchtune's enable_activation_offloading, which copies each layer's input saved for its "
        "recomputation to pinned host memory (the answer's host section) and keeps on the GPU only the copies in "
        "flight; checkpoints-to-host: transformers' activation_checkpointing_enable(offload=True), the same inputs "
        "copied on the compute stream, none waiting on the GPU. Both need activation_checkpointing full on every "
        "layer, the transformers implementation and one pipeline stage. megatron: Megatron-LM's "
        "--cpu-offloading-num-layers, the saved tensors of the first activation_offload_layers layers moved to host "
        "memory, at most layers − that many on the GPU at once; it needs the megatron implementation, no "
        "recomputation and one pipeline stage.", choices=ACTIVATION_OFFLOADS)
    activation_offload_layers: int = declared(
        0, "int", "Layers offloaded",
        "With activation_offload megatron: how many layers, from the first, have their saved tensors moved to host "
        "memory (--cpu-offloading-num-layers); at least 1 and fewer than num_hidden_layers. 0 otherwise.",
        low=0, high=MAX_LAYERS)
    attention: act.Attention = declared(
        "sdpa", "choice", "Attention kernel",
        "eager stores the s × s score matrix; flash is a fused kernel that does not; sdpa is the kernel PyTorch's "
        "scaled_dot_product_attention picks on CUDA (flash for fp16/bf16 and head size ≤ 256, else memory-efficient "
        "unless K/V heads are grouped, else math). The answer's attention_kernel says which.",
        choices=act.ATTENTION_CHOICES)
    implementation: act.Implementation = declared(
        "transformers", "choice", "Implementation",
        "Whose code runs the model: Hugging Face transformers modules, Megatron-LM's fused kernels, or LitGPT's model. "
        "liger is modelled for the Llama family's gated MLPs, megatron for dense models, litgpt for Llama-style "
        "decoders under LoRA or QLoRA.", choices=act.IMPLEMENTATION_CHOICES)
    loop: LoopId = declared(
        "plain", "choice", "Training loop",
        "plain: the loop keeps the model's output (and so the logits) until the next forward replaces it; hf-trainer: "
        "only the loss is kept, the logits are freed before backward.", choices=LOOPS)
    gradient_accumulation_steps: int = declared(
        1, "int", "Gradient accumulation",
        "Micro-batches per optimizer step. From the second on, the gradients are alive through forward and backward; "
        "with pipeline parallelism it is also the number of micro-batches in flight (1F1B).",
        low=1, high=MAX_ACCUMULATION_STEPS)
    framework_overhead_bytes: int = declared(
        DEFAULT_FRAMEWORK_OVERHEAD_BYTES, "int", "Extra per GPU, outside what is modelled",
        "An extra per GPU outside what is modelled (e.g. communication buffers), in bytes (default 0; the CUDA "
        "context, the workspaces and the allocator's cache are counted).", low=0, high=MAX_OVERHEAD_BYTES)
    # PyTorch's caching allocator as shipped, or expandable segments
    allocator: str = declared(
        "default", "choice", "PyTorch's CUDA allocator",
        "PyTorch's CUDA caching allocator: default (as shipped) or expandable-segments "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one segment per pool grown by pages, so freed blocks and "
        "new requests fragment less).", choices=ALLOCATORS)
    loss: str = declared(
        "standard", "choice", "Loss",
        "standard: the model returns the logits and the loss upcasts them to fp32; chunked: the output layer and loss "
        "run loss_chunks chunks of tokens at a time (torchtune); fused-linear: Liger Kernel's fused linear cross "
        "entropy, which never materialises the logits.", choices=LOSSES)
    loss_chunks: int = declared(8, "int", "Loss chunks",
                                "Chunks of tokens for the chunked loss (torchtune's num_output_chunks).",
                                low=1, high=MAX_LOSS_CHUNKS)
    framework: str = declared("pytorch", "choice", "Memory convention", _FRAMEWORKS_HELP, choices=FRAMEWORKS)
    fp8: str = declared("none", "choice", "FP8 training", _FP8_HELP, choices=FP8_RECIPES)
    finetuning: Finetuning = Finetuning()

    @property
    def quantizes_output_layer(self) -> bool:
        """QLoRA under LitGPT: Lightning's bitsandbytes plugin replaces every nn.Linear, the output layer's too, unless
        told to ignore it (lightning/fabric/plugins/precision/bitsandbytes.py, `_convert_layers`; LitGPT's
        finetune/lora.py passes no ignore_modules). The layer is LitGPT's own, never tied: `litgpt_modelled` refuses
        a tied one."""
        return self.finetuning.method == "qlora" and self.implementation == "litgpt"


@dataclass(frozen=True)
class Parallelism:
    data: int = declared(1, "int", "Data parallel", "Data-parallel degree.", low=1, high=MAX_DEGREE)
    tensor: int = declared(1, "int", "Tensor parallel", "Tensor-parallel degree; it must divide num_attention_heads "
                           "and num_key_value_heads.", low=1, high=MAX_DEGREE)
    pipeline: int = declared(1, "int", "Pipeline stages", "Pipeline-parallel degree (stages); it must divide "
                             "num_hidden_layers unless first_stage_layers or last_stage_layers are given.",
                             low=1, high=MAX_DEGREE)
    sequence_parallel: bool = declared(False, "bool", "Sequence parallelism",
                                       "Megatron sequence parallelism over the tensor-parallel group.")
    zero_stage: int = declared(0, "int", "ZeRO stage", "ZeRO stage: 1 shards optimizer state and master weights, 2 "
                               "adds gradients, 3 weights. At most 1 with the megatron convention or a Transformer "
                               "Engine fp8 recipe.", low=0, high=3)
    offload: str = declared(
        "none", "choice", "Offload to host memory",
        "none; optimizer: optimizer state, master copy and an fp32 gradient partition in host memory, the update on "
        "the CPU (ZeRO-Offload; needs ZeRO 1-3); optimizer+parameters: the parameter partitions too (ZeRO-Infinity, "
        "FSDP CPU offload; needs ZeRO-3).", choices=OFFLOADS)
    gpus_per_node: int = declared(8, "int", "GPUs per node", "GPUs sharing one host, for host memory per node.",
                                  low=1, high=MAX_GPUS_PER_NODE)
    # Megatron's virtual stages
    virtual_stages: int = declared(
        1, "int", "Virtual stages per GPU",
        "Interleaved pipeline schedule (Megatron's virtual stages): model chunks per device; the first device then "
        "holds (p - 1) chunks of activations more. Needs pipeline ≥ 2, pipeline × virtual_stages dividing "
        "num_hidden_layers, and gradient_accumulation_steps a multiple of pipeline.", low=1, high=MAX_DEGREE)
    # Uneven pipeline stages: the decoder layers on the first and on the last stage (Megatron-LM's
    # --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers), the rest split evenly over the
    # stages between; None splits every stage evenly. Fewer layers where the embedding or the output layer and loss
    # sit balance the stages' memory and time.
    first_stage_layers: int | None = declared(
        None, "int", "Layers on the first stage",
        "Uneven pipeline stages: decoder layers on the first stage (Megatron-LM's --decoder-first-pipeline-num-layers); "
        "the layers left split evenly over the other stages, at least one each (with two stages, first and last add "
        "up to num_hidden_layers). Absent or null: an even split.", low=1, high=MAX_LAYERS, nullable=True)
    last_stage_layers: int | None = declared(
        None, "int", "Layers on the last stage",
        "Uneven pipeline stages: decoder layers on the last stage (--decoder-last-pipeline-num-layers). Absent or "
        "null: an even split.", low=1, high=MAX_LAYERS, nullable=True)
    context: int = declared(
        1, "int", "Context parallel",
        "Context parallelism: each sequence split over this many GPUs (ring attention); activations shrink with it, "
        "ZeRO shards over data × context. 2 × context must divide training.seq_len; gpt-oss (attention with sinks) "
        "needs training.attention flash.", low=1, high=MAX_DEGREE)
    # Expert parallelism: a mixture's routed experts split over this many GPUs of the data-parallel group (as
    # Megatron-LM and DeepSpeed-MoE carve their expert-parallel groups); each expert is then replicated over
    # data × context ÷ expert GPUs, over which ZeRO shards its states.
    expert: int = declared(
        1, "int", "Expert parallel",
        "Expert parallelism: a mixture of experts' routed experts split over this many GPUs (it divides the experts; "
        "with expert_tensor unset it divides data × context, in general expert_tensor × expert divides tensor × data "
        "× context); each expert's ZeRO shards spread over the rest of the stage's GPUs.", low=1, high=MAX_DEGREE)
    # Expert tensor parallelism: each routed expert's matrices split over this many GPUs instead of the tensor-parallel
    # degree (Megatron-LM's --expert-tensor-parallel-size, whose default is the tensor-parallel degree; None here
    # means the same). The expert grid, expert_tensor × expert GPUs, is carved from tensor × data × context ("MoE
    # parallel folding", Liu et al. 2025, arXiv:2504.14960, section 3).
    expert_tensor: int | None = declared(
        None, "int", "Expert tensor parallel",
        "Expert tensor parallelism (Megatron-LM's --expert-tensor-parallel-size): each routed expert's matrices split "
        "over this many GPUs instead of the tensor-parallel degree; absent or null: the tensor-parallel degree. "
        "expert_tensor × expert must divide tensor × data × context; with fewer expert-tensor than tensor-parallel "
        "GPUs the tensor-parallel ranks share the routed tokens out. A dense model takes only the tensor-parallel "
        "degree.", low=1, high=MAX_DEGREE, nullable=True)
    # The token copies the most-loaded expert-parallel GPU's experts take, as a multiple of balanced routing's: a
    # capacity factor bounds it (Megatron-LM's --moe-expert-capacity-factor, DeepSpeed-MoE's capacity_factor; exactly
    # that with padding to capacity), a dropless run's routing imbalance raises it. The most-loaded GPU decides
    # the peak (Fedus et al. 2021, Switch Transformers, arXiv:2101.03961, section 2.2, on the capacity factor).
    expert_load: float = declared(
        1.0, "float", "Most-loaded expert GPU's load",
        "Token copies the most-loaded expert-parallel GPU's experts take, as a multiple of balanced routing (1): a "
        "capacity factor bounds it (Megatron-LM's --moe-expert-capacity-factor, DeepSpeed-MoE's capacity_factor; "
        "exactly that with padding), a dropless run's imbalance raises it. At most expert × min(k, experts ÷ expert) "
        "÷ k; 1 without expert parallelism and for a dense model.", low=1, high=MAX_DEGREE)
    # DeepSpeed's zero_optimization.reduce_bucket_size, in elements (its default): the contiguous gradient bucket
    # it reduces from, counted under training.framework deepspeed.
    reduce_bucket_size: int = declared(
        DEEPSPEED_REDUCE_BUCKET_SIZE, "int", "Reduce bucket (elements)",
        "DeepSpeed's zero_optimization.reduce_bucket_size, in elements (its default 500,000,000): the contiguous "
        "gradient bucket it reduces from, counted in the gradients' dtype under training.framework deepspeed.",
        low=1, high=MAX_REDUCE_BUCKET_SIZE)

    @property
    def world_size(self) -> int:
        return self.data * self.tensor * self.pipeline * self.context

    @property
    def shard_group(self) -> int:
        """The GPUs that hold one replica of the model states, over which ZeRO shards them: data × context
        parallel (Megatron-LM's distributed optimizer shards over both)."""
        return self.data * self.context

    @property
    def uneven_stages(self) -> bool:
        return self.first_stage_layers is not None or self.last_stage_layers is not None

    def stage_layers(self, layers: int) -> tuple[int, int, int]:
        """Decoder layers on the first stage, on each stage between and on the last, of `layers` in all (for a
        layout validate_setup accepted; one stage holds them all)."""
        p = self.pipeline
        if p == 1:
            return layers, 0, layers
        first, last = self.first_stage_layers, self.last_stage_layers
        unset = (first is None) + (last is None) + p - 2  # stages that share what the set ones leave
        share = (layers - (first or 0) - (last or 0)) // unset if unset else 0
        return (share if first is None else first), share, (share if last is None else last)

    @property
    def expert_tensor_degree(self) -> int:
        """The GPUs each routed expert's matrices split over: `expert_tensor`, else the tensor-parallel degree."""
        return self.tensor if self.expert_tensor is None else self.expert_tensor

    @property
    def experts_apart(self) -> bool:
        """Whether a GPU holds the routed experts otherwise than the rest of a layer (expert parallelism, or an
        expert-tensor degree other than the tensor-parallel one)."""
        return self.expert > 1 or self.expert_tensor_degree != self.tensor


TRAINING_INPUTS: Final = declarations(Training)
PARALLELISM_INPUTS: Final = declarations(Parallelism)


def check_int(field_name: str, value: int, *, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(field_name, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise DomainError(field_name, f"must be between {low:,} and {high:,}, got {value:,}")


def check_choice(field_name: str, value: str, choices: Collection[str]) -> None:
    if value not in choices:
        raise DomainError(field_name, f"must be one of {', '.join(choices)}, got {value!r}")


def activation_setup(training: Training, parallelism: Parallelism, *, device: act.Device = "cuda") -> act.ActivationSetup:
    return act.ActivationSetup(
        micro_batch_size=training.micro_batch_size,
        seq_len=training.seq_len // parallelism.context,  # this rank's share of each sequence
        precision=training.precision,
        attention=training.attention,
        implementation=training.implementation,
        tensor_parallel=parallelism.tensor,
        expert_tensor_parallel=parallelism.expert_tensor_degree,
        expert_load=parallelism.expert_load,
        sequence_parallel=parallelism.sequence_parallel,
        device=device,
        finetuning=training.finetuning,
        loss=training.loss,
        compile=training.compile,
    )
