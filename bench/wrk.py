"""Latency of POST /api/v1/estimate under wrk: many connections, each request a setup the server has not seen.

    python -m bench.wrk                        # starts `python -m app.serve` on a free loopback port
    python -m bench.wrk --url http://127.0.0.1:8000 --connections 64 --seconds 30

The bodies are drawn once, from a seed: a curated preset (the sequence classifiers left out, as they refuse
selective recomputation), a sequence length, a micro-batch, a recomputation, a data-parallel degree, a ZeRO stage and
a GPU; each is checked against the core first, so that every one is answered 200. wrk (Debian's `wrk`) sends them in
turn from a Lua script, after a warm-up, and reports its latency distribution. The target of issue 25 is a p99 under
150 ms with 64 connections on an idle 2-core machine; it is printed as met or not, and the run fails only on errors
(a non-2xx answer or a socket error).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from app import core, wire
from app.core.families import family_of
from bench.load import start_server

SEED = 25
BODIES = 4_000
TARGET_P99_MS = 150.0
SEQUENCES = (512, 1024, 2048, 4096, 8192)
RECOMPUTATION = ("none", "full", "selective")
DATA = (1, 2, 4, 8)


def bodies(count: int = BODIES, seed: int = SEED) -> list[dict[str, Any]]:
    """`count` estimate bodies the core answers, drawn from `seed` (a body it refuses is drawn again)."""
    rng = random.Random(seed)
    presets = sorted(name for name, preset in core.model_presets().items()
                     if "/" not in name and preset.architecture is not None
                     and family_of(preset.architecture).classifier is None)
    gpus = sorted(core.gpu_catalogue())
    out: list[dict[str, Any]] = []
    while len(out) < count:
        body = {"model": {"preset": rng.choice(presets)},
                "training": {"seq_len": rng.choice(SEQUENCES), "micro_batch_size": rng.randint(1, 8),
                             "activation_checkpointing": rng.choice(RECOMPUTATION)},
                "parallelism": {"data": rng.choice(DATA), "zero_stage": rng.randint(0, 3)},
                "gpu": rng.choice(gpus)}
        try:
            wire.job_from(body).estimate(reserve=False)
        except core.DomainError:
            continue
        out.append(body)
    return out


def script(sent: list[dict[str, Any]]) -> str:
    """wrk's Lua: each thread sends the bodies in turn, from an offset of its own."""
    table = ",\n".join(json.dumps(json.dumps(body, separators=(",", ":"))) for body in sent)
    return f"""local bodies = {{
{table}
}}
local next_body = 1
setup = function(thread)
  thread:set("offset", math.random(#bodies))
end
init = function(args)
  next_body = offset or 1
end
request = function()
  local body = bodies[next_body]
  next_body = next_body % #bodies + 1
  return wrk.format("POST", "/api/v1/estimate", {{["Content-Type"] = "application/json"}}, body)
end
"""


def run_wrk(url: str, lua: Path, connections: int, seconds: int) -> str:
    command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "10s", "-s", str(lua),
               url]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=seconds + 60).stdout


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def summary(output: str) -> dict[str, float]:
    """Requests, requests a second, errors and the latency percentiles (ms) from wrk's report."""
    found = {f"p{q}": _ms(value) for q, value in re.findall(r"^\s+(50|90|99)%\s+(\S+)", output, re.MULTILINE)}
    found["requests"] = float(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    found["per_second"] = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    found["errors"] = float((int(non_2xx.group(1)) if non_2xx else 0)
                            + (sum(map(int, sockets.groups())) if sockets else 0))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one on a free loopback port)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--warm-up", type=int, default=10, help="seconds sent first and not counted")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk: not installed (Debian: apt-get install wrk); nothing measured")
        return 0
    process, url = (None, args.url) if args.url else start_server()
    try:
        with tempfile.TemporaryDirectory() as folder:
            lua = Path(folder) / "estimates.lua"
            lua.write_text(script(bodies()))
            if args.warm_up:
                run_wrk(url, lua, args.connections, args.warm_up)
            result = summary(run_wrk(url, lua, args.connections, args.seconds))
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
    met = "met" if result["p99"] < TARGET_P99_MS else "not met"
    print(f"wrk: {url}, {args.connections} connections, {args.seconds} s after {args.warm_up} s of warm-up, "
          f"{BODIES:,} setups in turn")
    print(f"{result['requests']:,.0f} requests, {result['per_second']:.1f} a second, {result['errors']:.0f} errors; "
          f"latency p50 {result['p50']:.0f} ms, p90 {result['p90']:.0f} ms, p99 {result['p99']:.0f} ms "
          f"(target under {TARGET_P99_MS:.0f} ms: {met})")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
