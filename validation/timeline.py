"""Live memory through two full training steps, event by event: the measured side of the peak.

A training step runs out of memory at its peak, not at the end. This module records, for two
consecutive steps (forward, ``loss.backward()``, ``optimizer.step()``,
``optimizer.zero_grad(set_to_none=True)``, twice), the bytes of every tensor storage alive at each
named event of the step and the highest live bytes within the interval since the previous event.

How bytes are counted. `StorageTracker` is a `TorchDispatchMode`: every ATen operation (forward,
backward and the optimizer's, which on CPU all run on the calling thread) passes through it, and
it notes the distinct untyped storage (``tensor.untyped_storage()``, so views count once) of each
tensor the operation returns. A storage's Python object lives exactly as long as the C++ storage
(PyObject preservation, ``torch/csrc/Storage.cpp``), so a ``weakref`` callback on it marks the
moment its memory is freed. ``UntypedStorage.resize_`` is wrapped, and every output's size is
re-read, so storages that grow in place are counted too (the same scheme as
``torch.distributed._tools.mem_tracker.MemTracker._track`` and ``._track_resize``). Nothing here
reads tensor data, so the tracker works unchanged under
``torch._subclasses.fake_tensor.FakeTensorMode``, where real-size models (8 B parameters) trace
in seconds without allocating their memory.

What a dispatch mode cannot see: buffers a kernel allocates for its own use and frees before it
returns (``at::empty`` called inside the kernel runs below the Python dispatch key). On CPU the
profiler's allocator record (`allocator_record`) sees them; `cross_check` compares the two.

Events (per step; with gradient accumulation every micro-batch-level event is prefixed
``micro-batch k: ``): "step start", "forward: embedding" (everything before the first decoder
layer: embedding, positions, rotary tables, mask), "forward: layer i" (decoder layer i's forward),
"forward: loss" (final norm, output layer and loss), "backward: loss gradients" (from the end of
forward until the gradient of the logits is complete: the loss's backward), "backward: output
layer" (the output layer's and the final norm's backward), "backward: layer i" (decoder layer i's
backward, recomputation included), "backward: embedding" (the rest of backward), "optimizer.step"
and "zero_grad". Backward boundaries are autograd pre-hooks (``Node.register_prehook``) on the
``grad_fn`` of the tensors between the regions: the logits, each decoder layer's output and the
first layer's input. A node runs only once every gradient flowing into its tensor is complete,
and the CPU engine runs nodes in decreasing sequence number (``torch/csrc/autograd/engine.cpp``,
``CompareNodeTaskTime``), so each region's backward lies between two consecutive pre-hooks.

Each point records ``live`` (bytes alive when the event ends) and ``peak`` (the highest bytes
alive since the previous point), with a breakdown by category. A storage's category is its role,
found by identity: ``weights`` (``model.parameters()``), ``buffers``, ``inputs`` (token ids),
``gradients`` (a ``p.grad`` at some point), ``optimizer_states`` (a tensor in
``optimizer.state``, 0-d step counters apart), ``model_outputs`` (the logits and the loss the
model returns), ``autocast_weight_copies`` (``_to_copy`` of a parameter); any other storage is
named by when it was made: ``activations`` (in forward), ``backward_temporaries`` (in backward,
recomputation included) or ``optimizer_temporaries`` (in ``step()`` and ``zero_grad()``).

Run ``python -m validation.timeline`` for the real-size sweep against trainmem's predictions
(`validation.peak`): it writes docs/timeline.json, a chart per family (docs/timeline-*.svg) and the
"Peak through two steps" section of docs/VALIDATION.md and docs/validation.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from validation.models import FAMILIES, Size, auto_class, decoder_layers, labels_for, output_module  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"

# Roles, found by identity, and the categories of storages without one.
WEIGHTS = "weights"
BUFFERS = "buffers"
INPUTS = "inputs"
GRADIENTS = "gradients"
OPTIMIZER_STATES = "optimizer_states"
STEP_COUNTERS = "optimizer_step_counters"
MODEL_OUTPUTS = "model_outputs"
AUTOCAST_WEIGHT_COPIES = "autocast_weight_copies"
ORIGIN_CATEGORY = {
    "setup": "other",
    "forward": "activations",
    "backward": "backward_temporaries",
    "optimizer": "optimizer_temporaries",
}
CATEGORIES = (
    WEIGHTS, BUFFERS, INPUTS, GRADIENTS, OPTIMIZER_STATES, STEP_COUNTERS, MODEL_OUTPUTS, AUTOCAST_WEIGHT_COPIES,
    "activations", "backward_temporaries", "optimizer_temporaries", "other",
)


# --- the storage tracker --------------------------------------------------------------------------


@dataclass
class StorageInfo:
    """One distinct storage: how big, what made it and when."""

    uid: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    op: str
    origin: str  # "setup", "forward", "backward" or "optimizer"
    made_during: str  # the event that was open when it was made
    role: str | None = None

    @property
    def category(self) -> str:
        return self.role or ORIGIN_CATEGORY[self.origin]


class StorageTracker(TorchDispatchMode):
    """Counts the live bytes of every distinct storage made by an operation, freed through weakrefs.

    ``log`` holds every change as ``(uid, signed bytes)``; ``interval_peak`` is the most bytes alive
    since `reset_interval`, reached when ``log`` had ``interval_peak_index`` entries.
    """

    def __init__(self) -> None:
        super().__init__()
        self.infos: list[StorageInfo] = []
        self.live = 0
        self.log: list[tuple[int, int]] = []
        self.interval_peak = 0
        self.interval_peak_index = 0
        self.origin = "setup"
        self.where = "setup"
        self.data_ptrs: dict[int, int] = {}  # uid -> data pointer (real tensors only), for the allocator check
        self._uid_of: dict[int, int] = {}  # id(storage object) -> uid, while the storage is alive
        self._refs: dict[int, weakref.ref] = {}
        self._fake = False
        self._orig_resize = None

    # - bookkeeping -

    def _change(self, uid: int, delta: int) -> None:
        self.log.append((uid, delta))
        self.live += delta
        if self.live > self.interval_peak:
            self.interval_peak = self.live
            self.interval_peak_index = len(self.log)

    def _freed(self, uid: int, key: int, _ref: weakref.ref) -> None:
        self._uid_of.pop(key, None)
        self._refs.pop(uid, None)
        info = self.infos[uid]
        if info.nbytes:
            self._change(uid, -info.nbytes)

    def reset_interval(self) -> None:
        self.interval_peak = self.live
        self.interval_peak_index = len(self.log)

    def uid(self, tensor: torch.Tensor) -> int | None:
        """The uid of a tracked tensor's storage, or None."""
        try:
            return self._uid_of.get(id(tensor.untyped_storage()))
        except (RuntimeError, NotImplementedError):
            return None

    def track(self, tensor: torch.Tensor, *, op: str = "", role: str | None = None) -> int | None:
        """Notes `tensor`'s storage (new, or grown in place); returns its uid."""
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            return None
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        key = id(storage)
        uid = self._uid_of.get(key)
        nbytes = storage.nbytes()
        if uid is None:
            uid = len(self.infos)
            self.infos.append(StorageInfo(uid, nbytes, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape),
                                          op, self.origin, self.where, role))
            self._uid_of[key] = uid
            self._refs[uid] = weakref.ref(storage, partial(self._freed, uid, key))
            if not self._fake:
                self.data_ptrs[uid] = storage.data_ptr()
            if nbytes:
                self._change(uid, nbytes)
        else:
            info = self.infos[uid]
            if nbytes != info.nbytes:
                self._change(uid, nbytes - info.nbytes)
                info.nbytes = nbytes
            if role is not None and info.role is None:
                info.role = role
        return uid

    def set_role(self, tensor: torch.Tensor, role: str) -> None:
        uid = self.uid(tensor)
        if uid is not None and self.infos[uid].role is None:
            self.infos[uid].role = role

    def live_uids(self, index: int) -> set[int]:
        """The storages alive after the first `index` entries of the log."""
        held: dict[int, int] = {}
        for uid, delta in self.log[:index]:
            held[uid] = held.get(uid, 0) + delta
        return {uid for uid, nbytes in held.items() if nbytes > 0}

    def breakdowns(self, indices: list[int]) -> dict[int, dict[str, int]]:
        """Bytes per category after the first `index` log entries, for every index asked (one replay)."""
        wanted = sorted(set(indices))
        result: dict[int, dict[str, int]] = {}
        totals: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        position = 0
        for index in wanted:
            for uid, delta in self.log[position:index]:
                totals[self.infos[uid].category] += delta
            position = index
            result[index] = {name: value for name, value in totals.items() if value}
        return result

    # - dispatch -

    def __enter__(self):
        from torch._guards import detect_fake_mode

        self._fake = detect_fake_mode() is not None
        self._orig_resize = torch.UntypedStorage.resize_
        tracker = self

        def resize_(storage, size):
            tracker._orig_resize(storage, size)
            uid = tracker._uid_of.get(id(storage))
            if uid is not None and storage.nbytes() != tracker.infos[uid].nbytes:
                tracker._change(uid, storage.nbytes() - tracker.infos[uid].nbytes)
                tracker.infos[uid].nbytes = storage.nbytes()

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *args):
        torch.UntypedStorage.resize_ = self._orig_resize
        return super().__exit__(*args)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = str(func)
        out = func(*args, **(kwargs or {}))
        role = None
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.Tensor):
            source = self.uid(args[0])
            if source is not None and self.infos[source].role == WEIGHTS:
                role = AUTOCAST_WEIGHT_COPIES
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self.track(tensor, op=op, role=role)
        return out


