"""Latency of the memory model and of the HTTP edges, against targets that keep the page feeling instant.

Targets (95th percentile, one request at a time, on the 2-core development machine):
- the core's estimate for any preset and parallel layout: 10 ms;
- POST /api/v1/estimate through the ASGI stack: 30 ms;
- the page, whole and as the htmx update it swaps on each change: 50 ms.
Exits 1 when a target is missed.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from fastapi.testclient import TestClient

from app import core
from app.main import app

RUNS = 200
TARGETS_MS = {"core": 10.0, "api": 30.0, "page": 50.0}

CASES = [
    ("gpt2, 1 GPU", "gpt2", core.Parallelism()),
    ("llama-3-8b, 1 GPU", "llama-3-8b", core.Parallelism()),
    ("llama-3-70b, dp8 tp8 pp2 ZeRO-1", "llama-3-70b", core.Parallelism(data=8, tensor=8, pipeline=2, zero_stage=1)),
    ("llama-3.1-405b, dp64 tp8 pp18 SP ZeRO-1", "llama-3.1-405b",
     core.Parallelism(data=64, tensor=8, pipeline=18, zero_stage=1, sequence_parallel=True)),
]


def p95_ms(fn: Callable[[], object]) -> tuple[float, float]:
    fn()
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * len(samples)) - 1]


def main() -> int:
    client = TestClient(app)
    failures = 0
    print(f"{'case':<48} {'median ms':>10} {'p95 ms':>10} {'target':>8}")
    rows = []
    for label, preset, parallelism in CASES:
        arch = core.get_preset(preset).architecture
        rows.append(("core", label, lambda a=arch, p=parallelism: core.estimate(architecture=a, parallelism=p,
                                                                                training=core.Training(seq_len=4096))))
    body = {"model": {"preset": "llama-3-70b"}, "training": {"seq_len": 4096},
            "parallelism": {"data": 8, "tensor": 8, "pipeline": 2, "zero_stage": 1}, "gpu": "h100-80gb"}
    rows.append(("api", "POST /api/v1/estimate llama-3-70b", lambda: client.post("/api/v1/estimate", json=body)))
    params = {"preset": "llama-3-8b", "seq_len": "4096", "optimizer": "adamw", "gpu": "h100-80gb"}
    rows.append(("page", "GET / (htmx update)", lambda: client.get("/", params=params, headers={"HX-Request": "true"})))
    rows.append(("page", "GET / (whole page)", lambda: client.get("/", params=params)))
    for kind, label, fn in rows:
        median, p95 = p95_ms(fn)
        target = TARGETS_MS[kind]
        ok = p95 <= target
        failures += not ok
        print(f"{kind + ': ' + label:<48} {median:>10.2f} {p95:>10.2f} {target:>8.0f} {'ok' if ok else 'MISSED'}")
    print("all targets met" if not failures else f"{failures} target(s) missed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
