"""Recomputing some layers, measured: every k-th layer (torchtitan) and the first N layers (Megatron-LM) on CPU.

Two policies that recompute whole layers, but not all of them:

- every k-th layer: torchtitan's layer-level selective recomputation (``mode = "selective"``,
  ``selective_ac_option = "2"``, its default) counts a stage's blocks from 1 and wraps block i in a
  non-reentrant checkpoint when ``i % ac_freq == 0`` (torchtitan/distributed/activation_checkpoint.py,
  ``_apply_layer_sac``, commit 1f029641b5caeb4df18ac094263e8bcc674b3686);
- the first N layers: Megatron-LM's ``--recompute-granularity full --recompute-method block
  --recompute-num-layers N`` checkpoints layers 0 to N - 1 of a stage and runs the rest plainly
  (megatron/core/transformer/transformer_block.py, ``_checkpointed_forward``, commit
  a7c9e8c44ae89bea013a085ef33ab52a9b7a19b4).

transformers' decoder layers are GradientCheckpointingLayers: after ``activation_checkpointing_enable()``
(non-reentrant ``torch.utils.checkpoint``) each checkpoints its forward only while its own
``gradient_checkpointing`` flag is set (transformers/modeling_layers.py), so the harness clears the flag of the
layers that keep everything (`validation.timeline.TimelineCase.recomputed_layers`).

Measured per case, on real tensors: the bytes autograd keeps for each layer after one forward
(validation/measure.py's recorder: a recomputed layer keeps its input, the keyword arguments its checkpoint
closes over count once with the embedding), and the peak of two training steps and its event (the timeline
harness, validation/timeline.py). Compared with trainmem's ``estimate`` for ``Training(activation_checkpointing=
"full", recompute_every=k)`` or ``recompute_first_layers=N``: each layer's bytes and the 'activations.layers'
line to the byte, the peak within 2% at the same event.

    python -m validation.recompute_policies              # measure, compare, print a line per case
    python -m validation.recompute_policies --write      # and publish docs/recompute.json and the section
    python -m validation.recompute_policies --published  # compare the published measurements (no measuring)
    python -m validation.recompute_policies --measured-only  # measure and keep the figures, without comparing
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from app.core import Estimate, Parallelism
from app.core import activations as act
from app.core.finetuning import layer_role
from app.core.hf_config import architecture_from_hf_config
from app.core.recompute import kept_layer_role
from app.core.setup import activation_setup
from validation import peak
from validation import timeline as tl
from validation.models import Size
from validation.sections import write_section

SECTION: Final = "## Recomputing some layers"
RESULTS: Final = tl.DOCS / "recompute.json"
LAYERS_LINE: Final = "activations.layers"
# Long sequences over a small vocabulary, so that the layers, not the loss, decide the peak.
SIZE: Final = Size(hidden=256, layers=6, heads=4, kv_heads=2, intermediate=1536, vocab=512, head_dim=64)
FAMILY_LAYERS: Final = (("llama", 6), ("qwen2", 5), ("olmo2", 4))
LORA_TARGETS: Final = ("q_proj", "v_proj")

# Cases where trainmem's answer differs from the measurement, and why (read off the per-event comparison).
KNOWN_DIFFERENCES: Final[dict[str, str]] = {
    "qwen2 h256 L5 a4/kv2 I1536 V512 b2 s1024 bf16 adamw(foreach) sdpa ckpt every 2 plain":
        "The top layer is kept and the one below recomputed: its rebuild takes the place of layer 5's freed tensors, "
        "beside layer 5's gradients (2,754,560 B, one layer's bf16 weights), so layer 4's backward holds 2,754,560 B "
        "more than layer 5's. trainmem counts those bytes (the peak is within 388 B) but at the top layer's backward: "
        "its timeline has events for the first and the last layer only, so it names layer 5's.",
}


def policies(layers: int) -> tuple[dict[str, int], ...]:
    """Every 2nd and every 3rd layer; the first layer, the first two and all but the top one."""
    return ({"recompute_every": 2}, {"recompute_every": 3}, {"recompute_first_layers": 1},
            {"recompute_first_layers": 2}, {"recompute_first_layers": layers - 1})


def cases() -> tuple[tl.TimelineCase, ...]:
    """Llama (6 layers), Qwen2 (5: every 2nd leaves the top layer kept) and OLMo 2 (4: norms after attention and
    the MLP, Q and K normalised), bf16, sdpa, AdamW; and Llama with LoRA on q_proj and v_proj."""
    out = []
    for family, layers in FAMILY_LAYERS:
        base = tl.TimelineCase(family, precision="bf16", seq=1024, batch=2, size=replace(SIZE, layers=layers),
                               checkpointing="full")
        out += [replace(base, **policy) for policy in policies(layers)]
    lora = tl.TimelineCase("llama", precision="bf16", seq=1024, batch=2, size=SIZE, checkpointing="full",
                           lora_rank=8, lora_targets=LORA_TARGETS)
    out += [replace(lora, recompute_every=2), replace(lora, recompute_first_layers=2)]
    return tuple(out)


def case_from(data: dict[str, Any]) -> tl.TimelineCase:
    """A case read back from `TimelineCase.as_dict`."""
    fields = {name: value for name, value in data.items() if name in tl.TimelineCase.__dataclass_fields__}
    fields["lora_targets"] = tuple(fields.get("lora_targets", ()))
    fields["size"] = Size(**fields["size"])
    return tl.TimelineCase(**fields)


# --- measured ---------------------------------------------------------------------------------------


def measure_saved(case: tl.TimelineCase) -> dict[str, Any]:
    """The bytes autograd keeps after one forward: per decoder layer, the embedding's (with the keyword arguments
    the checkpoints close over) and the head's."""
    import torch

    from validation.measure import CLOSURE, HEAD, PARAMETER, SCALAR, SavedTensorRecorder
    from validation.models import decoder_layers

    model, _ = tl.build_model(case)
    recorder = SavedTensorRecorder(model, decoder_layers(model))
    ids = torch.randint(0, model.config.vocab_size, (case.batch, case.seq), generator=torch.Generator().manual_seed(1))
    with recorder.recording():
        output = model(input_ids=ids, labels=ids, use_cache=False)
    storages = recorder.measurement().storages
    output.loss.backward()
    layers = [0] * len(recorder.layers)
    embedding = head = 0
    for storage in storages:
        if storage.kind in (PARAMETER, SCALAR):
            continue
        # What a checkpoint closes over is the model's, even where one recomputed layer alone holds it (the
        # position ids); a cast of a weight the model makes itself is a tensor its layer keeps.
        if storage.region.startswith("layer") and storage.saved_by != CLOSURE:
            layers[int(storage.region.removeprefix("layer"))] += storage.nbytes
        elif storage.region == HEAD:
            head += storage.nbytes
        else:
            embedding += storage.nbytes
    return {"layers": layers, "embedding": embedding, "head": head}