# --- events -----------------------------------------------------------------------------------------


@dataclass
class Point:
    """One event of one step: live bytes when it ends, the peak within it, and where those bytes are."""

    step: int
    event: str
    live: int
    peak: int
    live_index: int
    peak_index: int
    live_breakdown: dict[str, int] = field(default_factory=dict)
    peak_breakdown: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"step": self.step, "event": self.event, "live_bytes": self.live, "peak_bytes": self.peak,
                "live_breakdown": self.live_breakdown, "peak_breakdown": self.peak_breakdown}


class Timeline:
    """Marks the step's events with module hooks and autograd pre-hooks, and records a point per event."""

    def __init__(self, tracker: StorageTracker, model: nn.Module, optimizer: torch.optim.Optimizer,
                 *, accumulation: int) -> None:
        self.tracker = tracker
        self.model = model
        self.optimizer = optimizer
        self.layers = list(decoder_layers(model))
        self.head = output_module(model)
        self.accumulation = accumulation
        self.points: list[Point] = []
        self.step = 0
        self.micro_batch = 1
        self.phase = "setup"
        self.handles: list = []

    # - naming -

    def _name(self, event: str) -> str:
        if self.accumulation > 1 and event not in ("step start", "optimizer.step", "zero_grad"):
            return f"micro-batch {min(self.micro_batch, 2)}: {event}"
        return event

    def _open(self, event: str) -> None:
        self.tracker.where = f"step {self.step}: {self._name(event)}"

    def close(self, event: str, then: str | None = None) -> None:
        """Ends `event` (and opens `then`): a point with the live bytes now and the interval's peak."""
        self._note_roles()
        tracker = self.tracker
        self.points.append(Point(self.step, self._name(event), tracker.live, tracker.interval_peak,
                                 len(tracker.log), tracker.interval_peak_index))
        tracker.reset_interval()
        if then is not None:
            self._open(then)

    def _note_roles(self) -> None:
        for parameter in self.model.parameters():
            if parameter.grad is not None:
                self.tracker.set_role(parameter.grad, GRADIENTS)
        for state in self.optimizer.state.values():
            for name, value in state.items():
                if isinstance(value, torch.Tensor):
                    step_counter = name == "step" and value.dim() == 0
                    self.tracker.set_role(value, STEP_COUNTERS if step_counter else OPTIMIZER_STATES)

    # - hooks -

    def _on_backward(self, closes: str, then: str):
        def prehook(_grad_outputs):
            self.close(closes, then)

        return prehook

    def _model_pre(self, _module, _args, _kwargs):
        self.phase = "forward"
        self.tracker.origin = "forward"

    def _model_post(self, _module, _args, _kwargs, output):
        for name in ("logits", "loss"):
            value = getattr(output, name, None)
            if isinstance(value, torch.Tensor):
                self.tracker.set_role(value, MODEL_OUTPUTS)
        self.close("forward: loss", then="backward: loss gradients")
        self.phase = "backward"
        self.tracker.origin = "backward"

    def _layer_pre(self, index: int):
        def hook(_module, args, kwargs):
            if self.phase != "forward":
                return
            if index == 0:
                self.close("forward: embedding", then="forward: layer 1")
                hidden = args[0] if args else kwargs["hidden_states"]
                # With frozen embeddings (LoRA) the first layer's input has no gradient: its backward ends
                # with the micro-batch (end_micro_batch closes it).
                self.first_input_graded = hidden.grad_fn is not None
                if hidden.grad_fn is not None:
                    hidden.grad_fn.register_prehook(self._on_backward("backward: layer 1", "backward: embedding"))

        return hook

    def _layer_post(self, index: int):
        last = len(self.layers) - 1

        def hook(_module, _args, _kwargs, output):
            if self.phase != "forward":
                return
            number = index + 1
            self.close(f"forward: layer {number}", then=f"forward: layer {number + 1}" if index < last else "forward: loss")
            hidden = output[0] if isinstance(output, tuple | list) else output
            if hidden.grad_fn is None:
                return
            if index == last:
                hidden.grad_fn.register_prehook(self._on_backward("backward: output layer", f"backward: layer {number}"))
            else:
                hidden.grad_fn.register_prehook(self._on_backward(f"backward: layer {number + 1}", f"backward: layer {number}"))

        return hook

    def _head_post(self, _module, _args, output):
        if self.phase == "forward" and output.grad_fn is not None:
            output.grad_fn.register_prehook(self._on_backward("backward: loss gradients", "backward: output layer"))

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        self.handles = [
            self.model.register_forward_pre_hook(self._model_pre, with_kwargs=True),
            self.model.register_forward_hook(self._model_post, with_kwargs=True),
            self.head.register_forward_hook(self._head_post),
        ]
        for index, layer in enumerate(self.layers):
            self.handles.append(layer.register_forward_pre_hook(self._layer_pre(index), with_kwargs=True))
            self.handles.append(layer.register_forward_hook(self._layer_post(index), with_kwargs=True))
        try:
            yield
        finally:
            for handle in self.handles:
                handle.remove()
            self.handles.clear()

    # - the step -

    def begin_step(self, step: int) -> None:
        self.step = step
        self.micro_batch = 1
        self._open("step start")
        self.close("step start", then="forward: embedding")

    def end_micro_batch(self) -> None:
        if not getattr(self, "first_input_graded", True):
            self.close("backward: layer 1", then="backward: embedding")
        self.close("backward: embedding")
        self.micro_batch += 1
        self.tracker.origin = "optimizer" if self.micro_batch > self.accumulation else "forward"
        self.phase = "between"
        self._open("optimizer.step" if self.micro_batch > self.accumulation else "forward: embedding")

    def finish(self) -> None:
        """Fills in every point's breakdowns (one replay of the log)."""
        indices = [p.live_index for p in self.points] + [p.peak_index for p in self.points]
        table = self.tracker.breakdowns(indices)
        for point in self.points:
            point.live_breakdown = table[point.live_index]
            point.peak_breakdown = table[point.peak_index]


