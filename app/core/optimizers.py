"""Optimizer state in bytes, from the parameter tensors' real shapes.

Per-tensor step counters are not counted: torch.optim keeps them as 0-d fp32 tensors on the host
unless ``capturable`` or ``fused`` is set (torch/optim/adam.py, ``_init_group``), and
bitsandbytes keeps them as Python integers, so they take no GPU memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from app.core.errors import DomainError
from app.core.units import ceil_div, tensor_bytes

# bitsandbytes 8-bit optimizers (Dettmers et al. 2021, arXiv:2110.02861): tensors with fewer than
# `min_8bit_size` elements keep fp32 states; larger ones keep uint8 states with one fp32 absmax
# per block of 256 elements for each state (bitsandbytes/optim/optimizer.py, Optimizer2State.init_state,
# `blocksize = 256`, default `min_8bit_size=4096`).
BNB_MIN_8BIT_SIZE: Final = 4096
BNB_BLOCK_SIZE: Final = 256
BNB_STATE_BITS: Final = 8
BNB_ABSMAX_BITS: Final = 32
FP32_BITS: Final = 32
# Paged optimizers (bitsandbytes' is_paged=True; transformers' optim names with "paged"): a state tensor of at least
# 100,000 elements is allocated in CUDA unified memory (Optimizer8bit.get_state_buffer: ``p.numel() < 1e5`` keeps a
# plain torch.zeros_like, else F.get_paged, which calls cudaMallocManaged; bitsandbytes 95f9af3,
# bitsandbytes/optim/optimizer.py lines 374-390, bitsandbytes/functional.py lines 91-99). The driver moves those pages
# to host memory when the GPU runs short and back when the optimizer step touches them (Dettmers et al. 2023,
# arXiv:2305.14314, section 3, "Paged Optimizers"). The block scales stay plain tensors (lines 528-529).
BNB_PAGED_MIN_ELEMENTS: Final = 100_000


@dataclass(frozen=True)
class Scratch:
    """What optimizer.step() allocates for itself, in the optimizer state's dtype.

    ``copies`` copies of either every parameter on the GPU (``of="all"``) or of its largest tensor
    (``of="largest"``, for implementations that loop over tensors one at a time).
    """

    copies: int
    of: Literal["all", "largest"]
    source: str

    def elements(self, *, param_elements: int, largest_elements: int) -> int:
        return self.copies * (param_elements if self.of == "all" else largest_elements)

    def formula(self, *, param_elements: int, largest_elements: int, bits: int) -> str:
        if not self.copies:
            return "0"
        what = f"{param_elements:,} params" if self.of == "all" else f"the largest tensor's {largest_elements:,} elements"
        copies = f"{self.copies} × " if self.copies > 1 else ""
        return f"{copies}{what} × {bits} bit ÷ 8"


NO_SCRATCH_IN_PLACE: Final = "updates states and weights in place"


def _none(source: str) -> Scratch:
    return Scratch(0, "all", source)


@dataclass(frozen=True)
class OptimizerInfo:
    """One optimizer: its id, name, what it keeps, its state's formula, and each implementation's scratch."""

    id: str
    name: str
    states: str
    label: str
    scratch: dict[str, Scratch]
    formula: Callable[[str, int, bool], str]  # (share, state bits, Adafactor momentum) -> the state's formula
    states_per_element: int | None = None  # state elements per parameter when shapes do not matter
    numerics: str = ""  # what choosing it changes in the arithmetic of training, beside the memory
    paged: bool = False  # its large states live in CUDA unified memory (BNB_PAGED_MIN_ELEMENTS)

def _two_moments(share: str, bits: int, momentum: bool) -> str:
    return f"{share} × 2 × {bits} bit ÷ 8"


def _one_moment(share: str, bits: int, momentum: bool) -> str:
    return f"{share} × {bits} bit ÷ 8"


def _factored(share: str, bits: int, momentum: bool) -> str:
    first = f" + {share} × {bits} bit ÷ 8 (momentum)" if momentum else ""
    return f"Σ over matrices (rows + columns) + Σ over vectors (length), × {bits} bit ÷ 8{first}"


OPTIMIZER_IMPLEMENTATIONS: Final[dict[str, str]] = {
    "foreach": "torch's default on CUDA: one kernel over all tensors at once (torch/optim/*.py, _multi_tensor_*)",
    "fused": "one fused kernel per group that updates in place (fused=True)",
    "for-loop": "one tensor at a time (foreach=False, _single_tensor_*)",
}

_ADAM_SCRATCH: Final = {
    "foreach": Scratch(1, "all", "_multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), a copy of v "
                       "for every parameter at once (torch/optim/adam.py)"),
    "fused": _none("torch._fused_adam_ / _fused_adamw_ " + NO_SCRATCH_IN_PLACE),
    "for-loop": Scratch(2, "largest", "_single_tensor_adam: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt), the "
                        "square root and the quotient of one tensor alive together (torch/optim/adam.py)"),
}

OPTIMIZER_INFO: Final[dict[str, OptimizerInfo]] = {
    info.id: info
    for info in (
        OptimizerInfo("adam", "Adam", "two moments (m, v) per parameter (Kingma & Ba 2014)", "Adam moments m and v",
                      _ADAM_SCRATCH, _two_moments, 2,
                      numerics="Adam's update with L2 regularisation folded into the gradient (not decoupled "
                               "weight decay)"),
        OptimizerInfo("adamw", "AdamW", "two moments (m, v) per parameter (Loshchilov & Hutter 2017)",
                      "AdamW moments m and v", _ADAM_SCRATCH, _two_moments, 2,
                      numerics="the standard update for transformers: adaptive per-parameter steps, decoupled "
                               "weight decay"),
        OptimizerInfo("sgd", "SGD", "no state", "SGD keeps no state", {
            "foreach": _none("_multi_tensor_sgd: torch._foreach_add_(params, grads) " + NO_SCRATCH_IN_PLACE),
            "fused": _none("torch._fused_sgd_ " + NO_SCRATCH_IN_PLACE),
            "for-loop": _none("_single_tensor_sgd: param.add_(grad) " + NO_SCRATCH_IN_PLACE),
        }, lambda share, bits, momentum: "0", 0,
                      numerics="plain gradient steps, no adaptive scaling: transformers usually train far "
                               "worse with it"),
        OptimizerInfo("sgd-momentum", "SGD with momentum", "one momentum buffer per parameter", "Momentum buffer", {
            "foreach": _none("_multi_tensor_sgd: the first step clones the gradients into the buffers (the state); "
                             "later steps update in place"),
            "fused": _none("torch._fused_sgd_ " + NO_SCRATCH_IN_PLACE),
            "for-loop": _none("_single_tensor_sgd: buf.mul_(momentum).add_(grad) " + NO_SCRATCH_IN_PLACE),
        }, _one_moment, 1,
                      numerics="one moment, no per-parameter scaling: transformers usually train worse than "
                               "with Adam at the same budget"),
        OptimizerInfo(
            "adafactor",
            "Adafactor",
            "factored second moment: row and column statistics per matrix, full for vectors; optional momentum "
            "(Shazeer & Stern 2018, arXiv:1804.04235, section 3)",
            "Adafactor factored second moment",
            {
                "foreach": Scratch(1, "all", "_multi_tensor_adafactor: var_estimates = row_var @ col_var for every "
                                   "matrix at once, then the update in place (torch/optim/_adafactor.py)"),
                "fused": Scratch(1, "all", "torch has no fused Adafactor; torch.optim.Adafactor runs its foreach "
                                 "implementation"),
                "for-loop": Scratch(1, "largest", "_single_tensor_adafactor: var_estimate = row_var @ col_var for one "
                                    "tensor at a time (torch/optim/_adafactor.py)"),
            },
            _factored,
            numerics="a different update: the second moment is approximated by row and column averages, updates are "
                     "clipped and scaled relative to each weight; it usually needs its own learning-rate schedule "
                     "(Shazeer & Stern 2018)",
        ),
        OptimizerInfo(
            "adamw-8bit",
            "AdamW 8-bit (bitsandbytes)",
            "two uint8 moments with an fp32 scale per 256-element block; tensors under 4,096 elements keep fp32 "
            "moments (Dettmers et al. 2021, arXiv:2110.02861)",
            "8-bit AdamW moments with block scales",
            {name: _none("bitsandbytes' 8-bit kernel " + NO_SCRATCH_IN_PLACE + " (it has one implementation)")
             for name in OPTIMIZER_IMPLEMENTATIONS},
            lambda share, bits, momentum: (f"2 × ({share} × 1 B + ⌈params ÷ 256⌉ × 4 B) for tensors of 4,096+ "
                                           "elements, 2 × 4 B per element below"),
            numerics="AdamW's update on moments quantised to 8 bits block by block (dynamic quantisation); Dettmers "
                     "et al. 2021 report the 32-bit optimizer's accuracy on their language-model benchmarks",
        ),
        OptimizerInfo(
            "paged-adamw-8bit",
            "Paged AdamW 8-bit (bitsandbytes)",
            "8-bit AdamW's moments, those of tensors of 100,000+ elements in CUDA unified memory (paged)",
            "8-bit AdamW moments with block scales, paged",
            {name: _none("bitsandbytes' 8-bit kernel " + NO_SCRATCH_IN_PLACE + " (it has one implementation)")
             for name in OPTIMIZER_IMPLEMENTATIONS},
            lambda share, bits, momentum: (f"2 × ({share} × 1 B + ⌈params ÷ 256⌉ × 4 B) for tensors of 4,096+ "
                                           "elements, 2 × 4 B per element below; the 1-byte moments of tensors of "
                                           "100,000+ elements paged"),
            numerics="8-bit AdamW's update; paging moves memory, not arithmetic",
            paged=True,
        ),
        OptimizerInfo(
            "paged-adamw-32bit",
            "Paged AdamW 32-bit (bitsandbytes)",
            "two fp32 moments per parameter whatever the parameters' dtype (Optimizer2State with optim_bits=32), "
            "those of tensors of 100,000+ elements in CUDA unified memory (paged)",
            "AdamW moments m and v in fp32, paged",
            {name: _none("bitsandbytes' 32-bit kernel " + NO_SCRATCH_IN_PLACE + " (it has one implementation)")
             for name in OPTIMIZER_IMPLEMENTATIONS},
            lambda share, bits, momentum: f"{share} × 2 × {FP32_BITS} bit ÷ 8 (tensors of 100,000+ elements paged)",
            numerics="AdamW's update with fp32 moments; paging moves memory, not arithmetic",
            paged=True,
        ),
        OptimizerInfo("lion", "Lion", "one momentum per parameter (Chen et al. 2023, arXiv:2302.06675)", "Lion momentum",
                      {name: Scratch(2, "largest", "lion-pytorch's step: exp_avg.clone().mul_(beta1).add(grad, ...) "
                                     "holds two copies of one tensor (it has one implementation)")
                       for name in OPTIMIZER_IMPLEMENTATIONS}, _one_moment, 1,
                      numerics="a different update: the sign of an interpolated momentum, the same size for every "
                               "parameter; Chen et al. 2023 use a 3-10x smaller learning rate than AdamW's"),
    )
}
OPTIMIZERS: Final = tuple(OPTIMIZER_INFO)


def check_optimizer(optimizer: str) -> None:
    if optimizer not in OPTIMIZER_INFO:
        raise DomainError("training.optimizer", f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")


def adafactor_state_elements(shape: tuple[int, ...]) -> int:
    """Second-moment elements Adafactor keeps for one tensor: rows + columns for a matrix, all for a vector.

    Shazeer & Stern 2018, section 3: a matrix of shape (n, m) keeps row sums R (n) and column sums
    C (m) in place of the full n x m second moment. For tensors of more than two dimensions the
    leading dimensions are batch dimensions (torch.optim.Adafactor: ``row_var`` of shape[:-1],
    ``col_var`` of shape[:-2] + shape[-1:]).
    """
    if len(shape) < 2:
        return math.prod(shape)
    leading = math.prod(shape[:-2])
    return leading * (shape[-2] + shape[-1])


def bnb_8bit_state_bytes(elements: int) -> int:
    """bitsandbytes 8-bit Adam state for one tensor: 2 x (n x 1 B + ceil(n / 256) x 4 B), or 2 x 4n B if small."""
    if elements < BNB_MIN_8BIT_SIZE:
        return 2 * tensor_bytes(elements, FP32_BITS)
    per_state = tensor_bytes(elements, BNB_STATE_BITS) + tensor_bytes(ceil_div(elements, BNB_BLOCK_SIZE), BNB_ABSMAX_BITS)
    return 2 * per_state


def optimizer_state_bytes(
    optimizer: str,
    *,
    shapes: Iterable[tuple[int, ...]],
    state_bits: int,
    adafactor_momentum: bool = False,
) -> int:
    """Optimizer state for parameters of the given shapes, with moments of `state_bits` each.

    * Adam, AdamW: m and v, 2 x P elements (Kingma & Ba 2014, Algorithm 1).
    * SGD: nothing; SGD with momentum and Lion: one buffer, P elements.
    * Adafactor: sum of `adafactor_state_elements` over tensors, plus P if momentum is on.
    * AdamW 8-bit, paged or not: sum of `bnb_8bit_state_bytes` (its widths are fixed; `state_bits` is ignored).
    * Paged AdamW 32-bit: 2 x 4 B per parameter (bitsandbytes' Optimizer2State.init_state makes fp32 states for
      optim_bits=32, bitsandbytes/optim/optimizer.py lines 492-510; `state_bits` is ignored).
    """
    check_optimizer(optimizer)
    shapes = tuple(shapes)
    params = sum(math.prod(shape) for shape in shapes)
    if optimizer in ("adam", "adamw"):
        return 2 * tensor_bytes(params, state_bits)
    if optimizer == "sgd":
        return 0
    if optimizer in ("sgd-momentum", "lion"):
        return tensor_bytes(params, state_bits)
    if optimizer == "adafactor":
        factored = sum(tensor_bytes(adafactor_state_elements(shape), state_bits) for shape in shapes)
        return factored + (tensor_bytes(params, state_bits) if adafactor_momentum else 0)
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return sum(bnb_8bit_state_bytes(math.prod(shape)) for shape in shapes)
    if optimizer == "paged-adamw-32bit":
        return 2 * tensor_bytes(params, FP32_BITS)
    raise DomainError("training.optimizer", f"no state is known for the optimizer {optimizer!r}")


def optimizer_state_bytes_from_count(optimizer: str, *, param_count: int, state_bits: int) -> int:
    """Optimizer state when only the parameter count is known (no shapes).

    Adafactor cannot be computed without shapes; 8-bit AdamW assumes every tensor is large enough
    to be quantised, which is true of all but biases and norms.
    """
    check_optimizer(optimizer)
    if optimizer == "adafactor":
        raise DomainError(
            "training.optimizer",
            "Adafactor factors each weight matrix by its rows and columns, so it needs the architecture: "
            "choose a preset, give the architecture fields or paste a config.json",
        )
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return 2 * (tensor_bytes(param_count, BNB_STATE_BITS) + tensor_bytes(ceil_div(param_count, BNB_BLOCK_SIZE), BNB_ABSMAX_BITS))
    return optimizer_state_bytes(optimizer, shapes=[(param_count,)], state_bits=state_bits)


def paged_state_bytes(optimizer: str, *, shapes: Iterable[tuple[int, ...]]) -> int:
    """The part of `optimizer_state_bytes` a paged optimizer keeps in CUDA unified memory: both moments of each
    tensor of at least BNB_PAGED_MIN_ELEMENTS elements, 1 B each (8-bit) or 4 B (32-bit); 0 for the others."""
    if not OPTIMIZER_INFO[optimizer].paged:
        return 0
    width = BNB_STATE_BITS if optimizer == "paged-adamw-8bit" else FP32_BITS
    large = sum(math.prod(shape) for shape in shapes if math.prod(shape) >= BNB_PAGED_MIN_ELEMENTS)
    return 2 * tensor_bytes(large, width)


def optimizer_label(optimizer: str, *, adafactor_momentum: bool = False) -> str:
    label = OPTIMIZER_INFO[optimizer].label
    return label + (" and momentum" if optimizer == "adafactor" and adafactor_momentum else "")


def optimizer_formula(optimizer: str, *, share: str, bits: int, adafactor_momentum: bool = False) -> str:
    """The optimizer state's formula with the numbers in it, for `share` (e.g. ``8,030,261,248 params``)."""
    return OPTIMIZER_INFO[optimizer].formula(share, bits, adafactor_momentum)