def measure(case: tl.TimelineCase) -> dict[str, Any]:
    """Everything measured for one case: the saved bytes and the two steps' points."""
    started = time.monotonic()
    saved = measure_saved(case)
    steps = tl.measure(case)
    top = steps.peak()
    return {
        "label": case.label, "case": case.as_dict(), "config": steps.config,
        "recomputed": list(case.recomputed_layers(len(saved["layers"]))),
        "saved": saved,
        "peak": {"bytes": top.peak, "event": top.event, "step": top.step,
                 "breakdown": peak.core_breakdown(top.peak_breakdown)},
        "baseline_bytes": steps.baseline, "end_live_bytes": steps.end_live,
        "points": [[p.step, p.event, p.live, p.peak] for p in steps.points],
        "seconds": round(time.monotonic() - started, 2),
    }


# --- predicted and compared --------------------------------------------------------------------------


def predicted_layers(case: tl.TimelineCase, config: dict) -> list[int]:
    """What the core says each layer keeps: a recomputed layer its input (``checkpointed_layer_activations``,
    ``full``), a kept one everything its part in backward needs (``layer_activations`` by ``layer_role``)."""
    arch = architecture_from_hf_config(config)
    training = peak.training(case)
    setup = activation_setup(training, Parallelism(), device="cpu")
    recomputed = act.total_bytes(act.checkpointed_layer_activations(arch, setup, "full"))
    out = []
    for index, is_recomputed in enumerate(case.recomputed_layers(arch.num_hidden_layers)):
        role = kept_layer_role(layer_role(training.finetuning, index)) if case.lora_rank else "full"
        out.append(recomputed if is_recomputed else act.total_bytes(act.layer_activations(arch, setup, role)))
    return out


def ledger_bytes(answer: Estimate, key: str) -> int:
    return sum(buffer.bytes for buffer in answer.ledger if buffer.key == key)