# --- cases ------------------------------------------------------------------------------------------


def _llama_3_8b() -> transformers.PretrainedConfig:
    # meta-llama/Meta-Llama-3-8B config.json (app/core/data/models.json: llama-3-8b)
    return transformers.LlamaConfig(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
        tie_word_embeddings=False,
    )


def _qwen2_5_7b() -> transformers.PretrainedConfig:
    # Qwen/Qwen2.5-7B config.json (app/core/data/models.json: qwen2.5-7b): untied embeddings
    return transformers.Qwen2Config(
        hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
        intermediate_size=18944, vocab_size=152064, max_position_embeddings=131072, rope_theta=1000000.0,
        tie_word_embeddings=False, use_sliding_window=False,
    )


def _gpt2_xl() -> transformers.PretrainedConfig:
    # openai-community/gpt2-xl config.json (app/core/data/models.json: gpt2-xl): dropout 0.1, gelu_new, tied
    return transformers.GPT2Config(n_embd=1600, n_layer=48, n_head=25, vocab_size=50257, n_positions=1024,
                                   bos_token_id=50256, eos_token_id=50256)


def _qwen3_8b() -> transformers.PretrainedConfig:
    # Qwen/Qwen3-8B config.json (app/core/data/models.json: qwen3-8b): RMSNorm over each head of Q and K
    return transformers.Qwen3Config(
        hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        intermediate_size=12288, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
    )


def _olmo_2_7b() -> transformers.PretrainedConfig:
    # allenai/OLMo-2-1124-7B config.json (app/core/data/models.json: olmo-2-7b)
    return transformers.Olmo2Config(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
        intermediate_size=11008, vocab_size=100352, max_position_embeddings=4096, rope_theta=500000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
    )


def _gemma_3_1b() -> transformers.PretrainedConfig:
    # google/gemma-3-1b-pt config.json (app/core/data/models.json: gemma-3-1b): a 512-token window in five
    # layers of every six (sliding_window_pattern 6), tied embeddings
    return transformers.Gemma3TextConfig(
        hidden_size=1152, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
        intermediate_size=6912, vocab_size=262144, max_position_embeddings=32768, query_pre_attn_scalar=256,
        rms_norm_eps=1e-6, sliding_window=512,
        layer_types=["full_attention" if (index + 1) % 6 == 0 else "sliding_attention" for index in range(26)],
    )


def _mixtral_8x7b() -> transformers.PretrainedConfig:
    # mistralai/Mixtral-8x7B-v0.1 config.json (app/core/data/models.json: mixtral-8x7b)
    return transformers.MixtralConfig(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768, rope_theta=1000000.0,
        num_local_experts=8, num_experts_per_tok=2, rms_norm_eps=1e-5, tie_word_embeddings=False,
    )


