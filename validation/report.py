"""The validation table as JSON (for the accuracy page) and Markdown (docs/VALIDATION.md)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Final

import torch
import transformers

from validation.cases import Row
from validation.sections import write_section

ACTIVATION_TARGET_PCT = 5.0

# Summary keys: the quantities whose worst error the page shows.
QUANTITIES = {
    "layer": "worst_layer_error_pct",
    "model activations": "worst_model_error_pct",
    "embedding": "worst_embedding_error_pct",
    "head and loss": "worst_head_error_pct",
    "autocast weight copies": "worst_autocast_weight_copies_error_pct",
    "logits workspace": "worst_logits_workspace_error_pct",
}


def _kind(row: Row) -> str:
    return "layer" if row.quantity.startswith("layer ") else row.quantity


def summary(rows: list[Row]) -> dict:
    worst: dict[str, float] = defaultdict(float)
    for row in rows:
        kind = _kind(row)
        if kind in QUANTITIES:
            worst[QUANTITIES[kind]] = max(worst[QUANTITIES[kind]], abs(row.error_pct))
    states = [row for row in rows if row.target == "exact"]
    activation_setups = {row.setup for row in rows if row.target != "exact"}
    state_setups = {row.setup for row in states}
    result = {
        "worst_activation_error_pct": round(max(worst["worst_layer_error_pct"], worst["worst_model_error_pct"]), 4),
        **{key: round(worst[key], 4) for key in QUANTITIES.values()},
        "model_states_max_error_bytes": max((abs(row.error_bytes) for row in states), default=0),
        "activation_target_pct": ACTIVATION_TARGET_PCT,
        "configurations": len(activation_setups) + len(state_setups),
        "activation_configurations": len(activation_setups),
        "model_state_configurations": len(state_setups),
        "families": sorted({row.family for row in rows}),
        "failed_rows": sum(not row.passed for row in rows),
        "passed": all(row.passed for row in rows),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": "cpu",
    }
    return result


def write_json(rows: list[Row], path: Path) -> None:
    """``{"summary": {...}, "rows": [...]}``: the summary indented for people, one row per line; with
    the peak comparison as ``"peak_through_two_steps"`` when docs/timeline.json is beside it."""
    body = ",\n".join("  " + json.dumps(row.as_dict(), separators=(",", ":")) for row in rows)
    text = '{"summary": ' + json.dumps(summary(rows), indent=1) + ',\n "rows": [\n' + body + "\n ]"
    peak = _read_timeline(path.parent)
    if peak is not None:
        text += ',\n "peak_through_two_steps": ' + _peak_json(peak)
    path.write_text(text + "\n}\n")


def _kib(value: int) -> str:
    return f"{value / 1024:,.1f}"


def _err(row: Row | None) -> str:
    if row is None:
        return ""
    return f"{row.error_pct:+.2f}%"


def _pair(row: Row | None) -> str:
    if row is None:
        return "–"
    return f"{_kib(row.predicted)} / {_kib(row.measured)} ({_err(row)})"


def _activation_table(rows: list[Row]) -> list[str]:
    by_setup: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row.target != "exact":
            by_setup[row.setup].append(row)
    lines = [
        "| Setup | Per layer, worst (KiB pred / meas) | Embedding | Head and loss | Whole model | "
        "Autocast weight copies | Logits workspace |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for setup, setup_rows in by_setup.items():
        named = {row.quantity: row for row in setup_rows}
        layers = [row for row in setup_rows if row.quantity.startswith("layer ")]
        worst_layer = max(layers, key=lambda row: abs(row.error_pct))
        lines.append(
            f"| {setup} | {_pair(worst_layer)} | {_pair(named.get('embedding'))} | {_pair(named.get('head and loss'))} | "
            f"{_pair(named.get('model activations'))} | {_pair(named.get('autocast weight copies'))} | "
            f"{_pair(named.get('logits workspace'))} |"
        )
    return lines


def _states_table(rows: list[Row]) -> list[str]:
    by_setup: dict[str, dict[str, Row]] = defaultdict(dict)
    for row in rows:
        if row.target == "exact":
            by_setup[row.setup][row.quantity] = row
    lines = [
        "| Setup | Weights (B) | Gradients (B) | Master weights (B) | Optimizer states (B) | Error (B) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for setup, named in by_setup.items():
        cells = [f"{named[q].measured:,}" for q in ("weights", "gradients", "master_weights", "optimizer_states")]
        error = sum(abs(row.error_bytes) for row in named.values())
        lines.append(f"| {setup} | {' | '.join(cells)} | {error} |")
    return lines


METHOD = """\
trainmem's numbers are checked against real PyTorch training steps on CPU, and the real-size peaks
of two training steps on a GPU too ("On a GPU"). The harness
(`validation/`, run with `make validate`) builds small, randomly initialised Hugging Face models
from a config object, with no downloads (`HF_HUB_OFFLINE=1`), hands the very same
`config.to_dict()` to `app.core.architecture_from_hf_config`, and compares what the model
predicts through the core's public Python API with what one training step holds.

