"""Latency of the memory model and of the HTTP edges, against targets that keep the page feeling instant,
and the core's cost per estimate beside llm-analysis's, a peer calculator, timed in the same run.

Targets (95th percentile, one request at a time, on the 2-core development machine):
- the core's estimate for any preset and parallel layout: 10 ms;
- POST /api/v1/estimate through the ASGI stack: 30 ms;
- the page, whole and as the htmx update it swaps on each change (sent whole, and as only what changed since the
  setup the page shows): 50 ms;
- `trainmem estimate --model gpt2`, process start to exit: 100 ms (the median of 20 runs, bytecode cached).
Targets per call (medians, in microseconds):
- the core's Llama-3-8B estimate (sequence 4,096, micro-batch 1, bf16 with an fp32 master copy, AdamW,
  flash attention, no recomputation, one H100 80GB) in at most a quarter of llm-analysis 0.2.2's
  training analysis of the same setup;
- Llama-3.1-405B (126 layers) at pipeline degree 63 (2 layers a stage) within 1.5x of pipeline degree 1.
llm-analysis runs in its own virtual environment (`make bench` creates it, BENCH_PEERS names it) through
bench/peer_llm_analysis.py; where that environment is missing or the script fails, the comparison is
reported as skipped and its target is not counted.
- POST /api/v1/sweep over 1,000 sequence lengths in at most the time of 25 POST /api/v1/estimate calls
  (the core's own ratio is printed beside it).
Exits 1 when a target is missed.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from fastapi.testclient import TestClient

from app import core
from app.main import app
from bench.timing import RUNS, median_p95, samples_s

TARGETS_MS = {"core": 10.0, "api": 30.0, "page": 50.0, "cli": 100.0}
CLI_RUNS = 20
PEER_RATIO_TARGET = 0.25  # trainmem's median per call over llm-analysis's
PIPELINE_RATIO_TARGET = 1.5  # llama-3.1-405b: median at pipeline 63 over median at pipeline 1

ROOT = Path(__file__).resolve().parent.parent
PEER_SCRIPT = Path(__file__).resolve().parent / "peer_llm_analysis.py"
PEER_TIMEOUT_S = 600

CASES = [
    ("gpt2, 1 GPU", "gpt2", core.Parallelism()),
    ("llama-3-8b, 1 GPU", "llama-3-8b", core.Parallelism()),
    ("llama-3-70b, dp8 tp8 pp2 ZeRO-1", "llama-3-70b", core.Parallelism(data=8, tensor=8, pipeline=2, zero_stage=1)),
    ("llama-3.1-405b, dp64 tp8 pp18 SP ZeRO-1", "llama-3.1-405b",
     core.Parallelism(data=64, tensor=8, pipeline=18, zero_stage=1, sequence_parallel=True)),
]

# The setups timed against llm-analysis: (case id shared with bench/peer_llm_analysis.py, label, preset, pipeline).
PEER_CASES = [
    ("llama-3-8b/pp1", "llama-3-8b, 1 GPU", "llama-3-8b", 1),
    ("llama-3.1-405b/pp1", "llama-3.1-405b, pp1", "llama-3.1-405b", 1),
    ("llama-3.1-405b/pp63", "llama-3.1-405b, pp63", "llama-3.1-405b", 63),
]
PEER_TRAINING = core.Training(micro_batch_size=1, seq_len=4096, precision=core.precision_preset("bf16-fp32-master"),
                              optimizer="adamw", activation_checkpointing="none", attention="flash")
PEER_GPU = "h100-80gb"


def median_p95_ms(fn: Callable[[], object]) -> tuple[float, float]:
    median, p95 = median_p95(samples_s(fn))
    return median * 1e3, p95 * 1e3


def peer_timings() -> tuple[dict | None, str]:
    """llm-analysis's timings from its own environment, or None and why they are missing."""
    venv = Path(os.environ.get("BENCH_PEERS", ROOT / ".venv-peers"))
    if not venv.is_absolute():
        venv = ROOT / venv
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists() or not python.exists():
        return None, f"{venv.name}/ is not installed (`make bench` installs it; it needs PyPI)"
    try:
        done = subprocess.run([str(python), str(PEER_SCRIPT), "--runs", str(RUNS)], capture_output=True, text=True,
                              timeout=PEER_TIMEOUT_S, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{PEER_SCRIPT.name} did not run: {exc}"
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return None, f"{PEER_SCRIPT.name} exited {done.returncode}: {tail}"
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for case, *_ in PEER_CASES:
            float(result["cases"][case]["median_us"])
    except (IndexError, KeyError, TypeError, ValueError) as exc:
        return None, f"{PEER_SCRIPT.name} printed no usable result ({exc!r})"
    return result, ""


def latency_targets() -> int:
    client = TestClient(app)
    failures = 0
    print(f"{'case':<48} {'median ms':>10} {'p95 ms':>10} {'target':>8}")
    rows: list[tuple[str, str, Callable[[], object]]] = []
    for label, preset, parallelism in CASES:
        arch = core.get_preset(preset).architecture

        def call(a: core.Architecture = arch, p: core.Parallelism = parallelism) -> object:
            return core.estimate(architecture=a, parallelism=p, training=core.Training(seq_len=4096))

        rows.append(("core", label, call))
    body = {"model": {"preset": "llama-3-70b"}, "training": {"seq_len": 4096},
            "parallelism": {"data": 8, "tensor": 8, "pipeline": 2, "zero_stage": 1}, "gpu": "h100-80gb"}
    rows.append(("api", "POST /api/v1/estimate llama-3-70b", lambda: client.post("/api/v1/estimate", json=body)))
    params = {"preset": "llama-3-8b", "seq_len": "4096", "optimizer": "adamw", "gpu": "h100-80gb"}
    # The page keeps answers per setup, so a repeated query measures that cache: each keystroke here is a new
    # sequence length (a new setup), as when someone types.
    lengths = itertools.count(4096, 8)

    def keystroke(**headers: str) -> object:
        return client.get("/", params=params | {"seq_len": str(next(lengths))}, headers=headers)

    rows.append(("page", "GET / (htmx update, a new setup each time)", lambda: keystroke(**{"HX-Request": "true"})))
    # As the page sends it: HX-Current-URL names the setup of the previous keystroke, so only what changed comes.
    shown = [params]

    def change() -> object:
        current = params | {"seq_len": str(next(lengths))}
        previous, shown[0] = shown[0], current
        return client.get("/", params=current, headers={"HX-Request": "true",
                                                        "HX-Current-URL": f"http://testserver/?{urlencode(previous)}"})

    rows.append(("page", "GET / (htmx update, only what changed)", change))
    rows.append(("page", "GET / (whole page, a new setup each time)", keystroke))
    rows.append(("page", "GET / (htmx update, the same setup again)",
                 lambda: client.get("/", params=params, headers={"HX-Request": "true"})))
    # What an update leaves to a request of its own: the make-it-fit panel (the solver and its fixes), a new setup
    # each time.
    rows.append(("page", "GET /answers (the make-it-fit panel, a new setup each time)",
                 lambda: client.get("/answers", params=params | {"seq_len": str(next(lengths))})))
    for kind, label, fn in rows:
        median, p95 = median_p95_ms(fn)
        target = TARGETS_MS[kind]
        ok = p95 <= target
        failures += not ok
        print(f"{kind + ': ' + label:<48} {median:>10.2f} {p95:>10.2f} {target:>8.0f} {'ok' if ok else 'MISSED'}")
    median, p95 = cli_startup_ms()
    ok = median <= TARGETS_MS["cli"]  # a fresh process each run: the median, over fewer runs
    failures += not ok
    print(f"{'cli: trainmem estimate --model gpt2 (process start to exit)':<48} {median:>10.2f} {p95:>10.2f} "
          f"{TARGETS_MS['cli']:>8.0f} {'ok' if ok else 'MISSED'}")
    return failures


def cli_startup_ms() -> tuple[float, float]:
    """`trainmem estimate --model gpt2` from process start to exit, as the installed console script (or
    `python -m app.cli` where it is not installed). Bytecode is cached by the warm-up run, as an installed
    package has it, in a directory of its own even where PYTHONDONTWRITEBYTECODE is set."""
    script = Path(sys.executable).with_name("trainmem")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]
    command += ["estimate", "--model", "gpt2"]
    with tempfile.TemporaryDirectory() as cache:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        median, p95 = median_p95(samples_s(lambda: subprocess.run(command, cwd=ROOT, env=env, check=True,
                                                                  stdout=subprocess.DEVNULL), runs=CLI_RUNS))
    return median * 1e3, p95 * 1e3