def _qwen3_30b_a3b() -> transformers.PretrainedConfig:
    # Qwen/Qwen3-30B-A3B config.json (app/core/data/models.json: qwen3-30b-a3b): 128 experts, 8 per token
    return transformers.Qwen3MoeConfig(
        hidden_size=2048, num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
        norm_topk_prob=True, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
    )


def _gpt_oss_20b() -> transformers.PretrainedConfig:
    # openai/gpt-oss-20b config.json (app/core/data/models.json: gpt-oss-20b): 32 experts, 4 per token, attention
    # sinks, a 128-token window in every other layer; the default rotary parameters (YaRN's scaling keeps no tensor)
    return transformers.GptOssConfig(
        hidden_size=2880, num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
        intermediate_size=2880, vocab_size=201088, max_position_embeddings=131072, num_local_experts=32,
        num_experts_per_tok=4, sliding_window=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
        layer_types=["sliding_attention", "full_attention"] * 12,
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
    )


def _deepseek_v2_lite_real() -> transformers.PretrainedConfig:
    # deepseek-ai/DeepSeek-V2-Lite config.json (app/core/data/models.json: deepseek-v2-lite): multi-head latent
    # attention without a query compression, 64 routed experts (6 per token, greedy) and 2 shared, the first layer dense
    return transformers.DeepseekV2Config(
        hidden_size=2048, num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
        intermediate_size=10944, vocab_size=102400, max_position_embeddings=163840, first_k_dense_replace=1,
        n_routed_experts=64, num_experts_per_tok=6, topk_method="greedy", n_group=1, topk_group=1,
        n_shared_experts=2, moe_intermediate_size=1408, q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128,
        qk_rope_head_dim=64, v_head_dim=128, norm_topk_prob=False, routed_scaling_factor=1.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )


def _mistral_7b() -> transformers.PretrainedConfig:
    # mistralai/Mistral-7B-v0.1 config.json (app/core/data/models.json: mistral-7b): a 32,000-token vocabulary, so
    # at long sequences a layer's backward, not the loss, can decide the peak; sliding_window 4096 left out
    # (transformers 5 masks nothing more for sdpa within it, and the cases here use no window)
    return transformers.MistralConfig(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768, rope_theta=10000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
    )


# The CPU sweep's families (`real_size_cases`); the others are measured on a GPU only (validation.gpu).
SWEEP_FAMILIES = ("llama-3-8b", "qwen2.5-7b", "gpt2-xl")
REAL_SIZE = {"llama-3-8b": _llama_3_8b, "qwen2.5-7b": _qwen2_5_7b, "gpt2-xl": _gpt2_xl, "qwen3-8b": _qwen3_8b,
             "olmo-2-7b": _olmo_2_7b, "gemma-3-1b": _gemma_3_1b, "mixtral-8x7b": _mixtral_8x7b,
             "qwen3-30b-a3b": _qwen3_30b_a3b, "gpt-oss-20b": _gpt_oss_20b, "deepseek-v2-lite": _deepseek_v2_lite_real,
             "mistral-7b": _mistral_7b}

PARAM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "autocast-bf16": torch.float32}


def make_optimizer(params, optimizer: str, implementation: str) -> torch.optim.Optimizer:
    flags = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}[implementation]
    if optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **flags)
    if optimizer == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, **flags)
    raise ValueError(f"unknown optimizer {optimizer!r}")


@dataclass(frozen=True)
class TimelineCase:
    """One training setup run for two steps."""

    family: str  # a key of REAL_SIZE (built under FakeTensorMode) or of validation.models.FAMILIES
    precision: str = "bf16"  # "fp32", "bf16" or "autocast-bf16"
    optimizer: str = "adamw"  # "adamw" or "sgd-momentum"
    implementation: str = "foreach"  # "foreach", "fused" or "for-loop"
    attention: str = "sdpa"  # "eager" or "sdpa"
    checkpointing: str = "none"  # "none" or "full"
    recompute_every: int = 1  # under "full": only every k-th layer of the stage, counted from 1 (`recomputed_layers`)
    recompute_first_layers: int | None = None  # under "full": only the first N layers (None: all)
    use_reentrant: bool = False  # under "full": torch.utils.checkpoint's reentrant variant (transformers': False)
    accumulation: int = 1
    loop: str = "plain"  # "plain" or "hf-trainer"
    batch: int = 1
    seq: int = 4096
    size: Size | None = None  # for the small families
    fake_tensors: bool | None = None  # None: fake for the real-size families, real for the small ones
    lora_rank: int = 0  # above 0: peft's LoRA of this rank on lora_targets, the base frozen
    lora_targets: tuple[str, ...] = ()
    lora_dropout: float = 0.0
    fp8: str = "none"  # "torchao": torchao's float8 training on every decoder layer's linear layers (a CUDA GPU)

    @property
    def fake(self) -> bool:
        return self.family in REAL_SIZE if self.fake_tensors is None else self.fake_tensors

    @property
    def label(self) -> str:
        parts = [self.family if self.size is None else f"{self.family} {self.size.label()}", f"b{self.batch} s{self.seq}",
                 self.precision, f"{self.optimizer}({self.implementation})", self.attention]
        if self.checkpointing == "full":
            parts.append("ckpt")
            if self.recompute_every > 1:
                parts.append(f"every {self.recompute_every}")
            if self.recompute_first_layers is not None:
                parts.append(f"first {self.recompute_first_layers}")
            if self.use_reentrant:
                parts.append("reentrant")
        if self.accumulation > 1:
            parts.append(f"ga{self.accumulation}")
        parts.append(self.loop)
        if self.lora_rank:
            parts.append(f"lora r{self.lora_rank} {','.join(self.lora_targets)}"
                         + (f" dropout {self.lora_dropout}" if self.lora_dropout else ""))
        if self.fp8 != "none":
            parts.append(f"fp8 {self.fp8}")
        return " ".join(parts)

    def as_dict(self) -> dict:
        data = asdict(self) | {"label": self.label, "fake": self.fake}
        if not self.use_reentrant:
            del data["use_reentrant"]  # as the cases published before the field was read
        return data

    def recomputed_layers(self, layers: int) -> tuple[bool, ...]:
        """Which of `layers` decoder layers (from the bottom) are recomputed in backward.

        Every k-th: torchtitan's layer-level selective policy counts the blocks from 1 and wraps block i when
        ``i % ac_freq == 0`` (torchtitan/distributed/activation_checkpoint.py, ``_apply_layer_sac``, at commit
        1f029641b5caeb4df18ac094263e8bcc674b3686). The first N: Megatron-LM's ``--recompute-method block``
        checkpoints layers 0 to N - 1 of the stage (megatron/core/transformer/transformer_block.py,
        ``_checkpointed_forward``, at commit a7c9e8c44ae89bea013a085ef33ab52a9b7a19b4).
        """
        if self.checkpointing != "full":
            return (False,) * layers
        first = layers if self.recompute_first_layers is None else self.recompute_first_layers
        return tuple(index < first and (index + 1) % self.recompute_every == 0 for index in range(layers))

    def config(self) -> transformers.PretrainedConfig:
        config = REAL_SIZE[self.family]() if self.family in REAL_SIZE else FAMILIES[self.family](self.size or Size())
        config._attn_implementation = self.attention
        return config