@dataclass(frozen=True)
class Row:
    """One case: the saved bytes and the two steps' peak, measured and predicted."""

    label: str
    recomputed: tuple[bool, ...]
    measured_layers: tuple[int, ...]
    predicted_layers: tuple[int, ...]
    predicted_layers_line: int  # the ledger's 'activations.layers'
    peak: peak.PeakRow

    @property
    def measured_layers_sum(self) -> int:
        return sum(self.measured_layers)

    @property
    def layers_exact(self) -> bool:
        return (self.measured_layers == self.predicted_layers
                and self.measured_layers_sum == self.predicted_layers_line)

    @property
    def passed(self) -> bool:
        return self.layers_exact and self.peak.passed and self.peak.same_event

    def layer_one_error_pct(self) -> float:
        """trainmem's "backward: layer 1" of step 2 against the most that event held (its rebuild and working set)."""
        event = next(row for row in self.peak.events if (row.step, row.event) == (2, "backward: layer 1"))
        assert event.predicted is not None
        return 100.0 * (event.predicted - event.measured_peak) / event.measured_peak

    def measured_event(self) -> str:
        return _event(self.peak.measured_event, self.peak.measured_step, self.recomputed)

    def predicted_event(self) -> str:
        return _event(self.peak.predicted_event, self.peak.predicted_step, self.recomputed)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "recomputed": list(self.recomputed),
                "measured_layers": list(self.measured_layers), "predicted_layers": list(self.predicted_layers),
                "predicted_layers_line": self.predicted_layers_line, "layers_exact": self.layers_exact,
                "measured_peak_bytes": self.peak.measured, "predicted_peak_bytes": self.peak.predicted,
                "error_pct": round(self.peak.error_pct, 4), "measured_event": self.measured_event(),
                "predicted_event": self.predicted_event(), "same_event": self.peak.same_event,
                "layer_1_backward_error_pct": round(self.layer_one_error_pct(), 4), "passed": self.passed}


def _event(event: str, step: int, recomputed: tuple[bool, ...]) -> str:
    """An event with its step, and for a layer's backward whether that layer is recomputed or kept."""
    words = f"{event}, step {step}"
    if event.startswith("backward: layer "):
        index = int(event.removeprefix("backward: layer ")) - 1
        words += " (recomputed)" if recomputed[index] else " (kept)"
    return words


def compare(result: dict[str, Any]) -> Row:
    """A measured case against trainmem as it is now."""
    case = case_from(result["case"])
    config = result["config"]
    points = [tl.Point(step, event, live, top, 0, 0) for step, event, live, top in result["points"]]
    measured = tl.Measurement(case, config, points, result["baseline_bytes"], result["end_live_bytes"], [],
                              result["seconds"], tracker=None)
    answer = peak.predict(case, config)
    return Row(label=result["label"], recomputed=tuple(result["recomputed"]),
               measured_layers=tuple(result["saved"]["layers"]), predicted_layers=tuple(predicted_layers(case, config)),
               predicted_layers_line=ledger_bytes(answer, LAYERS_LINE), peak=peak.compare(measured, answer))


# --- published ---------------------------------------------------------------------------------------


def _layers_text(values: list[int] | tuple[int, ...], chosen: list[bool]) -> str:
    distinct = sorted({value for value, pick in zip(values, chosen, strict=True) if pick})
    return " / ".join(f"{value:,}" for value in distinct) or "–"