def peer_targets() -> int:
    # The peer first, so that the two never share the CPU.
    peer, why_not = peer_timings()
    gpu = core.get_gpu(PEER_GPU)
    ours = {}
    for case, _, preset, pipeline in PEER_CASES:
        arch = core.get_preset(preset).architecture
        parallelism = core.Parallelism(data=1, tensor=1, pipeline=pipeline)
        def call(a: core.Architecture = arch, p: core.Parallelism = parallelism) -> object:
            return core.estimate(architecture=a, training=PEER_TRAINING, parallelism=p, gpu=gpu)

        median, p95 = median_p95(samples_s(call))
        ours[case] = (median * 1e6, p95 * 1e6)

    failures = 0
    peer_name = f"llm-analysis {peer['version']}" if peer else "llm-analysis"
    print()
    print(f"core estimate per call, µs (seq 4096, micro-batch 1, bf16 + fp32 master, AdamW, flash, {PEER_GPU}), "
          f"beside {peer_name}")
    print(f"{'case (medians; ratio = trainmem / llm-analysis)':<48} {'trainmem':>10} {'p95':>10} {'llm-an.':>10} "
          f"{'p95':>10} {'ratio':>7} {'target':>8}")
    for case, label, _, _ in PEER_CASES:
        median, p95 = ours[case]
        if peer is None:
            print(f"{label:<48} {median:>10.1f} {p95:>10.1f} {'-':>10} {'-':>10} {'-':>7}")
            continue
        theirs = peer["cases"][case]
        ratio = median / theirs["median_us"]
        verdict = ""
        if case == PEER_CASES[0][0]:
            ok = ratio <= PEER_RATIO_TARGET
            failures += not ok
            verdict = f"{'<= ' + format(PEER_RATIO_TARGET, '.2f'):>8} {'ok' if ok else 'MISSED'}"
        print(f"{label:<48} {median:>10.1f} {p95:>10.1f} {theirs['median_us']:>10.1f} {theirs['p95_us']:>10.1f} "
              f"{ratio:>7.2f} {verdict}".rstrip())
    if peer is None:
        print(f"llm-analysis comparison skipped: {why_not}")

    pp1, pp63 = ours["llama-3.1-405b/pp1"][0], ours["llama-3.1-405b/pp63"][0]
    ratio = pp63 / pp1
    ok = ratio <= PIPELINE_RATIO_TARGET
    failures += not ok
    theirs = "-"
    if peer is not None:
        cases = peer["cases"]
        theirs = f"{cases['llama-3.1-405b/pp63']['median_us'] / cases['llama-3.1-405b/pp1']['median_us']:.2f}x"
    target = "<= " + format(PIPELINE_RATIO_TARGET, ".2f")
    print(f"{'llama-3.1-405b, pipeline 63 / pipeline 1':<48} {ratio:>9.2f}x {'':>10} {theirs:>10} {'':>10} {'':>7} "
          f"{target:>8} {'ok' if ok else 'MISSED'}")
    return failures