def _cast(model: nn.Module, dtype: torch.dtype) -> None:
    """``model.to(dtype)`` for fake parameters (``Module._apply`` swaps them, which fake tensors refuse).

    Parameters are replaced by casts of themselves (tied ones stay tied, through a memo) and
    floating-point buffers are cast, as ``Module.to`` does.
    """
    memo: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, parameter in list(module._parameters.items()):
            if parameter is None:
                continue
            if id(parameter) not in memo:
                memo[id(parameter)] = nn.Parameter(parameter.detach().to(dtype), requires_grad=parameter.requires_grad)
            module._parameters[name] = memo[id(parameter)]
        for name, buffer in list(module._buffers.items()):
            if buffer is not None and buffer.is_floating_point():
                module._buffers[name] = buffer.to(dtype)


def _find_packed_sequence_indices_unpacked(position_ids: torch.Tensor) -> None:
    """``transformers.masking_utils.find_packed_sequence_indices`` for batches known to be unpacked.

    The same operations (so the same transient bytes), without reading the answer: transformers
    treats a FakeTensor as tracing and keeps the packed-sequence mask, which then makes it build an
    explicit causal mask and repeat K and V for sdpa. Real token ids at 0, 1, ..., s - 1 in every
    row make the function return None, and the mask is skipped.
    """
    first_dummy_value = position_ids[:, :1] - 1
    position_diff = torch.diff(position_ids, prepend=first_dummy_value, dim=-1)
    packed_sequence_mask = (position_diff != 1).cumsum(-1)
    (packed_sequence_mask[:, -1] == 0).all()
    return None


@contextlib.contextmanager
def _real_tensor_paths(fake: bool) -> Iterator[None]:
    """Under fake tensors, the code paths transformers takes with real, unpacked token ids."""
    if not fake:
        yield
        return
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = _find_packed_sequence_indices_unpacked
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def build_model(case: TimelineCase, *, in_dtype: bool = False) -> tuple[nn.Module, dict]:
    """The model in training mode, and the config dict it was built from (for the prediction).
    `in_dtype`: built in the parameters' dtype rather than in fp32 and cast (the same parameters and
    buffers, without the fp32 copy: on a GPU, Mixtral's 46.7 billion would not fit in fp32)."""
    config = case.config()
    torch.manual_seed(0)
    dtype = {"dtype": PARAM_DTYPES[case.precision]} if in_dtype else {}
    model = auto_class(config).from_config(config, attn_implementation=case.attention, **dtype)
    dtype = PARAM_DTYPES[case.precision]
    if dtype != torch.float32:
        if case.fake:
            _cast(model, dtype)
        else:
            model.to(dtype)
    if case.lora_rank:
        from peft import LoraConfig, get_peft_model

        targets = "all-linear" if case.lora_targets == ("all-linear",) else list(case.lora_targets)
        model = get_peft_model(model, LoraConfig(r=case.lora_rank, lora_alpha=2 * case.lora_rank,
                                                 target_modules=targets, lora_dropout=case.lora_dropout))
    if case.fp8 == "torchao":
        from torchao.float8 import convert_to_float8_training

        # torchtitan's recipe: every linear layer of the decoder layers, the output layer left in 16 bits
        convert_to_float8_training(model, module_filter_fn=lambda module, fqn: fqn != "lm_head")
    model.train()
    if case.checkpointing == "full":
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable({"use_reentrant": True}) if case.use_reentrant else enable()
        # Each decoder layer is a GradientCheckpointingLayer: it checkpoints its forward only while its own
        # `gradient_checkpointing` flag is set (transformers/modeling_layers.py), so a layer left out keeps everything.
        layers = decoder_layers(model)
        for layer, recomputed in zip(layers, case.recomputed_layers(len(layers)), strict=True):
            layer.gradient_checkpointing = recomputed
    return model, config.to_dict()