## What is measured, and how

**Model states** (target: exact). After `loss.backward()` and `optimizer.step()`, the bytes of the
distinct storages of the parameters (tied embeddings count once), of their `.grad` and of every
tensor in `optimizer.state`, against `estimate(...).per_gpu` (`weights_bytes`, `gradients_bytes`,
`master_weights_bytes`, `optimizer_states_bytes`). Optimizers: every one trainmem models that
`torch.optim` provides — Adam, AdamW, SGD, SGD with momentum and Adafactor (torch's Adafactor
has no momentum). Precisions: `fp32`, pure `bf16` (`model.to(torch.bfloat16)`) and
`autocast-bf16` (`torch.autocast("cpu", dtype=torch.bfloat16)` around the forward pass). The
optimizers' 0-d `step` counters are left out on both sides, by design: torch keeps them as 0-d
fp32 tensors on the host unless `capturable` or `fused` is set. Plain PyTorch keeps no master
copy in these three setups, and trainmem predicts none.

**Activations** (target: within 5% per layer and for the whole model). Every tensor autograd
saves for backward passes through `torch.autograd.graph.saved_tensors_hooks`; the harness counts
each distinct storage once (`untyped_storage().nbytes()`, so a view counts its whole storage) in
the region whose forward was running when it was first saved: the embedding, one decoder layer
(module pre- and post-forward hooks), or the head (final norm, output layer and loss). A storage
saved by more than one layer (the rotary cos and sin) is model-level and counted with the
embedding. Set apart from activations: parameters saved by reference (no extra memory);
autocast's bf16 casts of parameters, found through autograd (the saved tensor, or the tensor it
views, comes from a `ToCopyBackward0` on a leaf parameter), compared with
`autocast_weight_copies_bytes` (a temporary in trainmem); and a few 0-d scalars (the loss's
`total_weight`, Gemma's embedding normaliser), 4 bytes each, which neither side counts. The whole-model
figure is embedding + every layer + head and loss (final norm, the output layer's input, the
fp32 log-probabilities and the labels), against `embedding_activations` + L ×
`checkpointed_layer_activations` + `head_activations` (plus `checkpoint_held_activations` under
recomputation).

**Recomputation.** `model.gradient_checkpointing_enable()` (transformers' default,
non-reentrant `torch.utils.checkpoint`). The checkpoint saves each layer's positional input
through the same hooks; the keyword arguments it keeps in its recomputation closure (rotary cos
and sin, position ids, the eager causal mask) stay alive until backward, so the harness wraps
each layer's checkpoint function and counts them too. Under autocast, the layers' weight casts
are then not kept from forward to backward; each layer's recomputation makes them again, so the
harness adds the largest one layer's casts of weight matrices made during backward.

**Logits and loss buffers.** A `TorchDispatchMode` notes the tokens × vocabulary buffers: the
logits, their fp32 upcast (non-fp32 logits), the fp32 gradient `nll_loss_backward` writes and
the fp32 gradient `_log_softmax_backward_data` writes, and the cast of that gradient back to the
logits' dtype. The measured workspace is the logits plus the most of the others alive together:
the two fp32 gradients, which coexist while log_softmax's backward runs (the upcast is freed when
the loss returns; the cast back is made after nll_loss's gradient is freed). It is compared with
`logits_workspace`.

## CPU kernels, stated rather than tolerated

The model has `device="cpu"` (`ActivationSetup.device`) for this validation, so the differences
between the CPU build of torch and CUDA are formulas, not tolerances:

* **Dropout masks.** CPU dropout keeps its scaled mask at the width of the dropped tensor; the
  fused CUDA kernel keeps one byte per element. GPT-2's defaults (0.1 on embeddings, residuals
  and attention) exercise it.
