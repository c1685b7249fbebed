"""Answers instead of trial and error: the most a GPU can run, and the single changes that make a job fit.

Every answer is about the peak of the step timeline. The peak never falls as the micro-batch or
the sequence grows (every buffer's bytes are non-decreasing in both) and never rises as the
data-parallel group grows (sharded states shrink, nothing else changes), so each question has
one boundary. Where the memory is a polynomial in the field (`series.polynomial`) the boundary
is solved on the fitted polynomials; either way it is then checked with real estimates on both
sides, searching outward from the guess where the check disagrees.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Final

from app.core import activations as act
from app.core.activation_offload import ACTIVATION_OFFLOADS, pinned_bytes
from app.core.errors import DomainError
from app.core.estimate import Estimate
from app.core.flops import step_flops
from app.core.job import JOB_FIELDS, Job, field_value, with_field
from app.core.optimizers import OPTIMIZER_INFO
from app.core.precision import PRECISION_PRESETS
from app.core.recompute import recomputed_share, stage_recomputed
from app.core.series import POLYNOMIAL, Fit, boundary, polynomial
from app.core.setup import GIB, OFFLOADS, activation_setup, data_step, effective_loop

TARGETS: Final = {
    "micro_batch_size": "training.micro_batch_size",
    "seq_len": "training.seq_len",
    "data": "parallelism.data",
}

# The largest degrees a fix proposes for tensor and pipeline parallelism: one node of 8 GPUs.
MAX_FIX_TENSOR: Final = 8
MAX_FIX_PIPELINE: Final = 64


@dataclass(frozen=True)
class Solution:
    target: str
    value: int | None
    estimate: Estimate  # at the value; at the job as given when there is none
    note: str | None  # why there is no value, or what to know about it
    fixes: tuple[Fix, ...]


@dataclass(frozen=True)
class Cost:
    """What a fix costs besides memory. Kinds, cheapest first: none, throughput, compute, communication, host (host
    memory and PCIe traffic each step), hardware, numerics."""

    kind: str
    text: str
    extra_compute: float | None = None  # fraction of the step's FLOPs
    extra_communication: float | None = None  # fraction of the data-parallel traffic
    extra_gpus: int | None = None


COST_ORDER: Final = ("none", "throughput", "compute", "communication", "host", "hardware", "numerics")


@dataclass(frozen=True)
class Fix:
    change: dict[str, object]  # API field path -> new value
    summary: str
    estimate: Estimate
    cost: Cost


def solve(job: Job, target: str, *, with_fixes: bool = True, given: Estimate | None = None) -> Solution:
    """The largest micro-batch or sequence, or the smallest data-parallel degree, whose peak fits the job's GPU.

    The fixes are the same whatever the target: `with_fixes=False` leaves them out (for a caller asking
    several targets, who needs them once). `given` is the job's own estimate, where the caller has it."""
    if target not in TARGETS:
        raise DomainError("target", f"must be one of {', '.join(TARGETS)}, got {target!r}")
    if job.gpu is None:
        raise DomainError("gpu", "the solver needs a GPU to fit into")
    if target != "data" and job.architecture is None:
        raise DomainError("model", f"solving for {target} needs an architecture (a preset, a config or its fields), "
                                   "not num_params: a bare count has no activations")
    given = given or job.estimate()
    path = TARGETS[target]
    probe = _Probe(job, path)
    if target == "data":
        value, note = _smallest_data(job, probe)
    else:
        value, note = _largest(job, path, probe)
    result = probe.estimate(value) if value is not None else given
    return Solution(target, value, result, note, fixes(job, given) if with_fixes else ())


class _Probe:
    """Estimates of the job with one field changed, each worked out once; one asked only whether it fits is worked out
    in full where it does (`Job.fitting_estimate`)."""

    def __init__(self, job: Job, path: str) -> None:
        self.job, self.path = job, path
        self.cache: dict[int, Estimate] = {}
        self.over: set[int] = set()  # the values found not to fit
        self.capacity = job.gpu.capacity_bytes if job.gpu else 0

    def estimate(self, value: int) -> Estimate:
        if value not in self.cache:
            self.cache[value] = with_field(self.job, self.path, value).estimate()
        return self.cache[value]

    def fits(self, value: int) -> bool:
        if value in self.cache:
            gpu = self.cache[value].gpu
            return gpu is not None and gpu.fits
        if value in self.over:
            return False
        found = with_field(self.job, self.path, value).fitting_estimate()
        if found is None:
            self.over.add(value)
            return False
        self.cache[value] = found
        return True


