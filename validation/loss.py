"""The chunked loss measured on CPU: torchtune's chunked cross entropy, written in plain PyTorch, against the ledger.

torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py) takes the logits the model
returns in `num_output_chunks` chunks of tokens (each chunk's output-layer matmul in the model's dtype) and, chunk
by chunk, upcasts them to fp32 and runs cross entropy with a sum reduction, dividing by the token count at the end.
Here a small output layer runs that loss forward and backward under a dispatch mode that records every tensor of one
chunk's tokens × vocabulary, by the op that made it. Compared, to the byte, with trainmem's ledger for
`training.loss: chunked`: each chunk's fp32 upcast and the loss's two fp32 gradients (one chunk at a time), the
logits of every chunk, and the fp32 log-probabilities every chunk saves for backward.

    python -m validation.loss
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Final

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from app import core

OPS: Final = {
    "aten.mm.default": "logits",
    "aten._log_softmax.default": "log_probs",
    "aten.nll_loss_backward.default": "grad_log_probs",
    "aten._log_softmax_backward_data.default": "grad_logits",
}


@dataclass(frozen=True)
class Case:
    batch: int
    seq: int
    hidden: int
    vocab: int
    chunks: int
    dtype: str = "bf16"

    @property
    def label(self) -> str:
        return f"b{self.batch} s{self.seq} h{self.hidden} V{self.vocab} {self.chunks} chunks {self.dtype}"


class ChunkBuffers(TorchDispatchMode):
    """Every new tensor of one chunk's tokens × vocabulary, by kind: each kind's bytes per chunk and how many."""

    def __init__(self, elements: int) -> None:
        super().__init__()
        self.elements = elements
        self.seen: dict[str, list[int]] = {}
        self.backward = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel() == self.elements:
            name = OPS.get(str(func))
            if name == "logits" and self.backward:
                name = None  # backward's matmuls (a weight gradient can have a chunk's element count by chance)
            if name is None and str(func) in ("aten._to_copy.default", "aten.to.dtype"):
                name = "grad_logits_cast" if self.backward else "upcast"
            if name is not None:
                self.seen.setdefault(name, []).append(out.untyped_storage().nbytes())
        return out


def measure(case: Case) -> dict[str, int]:
    torch.manual_seed(0)
    dtype = torch.bfloat16 if case.dtype == "bf16" else torch.float32
    tokens = case.batch * case.seq
    hidden = torch.randn(tokens, case.hidden, dtype=dtype, requires_grad=True)
    weight = torch.randn(case.vocab, case.hidden, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, case.vocab, (tokens,))
    mode = ChunkBuffers(tokens // case.chunks * case.vocab)
    with mode:
        logits = [chunk @ weight.t() for chunk in hidden.chunk(case.chunks)]
        total = sum(F.cross_entropy(chunk.float(), target, reduction="sum")
                    for chunk, target in zip(logits, labels.chunk(case.chunks), strict=True))
        loss = total / tokens
        mode.backward = True
        loss.backward()
    out = {f"{name} per chunk": max(sizes) for name, sizes in mode.seen.items()}
    out |= {f"{name} chunks": len(sizes) for name, sizes in mode.seen.items()}
    return out


def predict(case: Case) -> dict[str, int]:
    arch = core.Architecture(num_hidden_layers=1, hidden_size=case.hidden, num_attention_heads=1,
                             vocab_size=case.vocab, max_position_embeddings=max(case.seq, 1))
    training = core.Training(micro_batch_size=case.batch, seq_len=case.seq, loss="chunked", loss_chunks=case.chunks,
                             precision=core.precision_preset("bf16" if case.dtype == "bf16" else "fp32"),
                             loop="hf-trainer")
    ledger = {buffer.key: buffer for buffer in core.estimate(architecture=arch, training=training).ledger}
    chunks = case.chunks
    out = {
        "logits per chunk": ledger["loss.logits"].bytes // chunks, "logits chunks": chunks,
        "log_probs per chunk": _item_bytes(ledger["activations.loss"].formula, "loss.log_softmax_fp32") // chunks,
        "log_probs chunks": chunks,
        "grad_log_probs per chunk": ledger["loss.grad_log_probs"].bytes, "grad_log_probs chunks": chunks,
        "grad_logits per chunk": ledger["loss.grad_logits"].bytes, "grad_logits chunks": chunks,
    }
    if case.dtype == "bf16":
        out |= {"upcast per chunk": ledger["loss.upcast"].bytes, "upcast chunks": chunks,
                "grad_logits_cast per chunk": ledger["loss.grad_logits_half"].bytes // chunks,
                "grad_logits_cast chunks": chunks}
    return out


def _item_bytes(formula: str, name: str) -> int:
    """One saved tensor's bytes from a ledger line's formula ("loss.log_softmax_fp32 512,000 B + ...")."""
    match = re.search(re.escape(name) + r" ([0-9,]+) B", formula)
    if match is None:
        raise ValueError(f"{name} is not in {formula!r}")
    return int(match.group(1).replace(",", ""))


CASES: Final = (Case(2, 64, 32, 1000, 4), Case(1, 96, 16, 777, 8), Case(4, 32, 32, 500, 2, "fp32"), Case(2, 64, 32, 1000, 1))


def main() -> int:
    failed = 0
    for case in CASES:
        measured, predicted = measure(case), predict(case)
        ok = measured == predicted
        failed += not ok
        print(f"{'ok  ' if ok else 'DIFF'} {case.label}: measured {measured} predicted {predicted}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