def _autocast(precision: str, device_type: str = "cpu"):
    if precision.startswith("autocast"):
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_two_steps(model: nn.Module, optimizer: torch.optim.Optimizer, timeline: Timeline, case: TimelineCase) -> None:
    """Two optimizer steps, each over `case.accumulation` micro-batches, written as a training loop is.

    Each micro-batch's token ids are made just before its forward, as a data loader hands them
    over, and serve as the labels too. "plain": ``outputs = model(...)`` in the loop body, so the
    output (the logits with it) stays bound until the next forward returns and replaces it: through
    backward, the optimizer step, and the next step's forward. "hf-trainer": only the loss is kept;
    the output, logits included, is dropped before backward, as ``transformers.Trainer.compute_loss``
    returns the loss alone.
    """
    vocab = model.config.vocab_size
    generator = None if case.fake else torch.Generator().manual_seed(1)

    def compute_loss(ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        outputs = model(input_ids=ids, labels=labels, use_cache=False)
        return outputs["loss"]

    outputs = loss = ids = labels = None
    for number in (1, 2):
        timeline.begin_step(number)
        for _ in range(case.accumulation):
            ids = torch.randint(0, vocab, (case.batch, case.seq), generator=generator)
            labels = labels_for(model.config, ids, generator)  # a classifier's: one class per sequence
            timeline.tracker.set_role(ids, INPUTS)
            timeline.tracker.set_role(labels, INPUTS)
            with _autocast(case.precision, ids.device.type):
                if case.loop == "plain":
                    outputs = model(input_ids=ids, labels=labels, use_cache=False)
                    loss = outputs.loss
                else:
                    loss = compute_loss(ids, labels)
            (loss / case.accumulation if case.accumulation > 1 else loss).backward()
            timeline.end_micro_batch()
        optimizer.step()
        timeline.close("optimizer.step", then="zero_grad")
        optimizer.zero_grad(set_to_none=True)
        timeline.close("zero_grad")
    del outputs, loss, ids, labels


@dataclass
class Measurement:
    case: TimelineCase
    config: dict
    points: list[Point]
    baseline: int  # bytes alive when tracking started: parameters and buffers
    end_live: int  # bytes alive when the second step has returned
    storages: list[StorageInfo]
    seconds: float
    tracker: StorageTracker | None = None
    profiler: object = None  # the torch.profiler.profile the steps ran under, if any
    start_index: int = 0  # where the steps begin in the tracker's log

    def peak(self, step: int | None = None) -> Point:
        """The point whose interval holds the highest bytes (of one step, or of both); the first such."""
        points = [p for p in self.points if step is None or p.step == step]
        return max(points, key=lambda p: p.peak)  # max keeps the first of equals

    def peak_storages(self, step: int, top: int = 12) -> list[dict]:
        """The largest storages alive at a step's peak, with what made them."""
        return self.storages_at(self.peak(step), top)

    def storages_at(self, point: Point, top: int = 12, *, at_peak: bool = True) -> list[dict]:
        """The largest storages alive at a point's interval peak (or when it ended), with what made them."""
        if self.tracker is None:
            return []
        alive = self.tracker.live_uids(point.peak_index if at_peak else point.live_index)
        largest = sorted(alive, key=lambda uid: -self.tracker.infos[uid].nbytes)[:top]
        return [self._describe(uid) for uid in largest]

    def brief_storages(self, point: Point, *, min_bytes: int = 2**20, top: int = 6) -> list[dict]:
        """The storages alive at a point's interval peak but not when it ended (the interval's
        transients), largest first."""
        if self.tracker is None:
            return []
        infos = self.tracker.infos
        brief = self.tracker.live_uids(point.peak_index) - self.tracker.live_uids(point.live_index)
        largest = sorted((uid for uid in brief if infos[uid].nbytes >= min_bytes), key=lambda uid: -infos[uid].nbytes)
        return [self._describe(uid) for uid in largest[:top]]

    def _describe(self, uid: int) -> dict:
        info = self.tracker.infos[uid]
        return {"bytes": info.nbytes, "category": info.category, "dtype": info.dtype, "shape": list(info.shape),
                "op": info.op, "made_during": info.made_during}

    def as_dict(self, *, top: int = 12) -> dict:
        steps = {}
        for step in (1, 2):
            peak = self.peak(step)
            steps[str(step)] = {
                "peak": {"bytes": peak.peak, "event": peak.event, "breakdown": peak.peak_breakdown},
                "largest_storages_at_peak": self.peak_storages(step, top),
                "points": [p.as_dict() for p in self.points if p.step == step],
            }
        overall = self.peak()
        return {
            "case": self.case.as_dict(),
            "peak": {"bytes": overall.peak, "event": overall.event, "step": overall.step,
                     "breakdown": overall.peak_breakdown},
            "baseline_bytes": self.baseline,
            "seconds": round(self.seconds, 2),
            "steps": steps,
        }


def measure(case: TimelineCase, *, profile: Callable[[], contextlib.AbstractContextManager] | None = None,
            keep_tracker: bool = True) -> Measurement:
    """Builds the model, runs two steps under the tracker (and `profile`, if given) and returns the points."""
    started = time.monotonic()
    fake_mode = FakeTensorMode() if case.fake else contextlib.nullcontext()
    with fake_mode, _real_tensor_paths(case.fake):
        model, config = build_model(case)
        optimizer = make_optimizer(model.parameters(), case.optimizer, case.implementation)
        tracker = StorageTracker()
        timeline = Timeline(tracker, model, optimizer, accumulation=case.accumulation)
        with tracker:
            for parameter in model.parameters():
                tracker.track(parameter, op="parameter", role=WEIGHTS)
            for buffer in model.buffers():
                tracker.track(buffer, op="buffer", role=BUFFERS)
            baseline = tracker.live
            start_index = len(tracker.log)
            tracker.reset_interval()
            with timeline.hooks(), (profile() if profile is not None else contextlib.nullcontext()) as profiler:
                train_two_steps(model, optimizer, timeline, case)
                end_live = tracker.live
        timeline.finish()
        measurement = Measurement(case, config, timeline.points, baseline, end_live, tracker.infos,
                                  time.monotonic() - started, tracker if keep_tracker else None, profiler, start_index)
        del model, optimizer
    return measurement


def memtracker_peak(case: TimelineCase) -> int:
    """The peak of the same two steps as ``torch.distributed._tools.mem_tracker.MemTracker`` counts it.

    A second count by torch's own storage tracker (it registers the parameters, buffers and optimizer
    state through `track_external` and every operation's outputs through its dispatch mode). It
    keeps per-module statistics that it cannot carry across iterations, so they are cleared at each
    step start (`reset_mod_stats`); its overall peak is kept. One micro-batch per step only.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    if case.accumulation != 1:
        raise ValueError("MemTracker's module statistics do not allow two forwards in one step")
    fake_mode = FakeTensorMode() if case.fake else contextlib.nullcontext()
    with fake_mode, _real_tensor_paths(case.fake):
        model, _ = build_model(case)
        optimizer = make_optimizer(model.parameters(), case.optimizer, case.implementation)
        tracker = MemTracker()
        tracker.track_external(model, optimizer)

        class Steps(Timeline):
            def begin_step(self, step: int) -> None:
                tracker.reset_mod_stats()
                super().begin_step(step)

        with tracker:
            train_two_steps(model, optimizer, Steps(StorageTracker(), model, optimizer, accumulation=1), case)
        snapshot = tracker.get_tracker_snapshot("peak")
        return sum(device["Total"] for device in snapshot.values())


# --- the CPU allocator's own record ----------------------------------------------------------------


@dataclass(frozen=True)
class AllocatorRecord:
    """What the CPU allocator reported to the profiler: every allocation and free, in time order.

    ``outlives[i]`` says whether allocation i was made inside an operation the dispatch mode ran
    and was still alive when that operation returned: an operation's output, which the tracker
    must see. The rest are buffers a kernel made for itself and freed before returning, and
    allocations made outside any operation the mode ran (the argument parser's 0-d tensors for
    Python numbers, the RNG state `torch.utils.checkpoint` stores per checkpointed layer).
    """

    sizes: tuple[int, ...]  # signed bytes
    totals: tuple[int, ...]  # the allocator's running total after each, from 0 when the profile started
    ptrs: tuple[int, ...]
    ops: tuple[str, ...]  # the innermost operation each happened in ("" outside any)
    outlives: tuple[bool, ...]  # for allocations (and for frees: whether the freed allocation did)

    @property
    def peak(self) -> int:
        return max(self.totals, default=0)

    @property
    def final(self) -> int:
        return self.totals[-1] if self.totals else 0

    def outliving_totals(self) -> Iterator[int]:
        """The running total of the allocations that outlive their operation."""
        total = 0
        for size, outlives in zip(self.sizes, self.outlives, strict=True):
            if outlives:
                total += size
            yield total

    def others_at_peak(self) -> list[tuple[str, int]]:
        """The other allocations alive at the allocator's peak: (operation, bytes), largest first."""
        alive: dict[int, tuple[str, int]] = {}
        best, at_best = -1, []
        for size, total, ptr, op, outlives in zip(self.sizes, self.totals, self.ptrs, self.ops, self.outlives,
                                                  strict=True):
            if not outlives:
                if size > 0:
                    alive[ptr] = (op or "outside any operation", size)
                else:
                    alive.pop(ptr, None)
            if total > best:
                best, at_best = total, sorted(alive.values(), key=lambda item: -item[1])
        return at_best


def allocator_record(profiler: torch.profiler.profile, constructed: frozenset[int] = frozenset()) -> AllocatorRecord:
    """The ``[memory]`` events of a ``profile(profile_memory=True)`` run, read from its event tree.

    ``total_allocated`` is ``c10::ProfiledCPUMemoryReporter``'s running sum
    (``c10/core/CPUAllocator.cpp``) of allocations made while memory profiling is on. A Python
    dispatch mode's call shows in the tree as a ``PythonDispatchMode`` event
    (``torch/csrc/autograd/python_variable.cpp``), with the operation it runs inside it.

    `constructed`: addresses of tensors built by a Python constructor such as ``torch.tensor``
    (the optimizers' step counters), which allocates before dispatch and hands the tensor to the
    mode through ``aten.lift_fresh``; they count as outliving.
    """
    from torch._C._profiler import _EventType

    events = []  # (time, order, size, total, ptr, op, end of the enclosing PythonDispatchMode or None)

    def walk(event, op: str, mode_end: int | None) -> None:
        if event.tag == _EventType.Allocation:
            extra = event.extra_fields
            if extra.device.type == "cpu":
                events.append((event.start_time_ns, len(events), extra.alloc_size, extra.total_allocated, extra.ptr,
                               op, mode_end))
        if event.tag == _EventType.TorchOp:
            op = event.name
            if event.name == "PythonDispatchMode":
                mode_end = event.end_time_ns
        for child in event.children:
            walk(child, op, mode_end)

    for root in profiler.profiler.kineto_results.experimental_event_tree():
        walk(root, "", None)
    events.sort()
    outlives: list[bool] = []
    pending: dict[int, int] = {}  # ptr -> index of its live allocation
    for index, (when, _, size, _, ptr, _, mode_end) in enumerate(events):
        if size > 0:
            outlives.append(mode_end is not None or ptr in constructed)
            pending[ptr] = index
        else:
            made = pending.pop(ptr, None)
            if made is None:
                outlives.append(False)
                continue
            if outlives[made] and events[made][6] is not None and when < events[made][6]:
                outlives[made] = False  # freed before its operation returned: the kernel's own buffer
            outlives.append(outlives[made])
    # The reporter's sum is not reset between profiles: bytes allocated under an earlier profile and
    # freed after it ended were never subtracted. Counting from the total before the first event
    # removes that carried-over constant.
    start = events[0][3] - events[0][2] if events else 0
    return AllocatorRecord(tuple(e[2] for e in events), tuple(e[3] - start for e in events),
                           tuple(e[4] for e in events), tuple(e[5] for e in events), tuple(outlives))


@dataclass(frozen=True)
class CrossCheck:
    """The tracker's record against the allocator's, both counted from the start of the profile.

    ``allocator_outliving_peak`` is the allocator's peak over allocations that outlive the
    operation that made them: what the tracker must report, to the byte. ``others_at_peak`` are
    the other allocations alive at the allocator's own peak, as (operation, bytes).
    """

    tracker_peak: int
    allocator_peak: int
    allocator_outliving_peak: int
    tracker_final: int
    allocator_final: int
    others_at_peak: tuple[tuple[str, int], ...]

    @property
    def agrees(self) -> bool:
        return self.tracker_peak == self.allocator_outliving_peak and self.tracker_final == self.allocator_final


def cross_check(case: TimelineCase) -> tuple[Measurement, CrossCheck]:
    """Runs `case` on real CPU tensors under the tracker and the profiler, and compares the two records.

    The profiler's total starts at 0 when profiling starts; the tracker's equivalent is its live
    bytes minus those alive at that moment (parameters, buffers, token ids: made before, and known
    to the tracker as its baseline).
    """
    if case.fake:
        raise ValueError("the allocator record needs real tensors")
    gc.collect()  # nothing left over from an earlier run may be freed while this one is profiled

    def profile():
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)

    measured = measure(case, profile=profile)
    tracker = measured.tracker
    constructed = frozenset(tracker.data_ptrs[info.uid] for info in tracker.infos
                            if info.op == str(torch.ops.aten.lift_fresh.default) and info.uid in tracker.data_ptrs)
    record = allocator_record(measured.profiler, constructed)
    check = CrossCheck(
        tracker_peak=max(p.peak for p in measured.points) - measured.baseline,
        allocator_peak=record.peak,
        allocator_outliving_peak=max(record.outliving_totals(), default=0),
        tracker_final=measured.end_live - measured.baseline,
        allocator_final=record.final,
        others_at_peak=tuple(record.others_at_peak()),
    )
    return measured, check


