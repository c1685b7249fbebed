"""What a training run is: its inputs, their limits, and the cross-field rules the schema cannot see."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Final, Literal

from app.core import activations as act
from app.core.allocator import ALLOCATORS
from app.core.architecture import Architecture
from app.core.errors import DomainError
from app.core.finetuning import Finetuning, experts_wrapped, validate_finetuning
from app.core.optimizers import OPTIMIZER_IMPLEMENTATIONS, check_optimizer
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


@dataclass(frozen=True)
class Training:
    micro_batch_size: int = 1
    seq_len: int = 2048
    precision: Precision = field(default_factory=lambda: precision_preset(DEFAULT_PRECISION_PRESET))
    optimizer: str = "adamw"
    optimizer_implementation: str = "foreach"
    adafactor_momentum: bool = False
    activation_checkpointing: act.Checkpointing = "none"
    attention: act.Attention = "sdpa"
    implementation: act.Implementation = "transformers"
    loop: LoopId = "plain"
    gradient_accumulation_steps: int = 1
    framework_overhead_bytes: int = DEFAULT_FRAMEWORK_OVERHEAD_BYTES
    allocator: str = "default"  # a key of ALLOCATORS: PyTorch's caching allocator as shipped, or expandable segments
    loss: str = "standard"  # a key of LOSSES
    loss_chunks: int = 8  # for the chunked loss
    framework: str = "pytorch"  # a key of FRAMEWORKS
    fp8: str = "none"  # a key of FP8_RECIPES
    finetuning: Finetuning = Finetuning()


@dataclass(frozen=True)
class Parallelism:
    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0
    offload: str = "none"  # a key of OFFLOADS
    gpus_per_node: int = 8  # for host memory per node
    virtual_stages: int = 1  # interleaved pipeline schedule: model chunks per device (Megatron's virtual stages)
    # Uneven pipeline stages: the decoder layers on the first and on the last stage (Megatron-LM's
    # --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers), the rest split evenly over the
    # stages between; None splits every stage evenly. Fewer layers where the embedding or the output layer and loss
    # sit balance the stages' memory and time.
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    context: int = 1  # context parallelism: each sequence split over this many GPUs (ring attention)
    # Expert parallelism: a mixture's routed experts split over this many GPUs of the data-parallel group (as
    # Megatron-LM and DeepSpeed-MoE carve their expert-parallel groups); each expert is then replicated over
    # data × context ÷ expert GPUs, over which ZeRO shards its states.
    expert: int = 1
    # Expert tensor parallelism: each routed expert's matrices split over this many GPUs instead of the tensor-parallel
    # degree (Megatron-LM's --expert-tensor-parallel-size, whose default is the tensor-parallel degree; None here
    # means the same). The expert grid, expert_tensor × expert GPUs, is carved from tensor × data × context ("MoE
    # parallel folding", Liu et al. 2025, arXiv:2504.14960, section 3).
    expert_tensor: int | None = None
    # The token copies the most-loaded expert-parallel GPU's experts take, as a multiple of balanced routing's: a
    # capacity factor bounds it (Megatron-LM's --moe-expert-capacity-factor, DeepSpeed-MoE's capacity_factor; exactly
    # that with padding to capacity), a dropless run's routing imbalance raises it. The most-loaded GPU decides
    # the peak (Fedus et al. 2021, Switch Transformers, arXiv:2101.03961, section 2.2, on the capacity factor).
    expert_load: float = 1.0
    # DeepSpeed's zero_optimization.reduce_bucket_size, in elements (its default): the contiguous gradient bucket
    # it reduces from, counted under training.framework deepspeed.
    reduce_bucket_size: int = DEEPSPEED_REDUCE_BUCKET_SIZE

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


def check_int(field_name: str, value: int, *, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(field_name, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise DomainError(field_name, f"must be between {low:,} and {high:,}, got {value:,}")


def check_choice(field_name: str, value: str, choices: Collection[str]) -> None:
    if value not in choices:
        raise DomainError(field_name, f"must be one of {', '.join(choices)}, got {value!r}")


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


def validate_setup(training: Training, parallelism: Parallelism, arch: Architecture | None) -> None:
    """Cross-field rules the schema cannot see, each naming the field to change."""
    check_int("training.micro_batch_size", training.micro_batch_size, low=1, high=MAX_MICRO_BATCH)
    check_int("training.seq_len", training.seq_len, low=1, high=MAX_SEQ_LEN)
    check_int("training.gradient_accumulation_steps", training.gradient_accumulation_steps, low=1,
              high=MAX_ACCUMULATION_STEPS)
    check_int("training.framework_overhead_bytes", training.framework_overhead_bytes, low=0, high=MAX_OVERHEAD_BYTES)
    check_optimizer(training.optimizer)
    check_choice("training.optimizer_implementation", training.optimizer_implementation, OPTIMIZER_IMPLEMENTATIONS)
    check_choice("training.activation_checkpointing", training.activation_checkpointing, act.CHECKPOINTING_CHOICES)
    check_choice("training.attention", training.attention, act.ATTENTION_CHOICES)
    check_choice("training.implementation", training.implementation, act.IMPLEMENTATION_CHOICES)
    check_choice("training.loop", training.loop, LOOPS)
    check_choice("training.allocator", training.allocator, ALLOCATORS)
    check_choice("training.loss", training.loss, LOSSES)
    check_int("training.loss_chunks", training.loss_chunks, low=1, high=MAX_LOSS_CHUNKS)
    check_choice("training.framework", training.framework, FRAMEWORKS)
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
    check_choice("training.fp8", training.fp8, FP8_RECIPES)
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
    if training.framework == "megatron":
        if training.implementation != "megatron":
            raise DomainError("training.framework", "the megatron convention is Megatron-LM's own: choose the megatron "
                                                    "implementation")
        if parallelism.zero_stage > 1:
            raise DomainError("parallelism.zero_stage", "Megatron-LM's distributed optimizer shards the optimizer state "
                                                        "and main gradients (ZeRO stage 1); choose stage 0 or 1")
    if training.loss != "standard" and training.implementation == "megatron":
        raise DomainError("training.loss", "Megatron-LM computes its own vocabulary-parallel cross entropy; "
                                           "choose the standard loss")
    for name in ("data", "tensor", "pipeline"):
        check_int(f"parallelism.{name}", getattr(parallelism, name), low=1, high=MAX_DEGREE)
    check_int("parallelism.zero_stage", parallelism.zero_stage, low=0, high=3)
    check_choice("parallelism.offload", parallelism.offload, OFFLOADS)
    check_int("parallelism.gpus_per_node", parallelism.gpus_per_node, low=1, high=MAX_GPUS_PER_NODE)
    check_int("parallelism.virtual_stages", parallelism.virtual_stages, low=1, high=MAX_DEGREE)
    check_int("parallelism.context", parallelism.context, low=1, high=MAX_DEGREE)
    check_int("parallelism.reduce_bucket_size", parallelism.reduce_bucket_size, low=1, high=MAX_REDUCE_BUCKET_SIZE)
    check_int("parallelism.expert", parallelism.expert, low=1, high=MAX_DEGREE)
    if parallelism.expert_tensor is not None:
        check_int("parallelism.expert_tensor", parallelism.expert_tensor, low=1, high=MAX_DEGREE)
    _check_expert_grid(parallelism)
    if parallelism.context > 1:
        if training.seq_len % (2 * parallelism.context):
            raise DomainError("parallelism.context", f"seq_len ({training.seq_len:,}) must be divisible by 2 × context "
                                                     f"({2 * parallelism.context}): each rank takes two chunks of every "
                                                     "sequence to balance causal attention (Megatron-LM)")
        if training.attention == "eager":
            raise DomainError("parallelism.context", "context parallelism runs a fused attention kernel per chunk "
                                                     "(ring attention); choose sdpa or flash")
    offload = OFFLOADS[parallelism.offload]
    if offload.optimizer and parallelism.zero_stage == 0:
        raise DomainError("parallelism.offload", "offloading runs under ZeRO: choose ZeRO stage 1, 2 or 3")
    if offload.parameters and parallelism.zero_stage < 3:
        raise DomainError("parallelism.offload", "parameters are offloaded only with ZeRO stage 3 (their "
                                                 "partitions are what moves)")
    precision = training.precision
    autocast = training.implementation != "megatron" and precision.bits("weights") > precision.bits("activations")
    validate_finetuning(training.finetuning, arch, autocast=autocast)
    if training.finetuning != Finetuning() and training.implementation == "megatron":
        raise DomainError("finetuning.method", "fine-tuning with adapters or frozen parts is modelled for the "
                                               "transformers implementation")
    if arch is None:
        return
    if training.implementation == "liger" and (arch.model_type == "gpt2" or not arch.is_gated or arch.is_moe):
        raise DomainError("training.implementation", "Liger Kernel's patches are modelled for the Llama family's "
                                                     "gated MLPs (llama, mistral, qwen2/3, gemma, phi3); not for GPT-2, "
                                                     "other ungated MLPs or mixtures of experts")
    if parallelism.context > 1 and arch.attention_sinks and training.attention != "flash":
        raise DomainError("parallelism.context", "context parallelism runs a fused attention kernel per chunk; "
                                                 "transformers runs gpt-oss's attention with sinks eagerly under sdpa "
                                                 "(GptOssPreTrainedModel._supports_sdpa is False): choose flash")
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
    if arch.is_moe and training.fp8 != "none":
        raise DomainError("training.fp8", "float8 training of mixture-of-experts layers (torchao's grouped-GEMM path, "
                                          "Transformer Engine's GroupedLinear) is not modelled")
    te = FP8_RECIPES[training.fp8].transformer_engine
    if te is not None:
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
            if arch.model_type not in ("mixtral", "qwen3_moe", "qwen2_moe", "gpt_oss", None) or arch.n_shared_experts:
                why = f"of model type {arch.model_type}" if arch.model_type else "with DeepSeek-style shared experts"
            elif training.finetuning != Finetuning():
                why = "with frozen parts"
            elif parallelism.expert > 1:
                why = "with expert parallelism"
            if why is not None:
                raise DomainError("training.precision", f"mixture-of-experts models {why} are modelled in their "
                                                        "training dtype (bf16, fp16 or fp32), not under autocast "
                                                        "(Mixtral, Qwen2-MoE, Qwen3-MoE and gpt-oss are)")
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
    v = parallelism.virtual_stages
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
    frozen = training.finetuning.frozen_layers
    first_stage = parallelism.stage_layers(arch.num_hidden_layers)[0]
    if p > 1 and frozen > first_stage:
        raise DomainError("finetuning.frozen_layers", f"with {p} pipeline stages, freeze at most the first stage's "
                                                      f"{first_stage} layers (got {frozen})")


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
    )
