"""The real-size two-step cases on a CUDA GPU, measured by the caching allocator's own counters.

``python -m validation.gpu run RESULTS.json`` (on a machine with a CUDA GPU) builds each case's model
on the GPU from its published config (random weights, as the CPU sweep builds them), runs the same
two training steps as `validation.timeline` with the same event hooks, and records per event
``torch.cuda.memory_allocated()`` when it ends and ``torch.cuda.max_memory_allocated()`` within it
(the peak counter is reset at every event). Cases trainmem predicts to fit run first; then the
nearest few it predicts not to fit, to see whether they really run out of memory.

``python -m validation.gpu write RESULTS.json...`` (anywhere; the runs published are kept in
validation/gpu-runs/) compares them with trainmem's
``estimate(..., device="cuda")`` for the same configs and writes the section "On a GPU" of
docs/VALIDATION.md, with the results kept beside it in docs/gpu.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

# Set before torch starts CUDA: grown segments instead of fixed ones, so an almost-full GPU is
# not refused for fragmentation. The allocator's counters (bytes handed to tensors) are the same.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402
import transformers  # noqa: E402

from app.core import Estimate, architecture_from_hf_config, estimate  # noqa: E402
from validation import peak  # noqa: E402
from validation import timeline as tl  # noqa: E402
from validation.sections import write_section  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADING = "## On a GPU"
VERDICT_CHECKS = 3  # how many of the cases predicted not to fit are run, nearest first

# Cases whose measured peak lies in another event than trainmem's, and why (read off the per-event comparison).
KNOWN_DIFFERENCES = {
    "deepseek-v2-lite b1 s4096 bf16 sgd-momentum(foreach) sdpa plain":
        "the peak is in the backward of the last mixture-of-experts layer (layer 2), just before the dense first "
        "layer's; trainmem's timeline lists the first and the last layer of each pass, and its \"backward: layer 1\" "
        "holds the dense layer's backward, lighter than an expert layer's, so it names that event and comes out "
        "low.",
}


class AllocatorCounters:
    """What `timeline.Timeline` reads from its tracker, taken from the CUDA caching allocator: the
    bytes held by tensors now and the most since the last reset, above what was held before the case."""

    def __init__(self, base_bytes: int) -> None:
        self.base_bytes = base_bytes
        self.log: list = []  # a Timeline point notes len(log) as its index; there is no log here
        self.interval_peak_index = 0
        self.where = self.origin = ""
        self.max_reserved_bytes = 0  # the most the allocator held from the GPU (tensors, rounding, cache)

    @property
    def live(self) -> int:
        return torch.cuda.memory_allocated() - self.base_bytes

    @property
    def interval_peak(self) -> int:
        return torch.cuda.max_memory_allocated() - self.base_bytes

    def reset_interval(self) -> None:
        self.max_reserved_bytes = max(self.max_reserved_bytes, torch.cuda.max_memory_reserved())
        torch.cuda.reset_peak_memory_stats()

    def set_role(self, tensor: torch.Tensor, role: str) -> None:
        """Roles name what the CPU tracker's storages hold; the allocator's counters have no such detail."""


def gpu_cases() -> list[tl.TimelineCase]:
    """The real-size sweep, and cases that only a GPU decides: fp32 with grouped K/V heads, where CUDA's
    sdpa runs the math kernel (flash refuses fp32, memory-efficient refuses grouped K/V) and keeps
    the probabilities (1,024 tokens, so that the weights, gradients and momentum fit beside them);
    and LoRA on Llama-3-8B."""
    llama = tl.TimelineCase("llama-3-8b")
    return [
        *tl.real_size_cases(),
        replace(llama, precision="fp32", optimizer="sgd-momentum", seq=1024),
        tl.TimelineCase("qwen2.5-7b", precision="fp32", optimizer="sgd-momentum", seq=1024),
        replace(llama, lora_rank=16, lora_targets=("q_proj", "v_proj")),
        replace(llama, lora_rank=16, lora_targets=("all-linear",)),
    ]


def newer_cases() -> list[tl.TimelineCase]:
    """Families validated on CPU at small size only, at their real size: Qwen3-8B, OLMo 2 7B and Gemma 3 1B
    trained in full (Gemma's 512-token window at 4,096 tokens makes transformers pass sdpa a mask), and LoRA
    on the attention of Mixtral-8x7B and Qwen3-30B-A3B; the sweep's base case again, to show the run repeats."""
    lora = {"lora_rank": 16, "lora_targets": ("q_proj", "v_proj")}
    return [
        tl.TimelineCase("llama-3-8b"),
        tl.TimelineCase("qwen3-8b"),
        tl.TimelineCase("olmo-2-7b"),
        tl.TimelineCase("gemma-3-1b"),
        tl.TimelineCase("gemma-3-1b", precision="fp32"),
        tl.TimelineCase("gemma-3-1b", attention="eager"),
        tl.TimelineCase("qwen3-8b", checkpointing="full"),
        tl.TimelineCase("mixtral-8x7b", **lora),
        tl.TimelineCase("qwen3-30b-a3b", **lora),
    ]


def larger_cases() -> list[tl.TimelineCase]:
    """Mixtures of experts with their own attention at real size (gpt-oss-20b's eager attention with sinks and a
    128-token window under LoRA; DeepSeek-V2-Lite's latent attention, which CUDA's sdpa gives the memory-efficient
    kernel, trained in full), and what grows with the tokens: 16,384 and 32,768 tokens, four sequences a batch,
    recomputation over long sequences."""
    lora = {"lora_rank": 16, "lora_targets": ("q_proj", "v_proj")}
    return [
        tl.TimelineCase("gpt-oss-20b", attention="eager", **lora),
        tl.TimelineCase("deepseek-v2-lite", optimizer="sgd-momentum"),
        tl.TimelineCase("llama-3-8b", seq=16384, **lora),
        tl.TimelineCase("llama-3-8b", batch=4, **lora),
        tl.TimelineCase("llama-3-8b", seq=32768, checkpointing="full", **lora),
        tl.TimelineCase("qwen3-8b", seq=16384, checkpointing="full"),
        tl.TimelineCase("mixtral-8x7b", seq=8192, checkpointing="full", **lora),
        tl.TimelineCase("deepseek-v2-lite"),
        tl.TimelineCase("llama-3-8b", seq=32768, **lora),
        tl.TimelineCase("gpt-oss-20b", attention="eager", seq=8192, **lora),
    ]


def fp8_cases() -> list[tl.TimelineCase]:
    """torchao's float8 training (torchtitan's recipe) on Llama-3-8B and Qwen3-8B in bf16: the peak, and events
    around the layers where the float8 copies live."""
    llama = tl.TimelineCase("llama-3-8b", fp8="torchao")
    return [llama, replace(llama, loop="hf-trainer"), replace(llama, checkpointing="full"),
            replace(llama, implementation="fused"), tl.TimelineCase("qwen3-8b", fp8="torchao"),
            replace(llama, seq=16384, checkpointing="full")]


def mlp_cases() -> list[tl.TimelineCase]:
    """Mistral-7B (a 32,000-token vocabulary): at long sequences under recomputation the end of backward, where a
    layer's MLP backward works beside every gradient, decides the peak rather than the loss."""
    sgd = tl.TimelineCase("mistral-7b", seq=16384, checkpointing="full", optimizer="sgd-momentum")
    return [sgd, replace(sgd, seq=32768), replace(sgd, optimizer="adamw"), replace(sgd, seq=8192, checkpointing="none"),
            replace(sgd, seq=32768, optimizer="adamw", lora_rank=16, lora_targets=("q_proj", "v_proj")),
            replace(sgd, precision="fp32")]


def norm_cases() -> list[tl.TimelineCase]:
    """LoRA under recomputation at 32,768 tokens on the families whose layer backward differs: a norm after the
    MLP (OLMo 2, Gemma 3) and RMSNorm over each head of Q and K (Qwen3)."""
    lora = {"lora_rank": 16, "lora_targets": ("q_proj", "v_proj"), "seq": 32768, "checkpointing": "full"}
    return [tl.TimelineCase("olmo-2-7b", **lora), tl.TimelineCase("gemma-3-1b", **lora),
            tl.TimelineCase("qwen3-8b", **lora)]


CASE_SETS = {"sweep": gpu_cases, "newer": newer_cases, "larger": larger_cases, "fp8": fp8_cases, "mlp": mlp_cases,
             "norms": norm_cases}


def predict(case: tl.TimelineCase, config: dict) -> Estimate:
    return estimate(architecture=architecture_from_hf_config(config), training=peak.training(case), device="cuda")


def planned(cases: list[tl.TimelineCase], capacity_bytes: int) -> list[tuple[tl.TimelineCase, int]]:
    """(case, predicted peak) in the order they run: those predicted to fit, then the nearest that are not."""
    predicted = [(case, predict(case, case.config().to_dict()).peak.bytes) for case in cases]
    fits = [pair for pair in predicted if pair[1] <= capacity_bytes]
    over = sorted((pair for pair in predicted if pair[1] > capacity_bytes), key=lambda pair: pair[1])
    return fits + over[:VERDICT_CHECKS]


def measure(case: tl.TimelineCase, device: str = "cuda") -> dict:
    """Two steps of one case on the GPU: per event, bytes allocated when it ended and the most within it.
    (`device` "cpu" runs the same code where there is no GPU, with the counters patched, as a test does.)"""
    started = time.monotonic()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    counters = AllocatorCounters(torch.cuda.memory_allocated())
    out: dict = {"label": case.label, "case": case.as_dict(), "base_bytes": counters.base_bytes}
    timeline = None
    try:
        with torch.device(device):
            model, config = tl.build_model(case, in_dtype=True)
            model.to(device)  # in case a constructor ignored the device context
            out["config"] = config
            optimizer = tl.make_optimizer(model.parameters(), case.optimizer, case.implementation)
            timeline = tl.Timeline(counters, model, optimizer, accumulation=case.accumulation)
            out["baseline_bytes"] = counters.live
            counters.reset_interval()
            with timeline.hooks():
                tl.train_two_steps(model, optimizer, timeline, case)
            torch.cuda.synchronize(device)
            out["end_live_bytes"] = counters.live
    except torch.OutOfMemoryError as error:
        last = timeline.points[-1] if timeline is not None and timeline.points else None
        out["out_of_memory"] = {
            "during": counters.where,  # the event Timeline had open, "step N: name"
            "after": None if last is None else {"step": last.step, "event": last.event},
            "interval_peak_bytes": counters.interval_peak,
            "message": str(error).splitlines()[0][:300],
        }
    out["points"] = [] if timeline is None else [
        {"step": p.step, "event": p.event, "live_bytes": p.live, "peak_bytes": p.peak} for p in timeline.points]
    counters.reset_interval()
    out["max_reserved_bytes"] = counters.max_reserved_bytes
    out["seconds"] = round(time.monotonic() - started, 2)
    return out


def environment() -> dict:
    free, total = torch.cuda.mem_get_info()
    packages = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import peft

        packages["peft"] = peft.__version__
    except ImportError:
        pass
    return {"gpu": torch.cuda.get_device_name(), "total_bytes": total, "free_bytes_at_start": free,
            "python": platform.python_version(), "packages": packages}


def extra_packages() -> dict[str, str]:
    """Packages some cases need beyond the image's (torchao for float8), where present."""
    try:
        import torchao
    except ImportError:
        return {}
    return {"torchao": torchao.__version__}


def warm_up() -> int:
    """Runs the kernels every case uses once (matrix products in both dtypes, attention forward and
    backward) so that the libraries' workspaces, which stay allocated for the process, are in place
    before the first case; returns what they hold."""
    for dtype in (torch.bfloat16, torch.float32):
        q = torch.randn(1, 2, 64, 64, device="cuda", dtype=dtype, requires_grad=True)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        (q[0, 0] @ q[0, 0]).sum().backward()
        del q
    torch.cuda.synchronize()
    gc.collect()
    return torch.cuda.memory_allocated()


def run(path: Path, seconds: float, case_set: str = "sweep") -> int:
    transformers.logging.set_verbosity_error()
    started = time.monotonic()
    results: dict = {"environment": environment(), "extra_packages": extra_packages(), "workspace_bytes": warm_up(),
                     "cases": [], "not_run": []}
    capacity = results["environment"]["total_bytes"]
    for case, predicted in planned(CASE_SETS[case_set](), capacity):
        if time.monotonic() - started > seconds:
            results["not_run"].append(case.label)
            continue
        try:
            row = measure(case)
        except Exception as error:  # a case the packages there cannot run: say so, go on with the others
            results["not_run"].append(f"{case.label}: {type(error).__name__}: {str(error)[:300]}")
            print(f"{case.label}: not run: {type(error).__name__}: {error}", flush=True)
            continue
        row["predicted_on_device_bytes"] = predicted
        results["cases"].append(row)
        measured = max((p["peak_bytes"] for p in row["points"]), default=0)
        outcome = "OUT OF MEMORY" if "out_of_memory" in row else f"peak {measured:,} B"
        print(f"{case.label}: predicted {predicted:,} B, {outcome} ({row['seconds']} s)", flush=True)
        path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


# --- the comparison (no GPU needed) ----------------------------------------------------------------


def case_from(data: dict) -> tl.TimelineCase:
    """The case a result was measured for (`TimelineCase.as_dict`, read back)."""
    fields = {name: value for name, value in data.items() if name in tl.TimelineCase.__dataclass_fields__}
    fields["lora_targets"] = tuple(fields.get("lora_targets", ()))
    if fields.get("size") is not None:
        raise ValueError("the GPU cases are real-size models, built from published configs")
    return tl.TimelineCase(**fields)


def compared(result: dict) -> peak.PeakRow:
    """trainmem's CUDA timeline against the allocator's, event by event (`validation.peak.compare`)."""
    case = case_from(result["case"])
    points = [tl.Point(p["step"], p["event"], p["live_bytes"], p["peak_bytes"], 0, 0) for p in result["points"]]
    measured = tl.Measurement(case, result["config"], points, result["baseline_bytes"], result["end_live_bytes"],
                              [], result["seconds"], tracker=None)
    return peak.compare(measured, predict(case, result["config"]))


def _event(name: str, step: int) -> str:
    return f"step {step}: {name}"


def merged(runs: list[dict]) -> dict:
    """Several runs' results as one: the same GPU and packages, each case once (a case run again is compared
    with its first run: `repeats`)."""
    first = runs[0]
    for other in runs[1:]:
        if (other["environment"]["gpu"], other["environment"]["packages"]) != (
                first["environment"]["gpu"], first["environment"]["packages"]):
            raise ValueError("results from different GPUs or packages: publish them apart")
    cases: dict[str, dict] = {}
    repeats = []
    for run_results in runs:
        for result in run_results["cases"]:
            if result["label"] in cases:
                repeats.append((result["label"], _peak(cases[result["label"]]), _peak(result)))
            else:
                cases[result["label"]] = result
    extra = {name: version for run_results in runs for name, version in run_results.get("extra_packages", {}).items()}
    return first | {"cases": list(cases.values()), "repeats": repeats, "extra_packages": extra,
                    "not_run": [label for run_results in runs for label in run_results["not_run"]]}


def _peak(result: dict) -> int:
    return max((point["peak_bytes"] for point in result["points"]), default=0)


def _unallocated_gib(message: str) -> float:
    """From torch's out-of-memory message: the process's memory in use less what PyTorch allocated, in GiB."""
    in_use = re.search(r"this process has ([0-9.]+) GiB memory in use", message)
    allocated = re.search(r"Of the allocated memory ([0-9.]+) GiB is allocated by PyTorch", message)
    if in_use is None or allocated is None:
        raise ValueError(f"an out-of-memory message of another form: {message[:120]!r}")
    return float(in_use.group(1)) - float(allocated.group(1))


def _oom_event(result: dict) -> str:
    """The event a case ran out of memory in. Results that do not name it (`during`, recorded since) name the
    event before it: after the last micro-batch's "backward: embedding" comes the step's optimizer.step."""
    oom = result["out_of_memory"]
    if oom.get("during"):
        return oom["during"]
    after = oom["after"]
    if after is None:
        return "the model's build"
    accumulation = result["case"]["accumulation"]
    last = "backward: embedding" if accumulation == 1 else f"micro-batch {min(accumulation, 2)}: backward: embedding"
    if after["event"] == last:
        return _event("optimizer.step", after["step"])
    return f"the event after {_event(after['event'], after['step'])}"


def section(results: dict) -> tuple[list[str], dict]:
    """The Markdown section and its JSON: every case that ran, and those predicted not to fit."""
    env = results["environment"]
    capacity = env["total_bytes"]
    ran = [result for result in results["cases"] if "out_of_memory" not in result]
    rows = [compared(result) for result in ran]
    over = [result for result in results["cases"] if "out_of_memory" in result]
    worst = max(rows, key=lambda row: abs(row.error_pct))
    same = sum(row.same_event for row in rows)
    packages = ", ".join(f"{name} {version}" for name, version in (env["packages"] | results.get("extra_packages", {})).items())
    held = [(result, _peak(result)) for result in ran if "max_reserved_bytes" in result]
    pressure = sorted(_unallocated_gib(result["out_of_memory"]["message"]) for result in over)
    context = capacity - env["free_bytes_at_start"]
    beyond = sorted(context + result["max_reserved_bytes"] - peak_bytes for result, peak_bytes in held)
    lines = [
        HEADING,
        "",
        "The real-size cases of the two-step sweep above, run on a GPU for real "
        "(`python -m validation.gpu run`, then `write`): each model built on the GPU from its published config "
        "(random weights), the same two steps and the same event hooks as on CPU, and per event the CUDA caching "
        "allocator's own counters: `torch.cuda.memory_allocated()` when the event ends and "
        "`torch.cuda.max_memory_allocated()` within it (the peak counter reset at every event). The prediction is "
        "trainmem's `estimate(..., device=\"cuda\")` for the very config the model was built from, with "
        "`framework_overhead_bytes=0`: the CUDA kernels decide what attention keeps (flash for 16-bit with a head of "
        "at most 256; memory-efficient unless K/V heads are grouped; else math, which keeps the probabilities). "
        "Cases only a GPU decides are added: fp32 Llama-3-8B and Qwen2.5-7B, whose grouped K/V heads send fp32 "
        "attention to the math kernel (1,024 tokens, so that it fits), and LoRA on Llama-3-8B; and families "
        "validated on CPU at small size only, at their real size: Qwen3-8B, OLMo 2 7B and Gemma 3 1B (whose "
        "512-token window makes transformers give sdpa a mask at 4,096 tokens), and LoRA on the attention of "
        "Mixtral-8x7B and Qwen3-30B-A3B (`--cases newer`); larger mixtures and longer sequences (`--cases larger`); "
        "torchao's float8 training, torchtitan's recipe, on the H200's FP8 matmuls (`--cases fp8`); and Mistral-7B, "
        "whose small vocabulary lets a layer's backward decide the peak at long sequences (`--cases mlp`); LoRA at "
        "32,768 tokens under recomputation on OLMo 2, Gemma 3 and Qwen3 (`--cases norms`).",
        "",
        f"Measured on one {env['gpu']} ({capacity:,} B; the CUDA context took "
        f"{capacity - env['free_bytes_at_start']:,} B before any tensor) with Python {env['python']}, {packages}. "
        f"Before the first case, a warm-up left {results['workspace_bytes']:,} B allocated (cuBLAS's workspaces, "
        "kept for the process); each case is measured above what was allocated when it began, and trainmem counts "
        "such buffers in the GPU catalogue's workspace, and the CUDA context beside the allocator. "
        f"{len(rows)} cases ran. Worst peak error: **{worst.error_pct:+.4f}%** ({worst.error_bytes:+,} B, "
        f"{worst.label}); the predicted peak is in the measured peak's event in **{same} of {len(rows)}** cases.",
        *(["", " ".join(
            f"{label}, run again on a fresh machine: {first:,} B then {again:,} B "
            f"({'the same to the byte' if first == again else f'{again - first:+,} B'})."
            for label, first, again in results["repeats"])] if results.get("repeats") else []),
        *(["", "What the GPU needs beyond the tensors (modelled in \"Reserved memory and the verdict\" below): "
               f"at the {len(pressure)} out-of-memory "
               "errors, PyTorch's own message put the process's memory in use "
               f"{min(pressure):.2f} to {max(pressure):.2f} GiB above what was allocated to tensors (the CUDA "
               "context and the caching allocator's unallocated reserve). With room to spare the allocator keeps "
               "freed blocks cached instead, and gives them back before it fails: in the "
               f"{len(held)} cases that recorded it, the context and the most reserved came to {beyond[0]:,} B to "
               f"{beyond[-1]:,} B beyond the peak (median {beyond[len(beyond) // 2]:,} B; the most with long "
               "sequences under recomputation)."] if held and pressure else []),
        "",
        "| Case | Predicted (B) | GPU peak (B) | Error | Predicted event | Measured event | Worst listed event |",
        "| --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for row in rows:
        event = row.worst_events(1)[0]
        lines.append(
            f"| {row.label} | {row.predicted:,} | {row.measured:,} | {row.error_pct:+.4f}% | "
            f"{_event(row.predicted_event, row.predicted_step)} | {_event(row.measured_event, row.measured_step)} | "
            f"{event.error_pct:+.3f}% ({_event(event.event, event.step)}) |")
    differing = [row for row in rows if not row.same_event]
    if differing:
        lines += ["", "**Where the peak's event differs:**", "",
                  *(f"- {row.label} ({row.error_bytes:+,} B, {row.error_pct:+.2f}%): "
                    f"{KNOWN_DIFFERENCES.get(row.label, 'not yet explained.')}" for row in differing)]
    if over:
        lines += [
            "",
            f"**Predicted not to fit.** Cases predicted above the card's {capacity:,} B (the nearest of each set) "
            "were run too, to see whether they do run out of memory"
            + (", and every one did:" if not [row for row in rows if row.predicted > capacity] else
               "; these did not: " + ", ".join(row.label for row in rows if row.predicted > capacity) + ". These did:"),
            "",
            "| Case | Predicted (B) | Predicted peak event | What happened |",
            "| --- | ---: | --- | --- |",
        ]
        for result in over:
            case = case_from(result["case"])
            forecast = predict(case, result.get("config") or case.config().to_dict()).peak
            oom = result["out_of_memory"]
            then = result["predicted_on_device_bytes"]
            run_as = (f" Run as one that fits: predicted {then:,} B when measured, before the math path's transients "
                      "were counted." if then <= capacity else "")
            lines.append(f"| {result['label']} | {forecast.bytes:,} | {_event(forecast.event, forecast.step)} | "
                         f"out of memory in {_oom_event(result)}, with {oom['interval_peak_bytes']:,} B allocated."
                         f"{run_as} |")
    summary = {"gpu": env["gpu"], "torch": env["packages"]["torch"], "transformers": env["packages"]["transformers"],
               "cases": len(rows), "same_event": same, "worst_peak_error_pct": round(abs(worst.error_pct), 4),
               "target_pct": peak.PEAK_TARGET_PCT, "predicted_not_to_fit": len(over),
               "ran_out_of_memory": sum("out_of_memory" in result for result in over)}
    data = {"summary": summary, "environment": env, "workspace_bytes": results["workspace_bytes"],
            "capacity_bytes": capacity,
            "cases": [row.as_dict(events=False) | {"worst_events": [event.as_dict() for event in row.worst_events(3)]}
                      for row in rows],
            "predicted_not_to_fit": [{key: value for key, value in result.items() if key != "config"} for result in over],
            "runs": "validation/gpu-runs/"}
    return lines, data


def write(paths: list[Path], docs: Path = DOCS) -> int:
    results = merged([json.loads(path.read_text(encoding="utf-8")) for path in paths])
    lines, data = section(results)
    write_section(lines, docs / "VALIDATION.md")
    (docs / "gpu.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation.gpu", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measure_parser = commands.add_parser("run", help="measure on this machine's CUDA GPU")
    measure_parser.add_argument("results", type=Path)
    measure_parser.add_argument("--cases", choices=sorted(CASE_SETS), default="sweep",
                                help="sweep: the CPU sweep's cases and GPU-only ones (default); newer: other families; "
                                     "larger: larger mixtures, longer sequences; fp8: torchao float8; mlp: where a "
                                     "layer's backward decides the peak; norms: LoRA at long sequences, other layer kinds")
    measure_parser.add_argument("--seconds", type=float, default=300.0,
                                help="start no case after this many seconds (default: 300)")
    write_parser = commands.add_parser("write", help="compare saved results with trainmem and write the section")
    write_parser.add_argument("results", type=Path, nargs="+", help="one or more runs' results")
    args = parser.parse_args(argv)
    if args.command == "run":
        if not torch.cuda.is_available():
            print("no CUDA GPU here", file=sys.stderr)
            return 2
        return run(args.results, args.seconds, args.cases)
    return write(args.results)


if __name__ == "__main__":
    sys.exit(main())