* **sdpa.** With attention dropout 0, CPU sdpa runs a fused flash-style kernel that keeps Q, K,
  V, the output and an fp32 log-sum-exp: no s² term, as trainmem's `flash` setting models (the
  GPU flash kernel keeps the same tensors). With attention dropout > 0 (GPT-2), CPU sdpa falls
  back to the math path, which upcasts to fp32, keeps scaled copies of Q and K, V, the fp32
  softmax, its fp32 mask and the dropped probabilities: trainmem models that path for
  `device="cpu"` when attention dropout is on. On a GPU, flash attention supports dropout and
  keeps no s² tensor.
* **LayerNorm statistics.** The CPU kernel keeps mean and rstd in the input's dtype (bf16 for a
  bf16 model); CUDA keeps them in fp32.
* **GELU.** GPT-2's default `gelu_new` is Python arithmetic that keeps four intermediate-width
  tensors (its input, tanh's output, 0.5·x and 1 + tanh) besides its output; a fused GELU keeps
  one. trainmem models `gelu_new` as written.
* **KV cache.** Recent transformers versions build a KV cache in training unless
  `use_cache=False`; the harness passes `use_cache=False`, as training code should.
* **Measured on a GPU too.** The CUDA side of these formulas (one-byte dropout masks, the flash
  and memory-efficient kernels, the math path CUDA takes for fp32 with grouped K/V heads, a mask
  that rules out flash) is measured on an H200 through two real training steps: "On a GPU".

## Reading the results

Both sides are integer byte counts, so an error of 0.00% means the prediction names every
storage the step kept, at its dtype and shape. The `transformers` formulas in
`app/core/activations.py` give the op-by-op reason for each tensor, including those that only
this measurement revealed: Gemma's fp32 `1 + weight`, the fp32 softmax GPT-2 gets under
autocast, the views multi-query attention keeps at micro-batch 1, and the labels that stay a view
of their padded copy at micro-batch 1. The megatron implementation is not measured here (it
models Megatron-LM's fused kernels, which these models do not run); it stays exact to Korthikanti
et al. 2022, Table 2, as `tests/core` checks.

## Results
"""


LOSSES_FROM_SOURCE: Final = (
    '## Kernels and losses accounted from source',
    '',
    "Liger Kernel's kernels run as Triton kernels, which need a GPU: they are not measured here. Its RMSNorm and SwiGLU",
    "(`training.implementation: liger`) are counted from liger-kernel 0.8.5's source: `LigerRMSNormFunction` keeps its",
    'input in its own dtype and an fp32 reciprocal RMS (`liger_kernel/ops/rms_norm.py`, lines 465-466 and 674-676),',
    '`LigerSiLUMulFunction` keeps gate and up (`swiglu.py`, line 272; GeGLU likewise, `geglu.py`, line 138), and its RoPE',
    "keeps cos and sin (`rope.py`, line 289), as transformers' does. Its fused linear cross entropy",
    "(`training.loss: fused-linear`) likewise. trainmem counts it from liger-kernel 0.8.5's source",
    "(`liger_kernel/ops/fused_linear_cross_entropy.py`): one reused chunk × V buffer of logits in the input's dtype, the",
    "chunk size min(next_power_of_2(⌈BT ÷ ⌈V ÷ H⌉⌉), BT) (lines 103-106, and the source's own example: BT 16,384, V 32,000,",
    "H 4,096 → 2,048), `grad_input` (BT × H) and `grad_weight` (V × H, the weight's dtype) made in forward and saved for",
    'backward (lines 108, 116 and 575), and an fp32 per-token loss (line 125). The chunked loss',
    "(`training.loss: chunked`, torchtune's CEWithChunkedOutputLoss) is measured on CPU (`python -m validation.loss`,",
    '`tests/validation/test_loss.py`): written in plain PyTorch as torchtune writes it, forward and backward under a',
    "dispatch mode that records every tensor of one chunk's tokens × vocabulary by the op that made it. In 4 of 4 cases",
    "(bf16 and fp32; 1, 2, 4 and 8 chunks) each chunk's logits, fp32 upcast, saved fp32 log-probabilities, the two fp32",
    "gradients and the cast back, and how many of each, are exactly the ledger's.",
)


def write_markdown(rows: list[Row], path: Path) -> None:
    result = summary(rows)
    lines = [
        "# Validation: trainmem against measured PyTorch training steps",
        "",
        METHOD,
        f"Measured with torch {result['torch']} (CPU build) and transformers {result['transformers']}: "
        f"{result['configurations']} configurations ({result['model_state_configurations']} for model states, "
        f"{result['activation_configurations']} for activations), families {', '.join(result['families'])}.",
        "",
        "| Quantity | Worst error | Target |",
        "| --- | --- | --- |",
        f"| Model states (weights, gradients, master weights, optimizer states) | "
        f"{result['model_states_max_error_bytes']} bytes | exact |",
        f"| Activations per layer | {result['worst_layer_error_pct']:.2f}% | 5% |",
        f"| Activations, whole model | {result['worst_model_error_pct']:.2f}% | 5% |",
        f"| Embedding (incl. model-level tensors) | {result['worst_embedding_error_pct']:.2f}% | reported |",
        f"| Head and loss | {result['worst_head_error_pct']:.2f}% | reported |",
        f"| Autocast weight copies | {result['worst_autocast_weight_copies_error_pct']:.2f}% | 5% |",
        f"| Logits workspace | {result['worst_logits_workspace_error_pct']:.2f}% | 5% |",
        "",
        f"Worst activation error: **{result['worst_activation_error_pct']:.2f}%**; "
        f"rows outside their target: **{result['failed_rows']}**. The machine-readable table is "
        "[validation.json](validation.json).",
        "",
        "### Activations",
        "",
        "Each cell: predicted / measured KiB (error of the prediction). Setup: family, hidden size h, layers L, "
        "query heads a (/ key-value heads), intermediate size I, vocabulary V, micro-batch b, sequence s, "
        "precision, attention implementation, and `ckpt` for full recomputation.",
        "",
        *_activation_table(rows),
        "",
        "### Model states",
        "",
        "Measured bytes; the error column is the total absolute difference from trainmem's prediction.",
        "",
        *_states_table(rows),
        "",
    ]
    peak = _read_timeline(path.parent)
    if peak is not None:
        lines += peak_section(peak)
    lines += ["", *LOSSES_FROM_SOURCE]
    path.write_text("\n".join(lines))


# --- the peak through two steps (docs/timeline.json, from `python -m validation.timeline`) ----------

PEAK_HEADING = "## Peak through two steps"
TIMELINE_FILE = "timeline.json"

PEAK_METHOD = """\
Out-of-memory happens at the peak of a step, so trainmem follows live memory through two training
steps (step 1, in which the optimizer creates its state, and step 2, which stands for every later
one) and reports the peak with the event in which it happens. The harness
(`validation/timeline.py`, run with `python -m validation.timeline`) records the same on real-size
models: forward, `loss.backward()`, `optimizer.step()` and `optimizer.zero_grad(set_to_none=True)`,
twice, on Llama-3-8B, Qwen2.5-7B and GPT-2 XL built from their published configs.

**How live memory is measured.** A `TorchDispatchMode` notes the distinct untyped storage of every
tensor each ATen operation returns (forward, backward and optimizer; a view counts once), and a
`weakref` callback on each storage marks the moment it is freed (a storage's Python object lives
exactly as long as the storage). Parameters and module buffers are counted from the start; each
micro-batch's token ids are made just before its forward. Module hooks and autograd pre-hooks on
the `grad_fn` of the tensors between the regions (the logits, each layer's output, the first
layer's input) mark the events, and each event records the bytes alive when it ends and the most
alive within it. Nothing reads tensor data, so the real-size models run under
`torch._subclasses.fake_tensor.FakeTensorMode` in seconds on a CPU. Under fake tensors the
harness gives transformers the answer real, unpacked token ids give it
(`masking_utils.find_packed_sequence_indices`), so it skips the causal mask as it does for real
tensors; on small models, fake and real runs then agree at every event to the byte (a test checks).

**Checked against the CPU allocator.** On small models with real tensors, the same steps run
under `torch.profiler.profile(profile_memory=True)`, whose `[memory]` events carry the CPU
allocator's running total (`c10::ProfiledCPUMemoryReporter`). Counting the allocations that
outlive the operation that made them (in the profiler's tree: inside a `PythonDispatchMode`
event and still alive when it ends; plus tensors a Python constructor made and the mode saw
through `aten.lift_fresh`, the optimizers' step counters), the allocator's peak and final total
equal the tracker's to the byte. What the allocator holds beyond that at its own peak is listed
per case below: buffers kernels allocate for themselves and free before returning (the CPU
`_foreach_div_` slow path's 8-byte scalar and its 4-byte cast, oneDNN's packed operand in a
bf16 `aten::mm`), the 8-byte tensors Python numbers become when passed to an operation (kept
when autograd saves them, e.g. the scale of eager attention), and the 5,056-byte RNG state
`torch.utils.checkpoint` keeps per recomputed layer. On a GPU the last two live in host memory.

**What is compared.** trainmem's `estimate(..., device="cpu")` with the case's training setup and
`framework_overhead_bytes=0` (there is no CUDA context on a CPU), for the very config the model was
built from: the peak's bytes (target: within 2%), its event and its step. Per event, trainmem's
bytes are compared with the most memory the event held, except `step start` and `zero_grad`,
compared with the memory alive when they end. trainmem lists the first and the last layer of each
pass; the measurement has every layer. Cases use one micro-batch of 4,096 tokens (GPT-2 XL: 1,024,
its context); `plain` keeps `outputs = model(...)` bound until the next forward replaces it,
`hf-trainer` keeps only the loss, as `transformers.Trainer.compute_loss` does. The base case of
each family is drawn below: trainmem's line, and the measured memory per event.
"""


def _read_timeline(docs: Path) -> dict | None:
    try:
        return json.loads((docs / TIMELINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def peak_summary(cases: list[dict]) -> dict:
    counted = [case for case in cases if "memtracker_peak_bytes" in case]
    return {
        "cases": len(cases),
        "memtracker_cases": len(counted),
        "memtracker_agrees": sum(case["memtracker_peak_bytes"] == case["measured_bytes"] for case in counted),
        "families": sorted({case["family"] for case in cases}),
        "worst_peak_error_pct": round(max((abs(case["error_pct"]) for case in cases), default=0.0), 6),
        "largest_peak_error_bytes": max((abs(case["error_bytes"]) for case in cases), default=0),
        "same_event": sum(case["same_event"] for case in cases),
        "target_pct": 2.0,
        "passed": all(case["passed"] for case in cases),
    }


def _peak_json(data: dict) -> str:
    """The summary and one line per case (without its events; those are in timeline.json)."""
    rows = [{key: value for key, value in case.items() if key not in ("events", "largest_storages_at_peak", "case")}
            for case in data["cases"]]
    body = ",\n".join("   " + json.dumps(row, separators=(",", ":")) for row in rows)
    return '{"summary": ' + json.dumps(peak_summary(data["cases"])) + ',\n  "rows": [\n' + body + "\n  ]}"


def _event(name: str, step: int) -> str:
    return f"step {step}: {name}"


def chart_file(family: str) -> str:
    return f"timeline-{family}.svg"


def _event_kind(name: str) -> str:
    """An event name with its layer number replaced by i."""
    head, _, tail = name.rpartition("layer ")
    return f"{head}layer i" if tail.isdigit() else name


def _differing_events(cases: list[dict], target: float) -> list[str]:
    """Events off by more than `target`, the worst case per family and kind of event, with what the
    measured interval held briefly."""
    worst: dict[tuple[str, str], tuple[dict, dict]] = {}
    for case in cases:
        for event in case["events"]:
            error = event.get("error_pct")
            if error is None or abs(error) <= target:
                continue
            key = (case["family"], _event_kind(event["event"]))
            if key not in worst or abs(error) > abs(worst[key][1]["error_pct"]):
                worst[key] = (case, event)
    lines = []
    for (family, kind), (case, event) in sorted(worst.items()):
        held = "; ".join(
            f"{item['bytes']:,} B {item['dtype']} {item['shape']} from `{item['op']}` ({item['made_during']})"
            for item in event.get("transients", [])[:3]
        )
        lines.append(
            f"* **{family}, {kind}** (worst: {case['label']}, {_event(event['event'], event['step'])}): predicted "
            f"{event['predicted_bytes']:,} B; measured {event['measured_live_bytes']:,} B alive when it ended and "
            f"at most {event['measured_peak_bytes']:,} B within it ({event['error_pct']:+.2f}% outside that range)."
            + (f" Alive at the measured peak and not when the event ended: {held}." if held else "")
        )
    return lines


def peak_section(data: dict) -> list[str]:
    cases = data["cases"]
    result = peak_summary(cases)
    lines = [
        PEAK_HEADING,
        "",
        PEAK_METHOD,
        f"Measured with torch {data['torch']} (CPU build, {data['device']}) and transformers {data['transformers']}: "
        f"{result['cases']} cases, families {', '.join(result['families'])}. Worst peak error: "
        f"**{result['worst_peak_error_pct']:.4f}%** (at most {result['largest_peak_error_bytes']:,} bytes); the "
        f"predicted peak is in the measured peak's event in **{result['same_event']} of {result['cases']}** cases. "
        f"`torch.distributed._tools.mem_tracker.MemTracker`, torch's own storage tracker, run on the same two "
        f"steps (each family's base case, in fp32 and with the hf-trainer loop), reports the measured peak to "
        f"the byte in "
        f"**{result['memtracker_agrees']} of {result['memtracker_cases']}** cases. "
        f"Per case and event, with breakdowns: [{TIMELINE_FILE}]({TIMELINE_FILE}).",
        "",
        "| Case | Predicted (B) | Measured (B) | Error | Predicted event | Measured event |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case in cases:
        lines.append(
            f"| {case['label']} | {case['predicted_bytes']:,} | {case['measured_bytes']:,} | {case['error_pct']:+.4f}% "
            f"| {_event(case['predicted_event'], case['predicted_step'])} "
            f"| {_event(case['measured_event'], case['measured_step'])} |"
        )
    lines += ["", "### Timelines", ""]
    drawn = set()
    for case in cases:
        if case["family"] not in drawn:
            drawn.add(case["family"])
            lines += [f"![{case['label']}]({chart_file(case['family'])})", ""]
    checks = data.get("allocator_cross_check", [])
    if checks:
        lines += [
            "### The tracker against the CPU allocator",
            "",
            "Small models, real tensors, both steps under the profiler. Bytes above what was alive when profiling "
            "started.",
            "",
            "| Case | Tracker peak | Allocator peak, outliving allocations | Allocator peak | Final, both | "
            "Allocator's other allocations alive at its peak |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for check in checks:
            others: dict[str, list[int]] = defaultdict(list)
            for op, size in check["others_at_peak"]:
                others[op].append(size)
            listed = ", ".join(f"{op}: {len(sizes)} × {sizes[0]:,} B" if len(set(sizes)) == 1
                               else f"{op}: {sum(sizes):,} B in {len(sizes)}" for op, sizes in others.items())
            final = (f"{check['tracker_final']:,}" if check["tracker_final"] == check["allocator_final"]
                     else f"{check['tracker_final']:,} / {check['allocator_final']:,}")
            lines.append(f"| {check['label']} | {check['tracker_peak']:,} | {check['allocator_outliving_peak']:,} | "
                         f"{check['allocator_peak']:,} | {final} | {listed or 'none'} |")
        lines.append("")
    differing = _differing_events(cases, result["target_pct"])
    if differing:
        lines += [
            "### Events that differ by more than 2%",
            "",
            "An event agrees when trainmem's bytes lie between the memory alive when it ended and the most "
            "alive within it; these lie outside that range by more than 2% (the worst case per family and kind "
            "of event):",
            "",
            *differing,
            "",
        ]
    return lines


def write_peak_report(data: dict, docs: Path) -> None:
    """Updates docs/VALIDATION.md's peak section and docs/validation.json's ``peak_through_two_steps``
    in place, leaving the rest of both as the full sweep and the other sections' modules wrote them."""
    markdown = docs / "VALIDATION.md"
    if markdown.exists():
        write_section(peak_section(data), markdown)
    else:
        markdown.write_text("\n".join(peak_section(data)) + "\n", encoding="utf-8")
    summary_file = docs / "validation.json"
    if summary_file.exists():
        current = summary_file.read_text(encoding="utf-8").rstrip()
        marker = ',\n "peak_through_two_steps": '
        current = current.split(marker, 1)[0].rstrip().removesuffix("}").rstrip()
        summary_file.write_text(current + marker + _peak_json(data) + "\n}\n")