def section(rows: list[Row]) -> list[str]:
    passed = sum(row.passed for row in rows)
    exact = sum(row.layers_exact for row in rows)
    same = sum(row.peak.same_event for row in rows)
    lines = [SECTION, "",
             "Whole layers recomputed, but not all of them, on CPU (`python -m validation.recompute_policies`; "
             "measured figures in docs/recompute.json): every k-th layer of a stage counted from 1, torchtitan's "
             "default (`selective_ac_option = \"2\"`; torchtitan/distributed/activation_checkpoint.py, "
             "`_apply_layer_sac`), and the first N layers, Megatron-LM's `--recompute-method block` "
             "(megatron/core/transformer/transformer_block.py, `_checkpointed_forward`). transformers 5.24's "
             "non-reentrant checkpoint on the recomputed layers only (each layer's `gradient_checkpointing` flag), "
             "bf16, sdpa, AdamW (foreach), batch 2 of 1,024 tokens, hidden 256, intermediate 1,536, a 512-token "
             "vocabulary (so that the layers, not the loss, decide the peak). Per layer the bytes autograd keeps "
             "after the forward (a recomputed layer keeps its input; the keyword arguments its checkpoint closes "
             "over count once, with the embedding); the layers' sum against the estimate's 'activations.layers' "
             "line; the peak of two training steps and its event, against the estimate's. "
             f"**{exact} of {len(rows)} cases exact in every layer and the line; {same} at the same event; "
             f"{passed} pass (both, and the peak within {peak.PEAK_TARGET_PCT:g}%).**", "",
             "| case | recomputed layers | kept layer B (measured / predicted) | recomputed layer B (measured / "
             "predicted) | layers' sum B (measured / 'activations.layers') | peak B (measured / predicted) | error "
             "| event (measured / predicted) | layer 1's backward, step 2: error against its most |",
             "| --- | --- | --- | --- | --- | --- | ---: | --- | ---: |"]
    for row in rows:
        kept = [not flag for flag in row.recomputed]
        numbers = ", ".join(str(index + 1) for index, flag in enumerate(row.recomputed) if flag)
        lines.append(
            f"| {row.label} | {numbers} of {len(row.recomputed)} | "
            f"{_layers_text(row.measured_layers, kept)} / {_layers_text(row.predicted_layers, kept)} | "
            f"{_layers_text(row.measured_layers, list(row.recomputed))} / "
            f"{_layers_text(row.predicted_layers, list(row.recomputed))} | "
            f"{row.measured_layers_sum:,} / {row.predicted_layers_line:,} | {row.peak.measured:,} / "
            f"{row.peak.predicted:,} | {row.peak.error_pct:+.4f}% | {row.measured_event()} / "
            f"{row.predicted_event()} | {row.layer_one_error_pct():+.2f}% |")
    differing = [row for row in rows if not row.passed]
    if differing:
        lines += ["", "**Where trainmem differs:**", ""]
        for row in differing:
            line = f"- {row.label}: "
            if not row.layers_exact:
                line += (f"layers {row.measured_layers_sum:,} B measured, 'activations.layers' "
                         f"{row.predicted_layers_line:,} B; ")
            line += (f"peak {row.peak.measured:,} B at {row.measured_event()} measured, {row.peak.predicted:,} B at "
                     f"{row.predicted_event()} predicted ({row.peak.error_bytes:+,} B). "
                     f"{KNOWN_DIFFERENCES.get(row.label, 'Not yet explained.')}")
            lines.append(line)
    lines += ["", "The last column: trainmem's \"backward: layer 1\" against the most that event held. It decides the "
              "peak here only when all layers but the top one are recomputed. Measured, it holds what trainmem predicts "
              "there for full recomputation where layer 1 is recomputed, and for none where it is kept (within 7.4 kB "
              "in every case without LoRA).",
              "", "Layers are numbered from 1, as the events are. transformers' own "
              "`activation_checkpointing_enable(every_n_layers=k)` counts from 0 (`layer_index % every_n_layers == 0`: "
              "layers 1, k + 1, ...), so it is not torchtitan's policy; the harness sets each layer's flag instead. "
              "With any layer recomputed, transformers makes the embedding's output require a gradient "
              "(`enable_input_require_grads`), so under LoRA a kept lowest layer keeps what every other kept layer "
              "keeps.", ""]
    return lines


def write(results: list[dict[str, Any]], rows: list[Row], path: Path = RESULTS, *, section_too: bool = True) -> None:
    import torch
    import transformers

    body = ",\n".join("  " + json.dumps(result, separators=(",", ":")) for result in results)
    head = {"torch": torch.__version__, "transformers": transformers.__version__, "device": "cpu",
            "rows": [row.as_dict() for row in rows]}
    text = json.dumps(head, indent=1)[:-2] + ',\n "cases": [\n' + body + "\n ]\n}\n"
    path.write_text(text, encoding="utf-8")
    if section_too:
        write_section(section(rows))


def published() -> list[dict[str, Any]]:
    return json.loads(RESULTS.read_text(encoding="utf-8"))["cases"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.recompute_policies", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="publish docs/recompute.json and the section")
    parser.add_argument("--published", action="store_true", help="compare docs/recompute.json's measurements")
    parser.add_argument("--measured-only", action="store_true",
                        help="measure and write docs/recompute.json's cases, without comparing")
    args = parser.parse_args(argv)
    if args.published:
        results = published()
    else:
        import warnings

        import torch
        import transformers

        transformers.logging.set_verbosity_error()
        torch.set_num_threads(min(2, torch.get_num_threads()))
        warnings.simplefilter("ignore")
        results = []
        for case in cases():
            results.append(measure(case))
            print(f"measured {case.label}: layers {results[-1]['saved']['layers']}, peak "
                  f"{results[-1]['peak']['bytes']:,} B ({results[-1]['peak']['event']}, step "
                  f"{results[-1]['peak']['step']}) in {results[-1]['seconds']} s", file=sys.stderr)
    if args.measured_only:
        write(results, [], section_too=False)
        return 0
    rows = [compare(result) for result in results]
    for row in rows:
        print(f"{'ok  ' if row.passed else 'DIFF'} {row.label}: layers {row.measured_layers_sum:,} / "
              f"{row.predicted_layers_line:,}, peak {row.peak.measured:,} / {row.peak.predicted:,} "
              f"({row.peak.error_pct:+.4f}%), {row.measured_event()} / {row.predicted_event()}")
    if args.write:
        write(results, rows)
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