def _largest(job: Job, path: str, probe: _Probe) -> tuple[int | None, str | None]:
    item = JOB_FIELDS[path]
    name = path.split(".")[1]
    # Under context parallelism a sequence splits into 2 × context chunks: only multiples of that are valid.
    step = 2 * job.parallelism.context if name == "seq_len" and job.parallelism.context > 1 else 1
    low, high = max(item.low, step), item.high // step * step

    def fits(value: int) -> bool:
        return probe.fits(value * step)

    if not probe.fits(low):
        result = probe.estimate(low)
        peak, fitted = result.peak, result.gpu
        assert fitted is not None  # the probe has a GPU
        return None, (f"even {name} = {low} does not fit: its peak, {peak.bytes:,} B at '{peak.event}' (step "
                      f"{peak.step}), {fitted.reserved_bytes:,} B reserved by the allocator and "
                      f"{fitted.outside_bytes:,} B outside it exceed the {fitted.gpu.name}'s "
                      f"{fitted.gpu.capacity_bytes:,} B")
    guess = _polynomial_guess(job, path, probe.capacity, high) if step == 1 else None
    value = step * boundary(fits, low // step, high // step, guess)
    note = None
    arch = job.architecture
    if name == "seq_len" and arch is not None and value > arch.max_position_embeddings:
        note = (f"longer than the model's max_position_embeddings ({arch.max_position_embeddings:,}): memory allows "
                f"{value:,} tokens, the model was trained for {arch.max_position_embeddings:,}")
    if value == high:
        note = f"{name} reaches its largest allowed value ({high:,}) and still fits"
    return value, note


def _polynomial_guess(job: Job, path: str, capacity: int, high: int) -> int | None:
    """The last value whose fitted peak fits, or None where the memory is not a polynomial in the field."""
    if not polynomial(job, path):
        return None
    degree, x0 = POLYNOMIAL[path]
    fitted = Fit.of(job, path, x0, degree)
    if fitted is None:
        return None
    fitted.keep_candidates(0, high - x0)

    def peak(k: int) -> int:
        pair = k * (k - 1) // 2
        return max(a + b * k + c * pair for _, (a, b, c) in fitted.candidates)

    if peak(0) > capacity:
        return x0 - 1
    low, top = 0, high - x0  # peak(low) fits; search the last k that does
    while low < top:
        middle = (low + top + 1) // 2
        if peak(middle) <= capacity:
            low = middle
        else:
            top = middle - 1
    return x0 + low


def _smallest_data(job: Job, probe: _Probe) -> tuple[int | None, str | None]:
    item = JOB_FIELDS["parallelism.data"]
    # Under expert parallelism data × context must be a multiple of the expert degree: only those data degrees count.
    p = job.parallelism
    step = data_step(p)
    high = item.high // step * step
    if probe.fits(step):
        return step, None
    if p.zero_stage == 0:
        return None, ("ZeRO stage 0 keeps every model state whole on each GPU, so no data-parallel degree lowers the "
                      "per-GPU peak; choose a ZeRO stage (see the fixes)")
    if not probe.fits(high):
        peak = probe.estimate(high).peak
        return None, (f"even {high:,} data-parallel GPUs leave a peak of {peak.bytes:,} B at '{peak.event}': "
                      f"what ZeRO-{p.zero_stage} does not shard does not fit alone")
    # fits(k × step) is False below the answer and True from it on: bisect on "does not fit".
    last_bad = boundary(lambda k: not probe.fits(k * step), 1, high // step, None)
    return (last_bad + 1) * step, None


# --- fixes ----------------------------------------------------------------------------------------


def fixes(job: Job, given: Estimate | None = None) -> tuple[Fix, ...]:
    """The single changes that make a job that does not fit fit, cheapest first (`Cost` kinds in order)."""
    given = given or job.estimate()
    if job.gpu is None or given.gpu is None or given.gpu.fits:
        return ()
    found = []
    token = _ESTIMATES.set({})  # the candidates' makers and this loop ask for the same jobs: each replayed once
    try:
        for change, summary, cost in _candidates(job):
            try:
                varied = job
                for path, value in change.items():
                    varied = with_field(varied, path, value)
                result = _fitting(varied)
            except DomainError:
                continue
            if result is not None:
                found.append(Fix(change, summary, result, cost))
    finally:
        _ESTIMATES.reset(token)
    # A setting of the allocator changes nothing the job computes: offered first whenever it alone decides.
    found.sort(key=lambda fix: (COST_ORDER.index(fix.cost.kind), "training.allocator" not in fix.change,
                                fix.cost.extra_compute or 0,
                                fix.cost.extra_communication or 0, fix.cost.extra_gpus or 0, fix.estimate.peak.bytes))
    return tuple(found)


Candidate = tuple[dict[str, object], str, Cost]
# While fixes() gathers its candidates: the estimates made to check them, by job (None: it does not fit).
_ESTIMATES: ContextVar[dict[Job, Estimate | None] | None] = ContextVar("solver_estimates", default=None)


def _candidates(job: Job) -> list[Candidate]:
    out: list[Candidate] = []
    for maker in (_free_changes, _batch_shape, _compiled, _recomputation, _activation_offload, _zero, _offload,
                  _experts, _more_gpus, _numerics):
        try:
            out.extend(maker(job))
        except DomainError:  # a kind of change this setup does not allow at all: no fixes of that kind
            continue
    return out


def _free_changes(job: Job) -> list[Candidate]:
    training, arch = job.training, job.architecture
    out: list[Candidate] = []
    if training.allocator == "default" and arch is not None:
        out.append(({"training.allocator": "expandable-segments"},
                    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    Cost("none", "same arithmetic: the allocator grows one segment by pages instead of asking for a "
                                 "segment per large tensor, so freed blocks are reused and fewer sit cached unused")))
    scratch = OPTIMIZER_INFO[training.optimizer].scratch
    if scratch["fused"].copies < scratch[training.optimizer_implementation].copies:
        out.append(({"training.optimizer_implementation": "fused"}, "Use the fused optimizer step (fused=True)",
                    Cost("none", "same update, one kernel that writes in place: no step scratch")))
    ft = training.finetuning
    if ft.bitsandbytes_version is not None and (ft.keeps_4bit_inputs or ft.dequantizes_from_fp16):
        out.append(({"finetuning.bitsandbytes_version": None}, "Upgrade bitsandbytes to 0.43.2 or later",
                    Cost("none", "same arithmetic: since 0.43.2 the 4-bit matmul no longer keeps each layer's input "
                                 "for backward (commit 9e75374), and since 0.43.0 it dequantizes each weight in its "
                                 "own dtype rather than through an fp16 copy (commit dcfb6f81)")))
    if effective_loop(training) == "plain" and arch is not None:
        out.append(({"training.loop": "hf-trainer"}, "Keep only the loss, not the model's output, across backward",
                    Cost("none", "same arithmetic: the logits are freed before backward (as the Hugging Face Trainer "
                                 "does; in a plain loop, keep `loss = model(...).loss` rather than the output)")))
    if arch is not None:
        current = act.attention_kernel(arch, activation_setup(training, job.parallelism))
        fused = act.attention_kernel(arch, activation_setup(replace(training, attention="sdpa"), job.parallelism))
        if current != "flash" and fused == "flash":
            out.append(({"training.attention": "sdpa"}, "Use PyTorch's scaled_dot_product_attention (flash kernel)",
                        Cost("none", "the same attention computed in tiles: no s × s tensors are kept, and it is "
                                     "faster; results agree up to rounding")))
    return out


def _batch_shape(job: Job) -> list[Candidate]:
    """A smaller micro-batch with more accumulation steps: the same sequences per optimizer step."""
    training = job.training
    b, m = training.micro_batch_size, training.gradient_accumulation_steps
    if b == 1 or job.architecture is None:
        return []
    per_step = b * m
    for smaller in range(b - 1, 0, -1):
        if per_step % smaller:
            continue
        varied = with_field(with_field(job, "training.micro_batch_size", smaller),
                            "training.gradient_accumulation_steps", per_step // smaller)
        if _fits(varied):
            steps = per_step // smaller
            return [({"training.micro_batch_size": smaller, "training.gradient_accumulation_steps": steps},
                     f"Micro-batch {smaller} with {steps} accumulation steps (still {per_step} sequences per step)",
                     Cost("throughput", f"same sequences and FLOPs per optimizer step, in {steps} micro-batches "
                                        f"instead of {m}: smaller matmuls keep the GPU less busy"))]
    return []


def _compiled(job: Job) -> list[Candidate]:
    """torch.compile with inductor, where it was measured (`rules._compiled` refuses the rest): AOTAutograd's
    partitioner keeps fewer of a layer's tensors for backward (app/core/saved/compiled.py)."""
    if job.architecture is None or job.training.compile != "none":
        return []
    return [({"training.compile": "inductor"}, "Compile the model with torch.compile (inductor)",
             Cost("throughput", "a one-off compile before the first step, and again for each new sequence length "
                                "unless the shapes are marked dynamic; backward recomputes the cheap pointwise "
                                "operations whose outputs eager mode keeps"))]


def _recomputation(job: Job) -> list[Candidate]:
    arch, training = job.architecture, job.training
    if arch is None:
        return []
    order = tuple(act.CHECKPOINTING_CHOICES)
    flops = step_flops(arch, micro_batch_size=training.micro_batch_size, seq_len=training.seq_len)
    now = flops.recompute_fraction(training.activation_checkpointing,
                                   _share(job, training.activation_checkpointing, training.recompute_every,
                                          training.recompute_first_layers))
    partial = training.recompute_every != 1 or training.recompute_first_layers is not None
    out: list[Candidate] = []
    fewest = _fewest_recomputed(job)
    if fewest is not None:
        extra = flops.recompute_fraction("full", _share(job, "full", 1, fewest)) - now
        out.append(({"training.activation_checkpointing": "full", "training.recompute_every": 1,
                     "training.recompute_first_layers": fewest},
                    f"Recompute the first {fewest} layers of each stage in full",
                    Cost("compute", f"+{extra:.1%} compute per step: backward reruns those layers' forward; the others "
                                    "keep their activations (Megatron-LM's --recompute-method block)",
                         extra_compute=extra)))
    for choice in order[order.index(training.activation_checkpointing) + (0 if partial else 1):]:
        extra = flops.recompute_fraction(choice) - now
        what = {"full": "every layer's forward",
                "op": "every layer's forward but the matmuls and attention kernel whose outputs it saves"}.get(
                    choice, "the attention core's forward (QKᵀ, softmax, × V)")
        change: dict[str, object] = {"training.activation_checkpointing": choice}
        if partial:
            change |= {"training.recompute_every": 1, "training.recompute_first_layers": None}
        out.append((change, f"Recompute activations ({choice})",
                    Cost("compute", f"+{extra:.1%} compute per step: backward reruns {what} (Korthikanti et al. "
                                    "2022, sections 5-6)", extra_compute=extra)))
    return out


def _share(job: Job, checkpointing: str, every: int, first_layers: int | None) -> float:
    """The share of the job's layers that full recomputation applies to under the policy."""
    arch = job.architecture
    assert arch is not None  # asked for jobs with an architecture only
    return recomputed_share(checkpointing, arch.num_hidden_layers, every=every, first_layers=first_layers,
                            stages=job.parallelism.pipeline)


def _fewest_recomputed(job: Job) -> int | None:
    """The fewest layers of each stage whose full recomputation makes the job fit (the first N, Megatron-LM's block
    method), fewer than all and more than the job recomputes now; None where there is none."""
    arch, training = job.architecture, job.training
    assert arch is not None  # asked for jobs with an architecture only
    per_stage = arch.num_hidden_layers // job.parallelism.pipeline
    if per_stage < 2 or job.parallelism.uneven_stages or job.parallelism.virtual_stages > 1:
        return None
    now = (0 if training.activation_checkpointing != "full" else
           stage_recomputed("full", per_stage, every=training.recompute_every,
                            first_layers=training.recompute_first_layers).count)
    candidates = list(range(now + 1, per_stage))
    if not candidates:
        return None
    try:
        full = with_field(with_field(job, "training.recompute_every", 1), "training.activation_checkpointing", "full")
    except DomainError:
        return None
    return _fewest(full, "training.recompute_first_layers", candidates)


def _activation_offload(job: Job) -> list[Candidate]:
    """Each layer's input saved for its recomputation moved to pinned host memory (`app.core.activation_offload`:
    transformers' offload where the Trainer runs, else torchtune's), with full recomputation of every layer, which it
    needs. Its cost: the host memory, and each input crossing PCIe twice a micro-batch (to the host in forward, back
    in backward)."""
    arch, training, p = job.architecture, job.training, job.parallelism
    if arch is None or training.activation_offload != "none":
        return []
    if training.implementation == "megatron":
        return _megatron_offload(job)
    offload = ACTIVATION_OFFLOADS["checkpoints-to-host" if training.framework == "hf-trainer" else "torchtune"]
    change: dict[str, object] = {"training.activation_offload": offload.id}
    partial = training.recompute_every != 1 or training.recompute_first_layers is not None
    if training.activation_checkpointing != "full":
        change["training.activation_checkpointing"] = "full"
    if partial:
        change |= {"training.recompute_every": 1, "training.recompute_first_layers": None}
    each = act.total_bytes(act.checkpointed_layer_activations(arch, activation_setup(training, p), "full"))
    layers = arch.num_hidden_layers
    host, moved = layers * pinned_bytes(each), 2 * layers * each * training.gradient_accumulation_steps
    flops = step_flops(arch, micro_batch_size=training.micro_batch_size, seq_len=training.seq_len)
    extra = flops.recompute_fraction("full") - flops.recompute_fraction(
        training.activation_checkpointing, _share(job, training.activation_checkpointing, training.recompute_every,
                                                  training.recompute_first_layers))
    recompute = f"; +{extra:.1%} compute per step to recompute every layer" if extra > 0 else ""
    return [(change, offload.fix,
             Cost("host", f"{host / GIB:.1f} GiB of pinned host memory per GPU ({layers} layers' inputs); each step "
                          f"copies {moved / GIB:.1f} GiB over PCIe, each input to the host in forward and back in "
                          f"backward, {offload.copies}{recompute}",
                  extra_compute=extra if extra > 0 else None))]


def _megatron_offload(job: Job) -> list[Candidate]:
    """Megatron-LM's --cpu-offloading-num-layers (`app.core.activation_offload`), where Megatron-LM allows it (no
    recomputation, one pipeline stage): half the layers, or all but the last, moved to pinned host memory. Its cost:
    the host memory, and each moved tensor crossing PCIe twice a micro-batch."""
    arch, training, p = job.architecture, job.training, job.parallelism
    if arch is None or training.activation_checkpointing != "none" or p.pipeline > 1 or arch.num_hidden_layers < 2:
        return []
    offload = ACTIVATION_OFFLOADS["megatron"]
    saved = act.layer_activations(arch, activation_setup(training, p))
    moved = [x for x in saved if not offload.stays(x)]
    each, pinned = act.total_bytes(moved), sum(pinned_bytes(x.bytes) for x in moved)
    layers = arch.num_hidden_layers
    out: list[Candidate] = []
    for count in sorted({max(1, layers // 2), layers - 1}):
        traffic = 2 * count * each * training.gradient_accumulation_steps
        out.append(({"training.activation_offload": "megatron", "training.activation_offload_layers": count},
                    f"Offload the first {count} layers' activations to the CPU (--cpu-offloading-num-layers {count})",
                    Cost("host", f"{count * pinned / GIB:.1f} GiB of pinned host memory per GPU ({count} layers' saved "
                                 f"tensors); each step copies {traffic / GIB:.1f} GiB over PCIe, to the host in forward "
                                 f"and back in backward, {offload.copies}")))
    return out


def _zero(job: Job) -> list[Candidate]:
    """Higher ZeRO stages over the data-parallel group. Stages 1 and 2 move what data parallelism already
    moves (a reduce-scatter and an all-gather, 2Ψ per step); stage 3 adds an all-gather of the weights in
    backward: 3Ψ, 1.5x (Rajbhandari et al. 2019, section 7)."""
    p = job.parallelism
    if p.data == 1:
        return []
    volume = {0: 2, 1: 2, 2: 2, 3: 3}
    out: list[Candidate] = []
    for stage in range(p.zero_stage + 1, 4):
        extra = volume[stage] / volume[p.zero_stage] - 1
        out.append(({"parallelism.zero_stage": stage}, f"ZeRO stage {stage} over the {p.data} data-parallel GPUs",
                    Cost("communication", f"+{extra:.0%} data-parallel traffic per step ({volume[stage]}Ψ against "
                                          f"{volume[p.zero_stage]}Ψ; Rajbhandari et al. 2019, section 7)",
                         extra_communication=extra)))
    return out


def _offload(job: Job) -> list[Candidate]:
    """The optimizer's state, the fp32 master copy and the update moved to host memory (ZeRO-Offload, Ren et al.
    2021, arXiv:2101.06840: ZeRO stage 2 with offload_optimizer, which runs on one GPU too); failing that, the
    16-bit parameters as well (ZeRO-Infinity's offload_param, with ZeRO stage 3). The first of the two that fits."""
    p = job.parallelism
    if OFFLOADS[p.offload].parameters:
        return []
    steps = [] if OFFLOADS[p.offload].optimizer else [(max(p.zero_stage, 2), "optimizer")]
    steps.append((3, "optimizer+parameters"))
    for stage, offload in steps:
        change: dict[str, object] = {"parallelism.offload": offload}
        if stage != p.zero_stage:
            change["parallelism.zero_stage"] = stage
        varied = job
        for path, value in change.items():
            varied = with_field(varied, path, value)
        if not _fits(varied):
            continue
        what = "the optimizer's state and the fp32 master copy" if offload == "optimizer" else \
            "the optimizer's state, the fp32 master copy and the 16-bit weights"
        where = f"ZeRO stage {stage}" + (f" over the {p.data} data-parallel GPUs" if p.data > 1 else " on one GPU")
        return [(change, f"Offload {what} to the CPU ({where})",
                 Cost("host", f"no more GPUs: {what} live in host memory and the update runs on the CPU; each "
                                    "step sends the gradients to the host and the updated weights back over PCIe "
                                    "(ZeRO-Offload, Ren et al. 2021)"))]
    return []


def _experts(job: Job) -> list[Candidate]:
    """A mixture's routed experts split over more of the GPUs the layout has (expert parallelism): the smallest
    degree that fits. Each MoE layer then sends its tokens' k copies to the experts' GPUs and back, in forward and
    again in backward: four all-to-alls of n·k × h per layer (Lepikhin et al. 2020, GShard, arXiv:2006.16668,
    section 2.2; Megatron-LM's MoEAlltoAllTokenDispatcher)."""
    p, arch = job.parallelism, job.architecture
    if arch is None or not arch.is_moe:
        return []
    out: list[Candidate] = []
    stage = p.tensor * p.shard_group
    for expert in range(p.expert + 1, arch.num_local_experts + 1):
        if arch.num_local_experts % expert or stage % (expert * p.expert_tensor_degree):
            continue
        if _fits(with_field(job, "parallelism.expert", expert)):
            out.append(({"parallelism.expert": expert}, f"Expert parallelism over {expert} GPUs",
                        Cost("communication", f"no more GPUs: each GPU holds {arch.num_local_experts // expert} of "
                                              f"the {arch.num_local_experts} experts of a layer, and each MoE layer "
                                              "exchanges its tokens' k copies by all-to-all, twice in forward and "
                                              "twice in backward (GShard, Lepikhin et al. 2020)")))
            break
    return out


def _more_gpus(job: Job) -> list[Candidate]:
    p, arch = job.parallelism, job.architecture
    out: list[Candidate] = []
    if p.zero_stage > 0:
        probe = _Probe(job, "parallelism.data")
        data, _ = _smallest_data(job, probe)
        if data is not None and data > p.data:
            extra = (data - p.data) * p.tensor * p.pipeline
            out.append(({"parallelism.data": data}, f"{data} data-parallel GPUs (ZeRO-{p.zero_stage} shards over more)",
                        Cost("hardware", _more(extra), extra_gpus=extra)))
    if arch is None:
        return out
    tensors = [t for t in range(p.tensor + 1, MAX_FIX_TENSOR + 1)
               if not (arch.num_attention_heads % t or arch.kv_heads % t)]
    tensor = _fewest(job, "parallelism.tensor", tensors)
    if tensor is not None:
        extra = (tensor - p.tensor) * p.data * p.pipeline
        out.append(({"parallelism.tensor": tensor}, f"Tensor parallelism over {tensor} GPUs",
                     Cost("hardware", f"{_more(extra)}; each layer all-reduces its activations twice in forward "
                                      "and twice in backward, so keep the group inside one NVLink node",
                          extra_gpus=extra)))
    m = job.training.gradient_accumulation_steps
    pipelines = [d for d in range(p.pipeline + 1, min(arch.num_hidden_layers, MAX_FIX_PIPELINE) + 1)
                 if arch.num_hidden_layers % d == 0]
    pipeline = _fewest(job, "parallelism.pipeline", pipelines)
    if pipeline is not None:
        extra = (pipeline - p.pipeline) * p.data * p.tensor
        bubble = (pipeline - 1) / (m + pipeline - 1)
        out.append(({"parallelism.pipeline": pipeline}, f"{pipeline} pipeline stages",
                     Cost("hardware", f"{_more(extra)}; with {m} micro-batch{'es' if m > 1 else ''} per step the 1F1B "
                                      f"pipeline idles {bubble:.0%} of the step ((p - 1)/(m + p - 1), Narayanan et al. "
                                      "2021)", extra_gpus=extra)))
    return out


def _fewest(job: Job, path: str, degrees: list[int]) -> int | None:
    """The smallest of the (ascending) degrees at which the job fits: the memory per GPU falls as the degree grows,
    so those whose tensors alone pass the capacity are set aside without a replay and the rest bisected, a few
    replays rather than one per degree (a 64-stage search took seconds of CPU)."""
    def possible(degree: int) -> bool:
        try:
            return not with_field(job, path, degree).surely_over()
        except DomainError:
            return False

    left = [degree for degree in degrees if possible(degree)]
    if not left or not _fits(with_field(job, path, left[-1])):
        return None
    low, high = 0, len(left) - 1  # left[high] fits
    while low < high:
        middle = (low + high) // 2
        if _fits(with_field(job, path, left[middle])):
            high = middle
        else:
            low = middle + 1
    return left[high]


def _fits(varied: Job) -> bool:
    """Whether a changed job fits its GPU; a change the rest of the setup does not allow (tensor parallelism for a
    layout that refuses it) does not."""
    try:
        return _fitting(varied) is not None
    except DomainError:
        return False


def _fitting(varied: Job) -> Estimate | None:
    """A changed job's estimate where it fits its GPU, else None; worked out once while fixes() asks."""
    seen = _ESTIMATES.get()
    if seen is not None and varied in seen:
        return seen[varied]
    result = varied.fitting_estimate()
    if seen is not None:
        seen[varied] = result
    return result


def _more(gpus: int) -> str:
    return f"+{gpus} GPU" + ("s" if gpus > 1 else "")


def _numerics(job: Job) -> list[Candidate]:
    training = job.training
    out: list[Candidate] = []
    current = OPTIMIZER_INFO[training.optimizer]
    for info in OPTIMIZER_INFO.values():
        if info.id == current.id or info.id.startswith("sgd"):
            continue
        cost = Cost("numerics", f"{info.name}: {info.numerics}")
        if info.paged:  # outside the verdict: what does not fit beside the peak pages over PCIe each step
            cost = Cost("host", f"{info.name}: {info.numerics}; its large states move to host memory when the GPU "
                                "runs short and back for each optimizer step, over PCIe (the estimate's warning "
                                "says how much)")
        out.append(({"training.optimizer": info.id}, f"Optimizer {info.name}", cost))
    current_precision = field_value(job, "training.precision")
    for preset in PRECISION_PRESETS.values():
        if preset.id == current_precision:
            continue
        out.append(({"training.precision": preset.id}, f"Precision {preset.name}",
                    Cost("numerics", f"{preset.name}: {preset.numerics}")))
    return out