SWEEP_VALUES = list(range(128, 128 * 1001, 128))  # 1,000 sequence lengths
SWEEP_RATIO_TARGET = 25.0  # a 1,000-point sweep costs at most 25 single estimates


def sweep_targets() -> int:
    """POST /api/v1/sweep over 1,000 sequence lengths against POST /api/v1/estimate, through the ASGI stack,
    and the same through the core (core.series against core.estimate) for reference."""
    from app.core.job import Job
    from app.core.series import series

    client = TestClient(app)
    body = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"}
    sweep_body = body | {"vary": {"field": "training.seq_len", "values": SWEEP_VALUES}}
    one = median_p95(samples_s(lambda: client.post("/api/v1/estimate", json=body), runs=100))[0]
    many = median_p95(samples_s(lambda: client.post("/api/v1/sweep", json=sweep_body), runs=20))[0]
    job = Job(architecture=core.get_preset("llama-3-8b").architecture, training=core.Training(seq_len=4096),
              gpu=core.get_gpu("h100-80gb"))
    core_one = median_p95(samples_s(job.estimate, runs=100))[0]
    core_many = median_p95(samples_s(lambda: series(job, "training.seq_len", SWEEP_VALUES), runs=20))[0]
    ratio = many / one
    ok = ratio <= SWEEP_RATIO_TARGET
    print()
    print(f"{'sweep of 1,000 sequence lengths (medians)':<48} {'ms':>10} {'estimates':>10} {'target':>8}")
    print(f"{'POST /api/v1/sweep vs POST /api/v1/estimate':<48} {many * 1e3:>10.2f} {ratio:>10.1f} "
          f"{'<= ' + format(SWEEP_RATIO_TARGET, '.0f'):>8} {'ok' if ok else 'MISSED'}")
    print(f"{'core: series vs estimate (reference)':<48} {core_many * 1e3:>10.2f} {core_many / core_one:>10.1f}")
    return 0 if ok else 1


def main() -> int:
    # The side-by-side with llm-analysis first: the peer is timed in a fresh process, so the core is timed in one
    # that has not yet served hundreds of requests (whose objects the garbage collector would walk meanwhile).
    failures = peer_targets() + latency_targets() + sweep_targets()
    print("all targets met" if not failures else f"{failures} target(s) missed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