# --- the sweep ---------------------------------------------------------------------------------------


def real_size_cases(seq: int = 4096) -> list[TimelineCase]:
    """The real-size sweep, per family: a base case (bf16, foreach AdamW, sdpa, plain loop, one
    micro-batch) and variants that each change what decides the peak: the precision, the optimizer
    and its implementation (with fp32 weights too, where the optimizer step is the peak), eager
    attention, the loop, full recomputation and gradient accumulation."""
    cases: list[TimelineCase] = []
    for family in SWEEP_FAMILIES:
        family_seq = min(seq, 1024) if family == "gpt2-xl" else seq  # GPT-2 has 1,024 positions
        base = TimelineCase(family, seq=family_seq)
        fp32 = replace(base, precision="fp32")
        cases += [
            base,
            replace(base, implementation="fused"),
            replace(base, implementation="for-loop"),
            replace(base, optimizer="sgd-momentum"),
            fp32,
            replace(fp32, implementation="fused"),
            replace(fp32, implementation="for-loop"),
            replace(fp32, optimizer="sgd-momentum"),
            replace(base, precision="autocast-bf16"),
            replace(base, attention="eager"),
            replace(base, loop="hf-trainer"),
            replace(base, checkpointing="full"),
            replace(base, accumulation=2),
            replace(base, precision="autocast-bf16", checkpointing="full", accumulation=2, loop="hf-trainer"),
        ]
    return cases


