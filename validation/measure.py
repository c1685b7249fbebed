"""Measurements from real PyTorch training steps: bytes read off the tensors themselves.

Activations are the distinct storages that autograd keeps for the backward pass. Every tensor an
operation saves passes through `torch.autograd.graph.saved_tensors_hooks`; the recorder notes its
storage (``untyped_storage()``, so a view counts its whole storage once) and the region whose
forward was running when it was saved: the embedding (before the first decoder layer), one decoder
layer, or the head (after the last layer: final norm, output layer and loss). A storage is counted
once, in the first region that saved it; a storage saved by more than one layer (Llama's rotary
cos and sin, computed once per forward) is model-level and is counted with the embedding, which is
where trainmem places it.

Saved storages that are not activations are reported apart:

* parameters, which matmuls and norms save by reference (no extra memory);
* autocast's half-precision casts of parameters, which trainmem models as a temporary
  (`app.core.memory.autocast_weight_copies_bytes`), identified through autograd: the saved tensor
  (or the base of the saved view) is the output of a ``ToCopyBackward0`` whose input is a leaf
  parameter;
* 0-d scalars that some operations keep (a Python-float multiplier wrapped as a 0-d tensor, the
  loss's 0-d ``total_weight``): a few bytes each, reported in their own column.

Under full activation checkpointing (`torch.utils.checkpoint`, non-reentrant, as transformers
uses it) the checkpoint saves the layer's positional inputs through the same hooks; the keyword
arguments it closes over for the recomputation (rotary cos/sin, the attention mask) stay alive
until backward too, so the recorder wraps the layer's checkpoint function and notes them as well.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from app import core
from app.core import activations as act
from app.core.architecture import Architecture

EMBEDDING = "embedding"
HEAD = "head"

# Kinds of saved storage.
ACTIVATION = "activation"
PARAMETER = "parameter"
AUTOCAST_WEIGHT = "autocast_weight"
SCALAR = "scalar"

# Who noted a storage: autograd's pack hook, or a checkpoint's closure (its keyword arguments).
CLOSURE = "checkpoint closure"


@dataclass(frozen=True)
class SavedStorage:
    """One distinct storage kept for backward."""

    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    region: str
    kind: str
    saved_by: str


@dataclass
class ActivationMeasurement:
    layers: list[int]
    embedding: int
    head: int
    autocast_weight_copies: int  # kept from forward to backward, plus one layer's recomputed casts
    scalars: int
    storages: list[SavedStorage]
    logits: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.embedding + sum(self.layers) + self.head


def _layer_name(index: int) -> str:
    return f"layer{index}"


def _autocast_parameter_cast(tensor: torch.Tensor) -> bool:
    """Whether `tensor` (or the tensor it views) is a dtype cast of a leaf parameter made in this forward."""
    base = tensor._base if tensor._base is not None else tensor
    fn = base.grad_fn
    while fn is not None and fn.name() in ("TBackward0", "ViewBackward0", "TransposeBackward0"):
        fn = fn.next_functions[0][0]
    if fn is None or fn.name() != "ToCopyBackward0":
        return False
    source = fn.next_functions[0][0]
    return source is not None and isinstance(getattr(source, "variable", None), nn.Parameter)


class SavedTensorRecorder:
    """Attributes every storage saved for backward to the region whose forward was running."""

    def __init__(self, model: nn.Module, layers: nn.ModuleList) -> None:
        self.model = model
        self.layers = layers
        self.region = EMBEDDING
        self.first: dict[int, SavedStorage] = {}
        self.regions: dict[int, set[str]] = defaultdict(set)
        self.keep: list[torch.Tensor] = []  # keeps every noted storage alive, so its address stays unique
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.handles: list = []

    def _note(self, tensor: torch.Tensor, saved_by: str) -> None:
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            return
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        self.regions[ptr].add(self.region)
        if ptr in self.first:
            return
        if ptr in self.param_ptrs:
            kind = PARAMETER
        elif _autocast_parameter_cast(tensor):
            kind = AUTOCAST_WEIGHT
        elif tensor.dim() == 0:
            kind = SCALAR
        else:
            kind = ACTIVATION
        self.first[ptr] = SavedStorage(
            storage.nbytes(), tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), self.region, kind, saved_by
        )
        self.keep.append(tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self._note(tensor, "autograd")
        return tensor

    def _enter(self, name: str):
        def hook(*_args, **_kwargs):
            self.region = name

        return hook

    def _wrap_checkpoint(self, layer: nn.Module) -> None:
        inner = getattr(layer, "_gradient_checkpointing_func", None)
        if inner is None:
            return

        def checkpoint_func(function, *args, **kwargs):
            for value in getattr(function, "keywords", {}).values():
                if isinstance(value, torch.Tensor):
                    self._note(value, CLOSURE)
                elif isinstance(value, tuple | list):
                    for item in value:
                        if isinstance(item, torch.Tensor):
                            self._note(item, CLOSURE)
            return inner(function, *args, **kwargs)

        layer._gradient_checkpointing_func = checkpoint_func
        self.handles.append(("checkpoint", layer, inner))

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            after = HEAD if index == last else f"between{index}"
            self.handles.append(layer.register_forward_pre_hook(self._enter(_layer_name(index))))
            self.handles.append(layer.register_forward_hook(self._enter(after)))
            self._wrap_checkpoint(layer)
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor):
                yield
        finally:
            for handle in self.handles:
                if isinstance(handle, tuple):
                    _, layer, inner = handle
                    layer._gradient_checkpointing_func = inner
                else:
                    handle.remove()
            self.handles.clear()

    def measurement(self) -> ActivationMeasurement:
        layers = [0] * len(self.layers)
        embedding = head = weight_copies = scalars = 0
        storages = []
        for ptr, saved in self.first.items():
            regions = self.regions[ptr]
            shared = sum(region.startswith("layer") for region in regions) > 1
            region = EMBEDDING if shared else saved.region
            saved = SavedStorage(saved.nbytes, saved.shape, saved.dtype, region, saved.kind, saved.saved_by)
            storages.append(saved)
            if saved.kind == PARAMETER:
                continue
            if saved.kind == AUTOCAST_WEIGHT:
                weight_copies += saved.nbytes
            elif saved.kind == SCALAR:
                scalars += saved.nbytes
            elif region.startswith("layer"):
                layers[int(region.removeprefix("layer"))] += saved.nbytes
            elif region == HEAD:
                head += saved.nbytes
            else:  # the embedding, model-level shared storages, anything between layers
                embedding += saved.nbytes
        return ActivationMeasurement(layers, embedding, head, weight_copies, scalars, storages)


class LogitsBuffers(TorchDispatchMode):
    """Records the bytes of the tokens x vocabulary buffers the loss's forward and backward allocate.

    In forward: the logits (the output layer's matmul) and their fp32 upcast when they are not fp32.
    In backward: the fp32 gradient nll_loss writes for the log-probabilities, the fp32 gradient
    log_softmax's backward writes for the logits, and the cast of that gradient back to the logits'
    dtype when they are not fp32. CPU backward runs on the calling thread, so the mode sees it.
    """

    NAMES = {
        "aten.nll_loss_backward.default": "grad_log_probs",
        "aten._log_softmax_backward_data.default": "grad_logits",
    }

    def __init__(self, elements: int) -> None:
        super().__init__()
        self.elements = elements
        self.buffers: dict[str, int] = {}
        self.backward = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel() == self.elements:
            name = self.NAMES.get(str(func))
            if name is None and str(func) in ("aten._to_copy.default", "aten.to.dtype"):
                name = "grad_logits_cast" if self.backward else "logits_fp32_upcast"
            if name is None and str(func) in ("aten.mm.default", "aten.addmm.default") and not self.backward:
                name = "logits"
            if name is not None and name not in self.buffers:
                self.buffers[name] = out.untyped_storage().nbytes()
        return out


class RecomputedParameterCasts(TorchDispatchMode):
    """In backward: the half-precision casts of parameters that recomputation makes, per layer.

    Under full recomputation with autocast, each layer's recomputed forward casts that layer's
    weights again; those copies live until the layer's backward is done. The mode notes the bytes
    of every cast of a weight matrix, by the layer that owns it. Casts of 1-D parameters are left
    out: a bias is addmm's first operand, which addmm does not keep (its gradient is a sum over
    tokens), and a norm weight is cast by Gemma's ``1.0 + weight.float()``, whose sum is what the
    multiply keeps; such casts die with autocast's cache at the end of the recomputed forward.
    """

    def __init__(self, model: nn.Module, layers: nn.ModuleList) -> None:
        super().__init__()
        self.owner = {
            parameter.untyped_storage().data_ptr(): index
            for index, layer in enumerate(layers)
            for parameter in layer.parameters()
            if parameter.dim() >= 2
        }
        self.casts: dict[int, dict[int, int]] = defaultdict(dict)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func) == "aten._to_copy.default" and isinstance(args[0], torch.Tensor):
            ptr = args[0].untyped_storage().data_ptr()
            if ptr in self.owner and out.dtype != args[0].dtype:
                self.casts[self.owner[ptr]][ptr] = out.untyped_storage().nbytes()
        return out

    def one_layer_peak(self) -> int:
        """The most cast bytes of any one layer (the layers are recomputed one at a time)."""
        return max((sum(casts.values()) for casts in self.casts.values()), default=0)


# --- model states -----------------------------------------------------------------------------------


def _distinct_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


@dataclass(frozen=True)
class ModelStates:
    weights_bytes: int
    gradients_bytes: int
    master_weights_bytes: int
    optimizer_states_bytes: int


def model_states(model: nn.Module, optimizer: torch.optim.Optimizer) -> ModelStates:
    """Bytes of parameters, gradients and optimizer state, from the tensors after optimizer.step().

    Distinct storages only (tied embeddings are one tensor). The optimizer's 0-d ``step`` counters
    are left out, as trainmem leaves them out: torch keeps them as 0-d fp32 tensors on the host
    unless ``capturable`` or ``fused`` is set. Plain PyTorch keeps no master copy: the optimizer
    updates the parameters in place, whatever their dtype.
    """
    params = list(model.parameters())
    state_tensors = [
        value
        for state in optimizer.state.values()
        for name, value in state.items()
        if isinstance(value, torch.Tensor) and not (name == "step" and value.dim() == 0)
    ]
    return ModelStates(
        weights_bytes=_distinct_bytes(params),
        gradients_bytes=_distinct_bytes(p.grad for p in params),
        master_weights_bytes=0,
        optimizer_states_bytes=_distinct_bytes(state_tensors),
    )


def measured_parts(build: Callable[[], nn.Module], *, dtype: torch.dtype, vocab: int, batch: int,
                   seq: int, autocast: bool = False,
                   layers_of: Callable[[nn.Module], nn.ModuleList] | None = None,
                   labels_of: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict[str, object]:
    """A model's parameter count and the bytes autograd keeps for backward in each layer, the embedding and the
    head, for one forward with its token ids as labels, or what `labels_of` makes of them (a classifier's one class
    per sequence) (the model built after seeding, in `dtype`, in training mode, its layers at ``model.model.layers``
    unless `layers_of` finds them).

    With `autocast` the forward runs under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (as validation/cases.py
    runs the dense autocast cases; give `dtype` fp32), and the answer adds ``weight_copies``: the bytes of
    autocast's casts of parameters that autograd keeps (kind AUTOCAST_WEIGHT), per layer and for the head, which
    trainmem counts apart from the activations (the ledger's autocast terms)."""
    torch.manual_seed(0)
    model = build().to(dtype)
    model.train()
    recorder = SavedTensorRecorder(model, layers_of(model) if layers_of else model.model.layers)
    ids = torch.randint(0, vocab, (batch, seq))
    labels = labels_of(ids) if labels_of else ids
    region = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with recorder.recording(), region:
        out = model(input_ids=ids, labels=labels)
    saved = recorder.measurement()
    out.loss.backward()
    layers, head = list(saved.layers), saved.head
    if not autocast:
        # Without autocast a kept cast of a parameter is one the model makes itself (DeepSeek's routers run their
        # linear on an fp32 cast of the weight; Cohere's LayerNorms multiply by one, the final norm's too): a tensor
        # the layer or the head keeps like any other.
        for storage in saved.storages:
            if storage.kind == AUTOCAST_WEIGHT and storage.region.startswith("layer"):
                layers[int(storage.region.removeprefix("layer"))] += storage.nbytes
            elif storage.kind == AUTOCAST_WEIGHT and storage.region == HEAD:
                head += storage.nbytes
    parts: dict[str, object] = {"params": sum(p.numel() for p in model.parameters()), "layers": layers,
                                "embedding": saved.embedding, "head": head}
    if autocast:
        copies = defaultdict(int)
        for storage in saved.storages:
            if storage.kind == AUTOCAST_WEIGHT:
                copies[storage.region] += storage.nbytes
        parts["weight_copies"] = {"layers": [copies[_layer_name(index)] for index in range(len(saved.layers))],
                                  "head": copies[HEAD]}
    return parts


def predicted_parts(arch: Architecture, setup: act.ActivationSetup, layers: list[int], *,
                    weight_copies: dict[str, object] | None = None) -> dict[str, object]:
    """trainmem's side of `measured_parts`: the count, the given per-layer bytes, the embedding's and the head's
    (and the given ``weight_copies``, for a measurement under autocast)."""
    parts: dict[str, object] = {"params": core.param_count(arch), "layers": layers,
                                "embedding": act.total_bytes(act.embedding_activations(arch, setup)),
                                "head": act.total_bytes(act.head_activations(arch, setup))}
    if weight_copies is not None:
        parts["weight_copies"] = weight_copies
    return parts
