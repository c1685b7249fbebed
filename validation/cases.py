"""One configuration, measured and predicted: the rows of the validation table."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from validation import measure, predict
from validation.models import Size, build, decoder_layers

# Optimizers trainmem models that torch.optim provides, as (trainmem id, constructor).
OPTIMIZERS = {
    "adam": lambda params: torch.optim.Adam(params, lr=1e-3),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3),
    "sgd": lambda params: torch.optim.SGD(params, lr=1e-3),
    "sgd-momentum": lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9),
    "adafactor": lambda params: torch.optim.Adafactor(params, lr=1e-3),
}


@dataclass(frozen=True)
class Row:
    """One comparison: what was predicted and measured for one quantity of one setup."""

    setup: str
    family: str
    quantity: str
    predicted: int
    measured: int
    target: str  # "exact", "5%" or "info"

    @property
    def error_bytes(self) -> int:
        return self.predicted - self.measured

    @property
    def error_pct(self) -> float:
        if self.measured == 0:
            return 0.0 if self.predicted == 0 else float("inf")
        return 100.0 * (self.predicted - self.measured) / self.measured

    @property
    def passed(self) -> bool:
        if self.target == "exact":
            return self.error_bytes == 0
        if self.target == "5%":
            return abs(self.error_pct) <= 5.0
        return True

    def as_dict(self) -> dict:
        return {
            "setup": self.setup, "family": self.family, "quantity": self.quantity, "predicted_bytes": self.predicted,
            "measured_bytes": self.measured, "error_bytes": self.error_bytes, "error_pct": round(self.error_pct, 4),
            "target": self.target, "passed": self.passed,
        }


def _autocast(precision: str):
    if precision.startswith("autocast"):
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _tokens(vocab: int, batch: int, seq: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, vocab, (batch, seq), generator=generator)


@dataclass(frozen=True)
class StatesCase:
    """Model states after backward and optimizer.step()."""

    family: str
    size: Size
    precision: str
    optimizer: str

    @property
    def label(self) -> str:
        return f"{self.family} {self.size.label()} {self.precision} {self.optimizer}"

    def run(self) -> list[Row]:
        model, config = build(self.family, self.size, attention="sdpa", precision=self.precision)
        optimizer = OPTIMIZERS[self.optimizer](model.parameters())
        ids = _tokens(self.size.vocab, 1, 8)
        with _autocast(self.precision):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        measured = measure.model_states(model, optimizer)
        predicted = predict.model_states(predict.architecture(config), precision=self.precision, optimizer=self.optimizer)
        return [
            Row(self.label, self.family, category, predicted[category], getattr(measured, f"{category}_bytes"), "exact")
            for category in ("weights", "gradients", "master_weights", "optimizer_states")
        ]


@dataclass(frozen=True)
class ActivationCase:
    """Activations saved for backward in one training step, and the logits buffers around the loss."""

    family: str
    size: Size
    batch: int
    seq: int
    precision: str
    attention: str  # "eager" or "sdpa"
    checkpointing: str = "none"  # "none" or "full"

    @property
    def label(self) -> str:
        ckpt = " ckpt" if self.checkpointing == "full" else ""
        return f"{self.family} {self.size.label()} b{self.batch} s{self.seq} {self.precision} {self.attention}{ckpt}"

    def measure(self) -> tuple[measure.ActivationMeasurement, dict]:
        model, config = build(self.family, self.size, attention=self.attention, precision=self.precision)
        if self.checkpointing == "full":
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
        recorder = measure.SavedTensorRecorder(model, decoder_layers(model))
        buffers = measure.LogitsBuffers(self.batch * self.seq * self.size.vocab)
        ids = _tokens(self.size.vocab, self.batch, self.seq)
        with recorder.recording(), _autocast(self.precision), buffers:
            output = model(input_ids=ids, labels=ids, use_cache=False)
        buffers.backward = True
        recomputed = measure.RecomputedParameterCasts(model, decoder_layers(model))
        with buffers, recomputed:
            output.loss.backward()
        result = recorder.measurement()
        result.logits = dict(buffers.buffers)
        result.autocast_weight_copies += recomputed.one_layer_peak()
        return result, config

    def run(self) -> list[Row]:
        measured, config = self.measure()
        arch = predict.architecture(config)
        setup = predict.activation_setup(
            micro_batch_size=self.batch, seq_len=self.seq, precision=self.precision, attention=self.attention
        )
        predicted = predict.activations(arch, setup, self.checkpointing)
        rows = [
            Row(self.label, self.family, f"layer {index}", predicted.layer_bytes, layer_bytes, "5%")
            for index, layer_bytes in enumerate(measured.layers)
        ]
        rows += [
            Row(self.label, self.family, "embedding", predicted.embedding_bytes, measured.embedding, "info"),
            Row(self.label, self.family, "head and loss", predicted.head_bytes, measured.head, "info"),
            Row(self.label, self.family, "model activations", predicted.total, measured.total, "5%"),
        ]
        if predicted.autocast_weight_copies or measured.autocast_weight_copies:
            rows.append(Row(self.label, self.family, "autocast weight copies", predicted.autocast_weight_copies,
                            measured.autocast_weight_copies, "5%"))
        rows.append(Row(self.label, self.family, "logits workspace", predicted.logits_bytes, _logits_peak(measured.logits), "5%"))
        return rows


def _logits_peak(buffers: dict[str, int]) -> int:
    """The most logits-sized transient bytes alive at once.

    The model's output keeps the logits through the step. In backward, log_softmax's backward
    writes its fp32 gradient while nll_loss's fp32 gradient is still its input: the two fp32
    buffers and the logits are alive together. The forward's fp32 upcast is freed when the loss
    returns, and the cast of the gradient back to the logits' dtype is made after nll_loss's
    gradient is freed, so neither adds to that peak (each is reported in the JSON on its own).
    """
    logits = buffers.get("logits", 0)
    backward = buffers.get("grad_log_probs", 0) + buffers.get("grad_logits", 0)
    forward = buffers.get("logits_fp32_upcast", 0)
    cast_back = buffers.get("grad_logits", 0) + buffers.get("grad_logits_cast", 0)
    return logits + max(backward, forward, cast_back)