# Small models run on real tensors under the profiler, the allocator's record beside the tracker's:
# every precision, optimizer implementation, attention, loop and recomputation setting at least once.
_GQA = Size(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=176, vocab=509)
_MHA = Size(hidden=64, layers=2, heads=4, kv_heads=4, intermediate=176, vocab=509)
ALLOCATOR_CASES = (
    TimelineCase("llama", size=_GQA, batch=2, seq=32, precision="fp32"),
    TimelineCase("llama", size=_GQA, batch=2, seq=32, precision="bf16", implementation="fused", attention="eager",
                 accumulation=2, loop="hf-trainer"),
    TimelineCase("gpt2", size=_MHA, batch=2, seq=32, precision="autocast-bf16", optimizer="sgd-momentum",
                 checkpointing="full", accumulation=2),
    TimelineCase("gpt2", size=_MHA, batch=2, seq=32, precision="bf16", implementation="for-loop", attention="eager",
                 loop="hf-trainer"),
)


def _memtracker_case(case: TimelineCase) -> bool:
    """Where the sweep also runs MemTracker (slow: it copies per-module snapshots at every operation):
    each family's base case, in fp32 too, and with the hf-trainer loop."""
    base = TimelineCase(case.family, seq=case.seq)
    return case in (base, replace(base, precision="fp32"), replace(base, loop="hf-trainer"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.timeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=4096, help="tokens per micro-batch (GPT-2 XL: at most 1,024)")
    parser.add_argument("--family", action="append", choices=sorted(SWEEP_FAMILIES), help="only these families")
    parser.add_argument("--out", type=Path, default=DOCS,
                        help="where timeline.json and the charts go, and whose VALIDATION.md and validation.json "
                             "get the peak section (default: docs/)")
    args = parser.parse_args(argv)
    from validation import peak, report, svg

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    started = time.monotonic()
    checks = []
    for case in ALLOCATOR_CASES:
        _, check = cross_check(case)
        checks.append({"label": case.label, **asdict(check)})
        print(f"allocator check {case.label}: tracker {check.tracker_peak:,} B, allocator {check.allocator_peak:,} B "
              f"({check.allocator_outliving_peak:,} B outliving their operation)", file=sys.stderr)
    rows = []
    for case in real_size_cases(args.seq):
        if args.family and case.family not in args.family:
            continue
        row = peak.run(case)
        if _memtracker_case(case):
            row = replace(row, memtracker=memtracker_peak(case))
        rows.append(row)
        print(f"{case.label}: predicted {row.predicted:,} B ({row.predicted_event}, step {row.predicted_step}), "
              f"measured {row.measured:,} B ({row.measured_event}, step {row.measured_step}): "
              f"{row.error_pct:+.4f}% ({row.seconds:.1f} s)", file=sys.stderr)
    data = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "FakeTensorMode",
            "target_pct": peak.PEAK_TARGET_PCT, "summary": report.peak_summary([r.as_dict(events=False) for r in rows]),
            "allocator_cross_check": checks, "cases": [row.as_dict() for row in rows]}
    args.out.mkdir(parents=True, exist_ok=True)
    cases_text = ",\n".join("  " + json.dumps(case, separators=(",", ":")) for case in data["cases"])
    head = {key: value for key, value in data.items() if key != "cases"}
    (args.out / report.TIMELINE_FILE).write_text(json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n' + cases_text
                                                 + "\n ]\n}\n")
    drawn = set()
    for row in rows:
        if row.family not in drawn:
            drawn.add(row.family)
            (args.out / report.chart_file(row.family)).write_text(svg.chart(row))
    report.write_peak_report(data, args.out)
    print(f"{len(rows)} cases in {time.monotonic() - started:.1f} s -> {args.out}", file=sys.stderr)
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
