"""Load: the real server under concurrent requests, its throughput against a bare endpoint, and its memory.

    python -m bench.load                       # starts `python -m app.serve` on a free loopback port
    python -m bench.load --url http://127.0.0.1:8000 --pid 1234   # a running server (RSS needs its pid)

Two parts, both with `--concurrency` (32) connections kept alive:
1. Throughput of one route at a time, `--throughput-requests` (3,000) each: GET /healthz (the bare endpoint: the
   same app, middleware included, with no work of its own; an `async def` route like the estimate's, so that
   neither pays for a worker thread the other does not), POST /api/v1/estimate, GET / as htmx's fragment
   (HX-Request) and GET / as the whole page. The ratios estimate ÷ bare and fragment ÷ bare are printed against
   their targets (0.7 and 0.5), in requests per second and in the server's own CPU time per request (from
   /proc/<pid>/stat): the client shares the machine, so at the bare endpoint's rate it is part of what is
   measured, while the CPU ratio says what the server process alone would sustain.
2. `--requests` (20,000) mixed requests: estimates with several bodies, page fragments with several forms and
   whole pages. Latency p50/p99 per route, requests per second, errors (anything but a 200), and the server's
   RSS (VmRSS in /proc/<pid>/status) at the start, the middle and the end.

The client is asyncio over plain sockets (HTTP/1.1, keep-alive), so that it costs the 2-core machine little.
Bounded in count and in time (`--max-seconds`, 600): it stops by itself. Exits 1 when any request failed or
the run stopped before its count; the ratios are reported, not enforced.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"estimate": 0.7, "fragment": 0.5}  # requests per second over the bare endpoint's
REQUEST_TIMEOUT_S = 30.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Request:
    route: str
    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def encode(self, host: str) -> bytes:
        lines = [f"{self.method} {self.path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in self.headers)]
        if self.method == "POST":
            lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


BROWSER = (("Accept", "text/html"), ("Accept-Encoding", "gzip, deflate"))
HTMX = (*BROWSER, ("HX-Request", "true"), ("HX-Target", "summary"))
API = (("Content-Type", "application/json"), ("Accept", "application/json"))

ESTIMATE_BODIES: list[dict[str, Any]] = [
    {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096}, "gpu": "h100-80gb"},
    {"model": {"preset": "gpt2"}, "training": {"micro_batch_size": 8, "seq_len": 1024, "precision": "fp32"}},
    {"model": {"preset": "llama-3-70b"}, "training": {"activation_checkpointing": "full", "attention": "flash"},
     "parallelism": {"data": 8, "tensor": 8, "pipeline": 2, "zero_stage": 1}, "gpu": "h100-80gb"},
    {"model": {"preset": "mistral-7b"}, "training": {"optimizer": "adamw-8bit", "gradient_accumulation_steps": 4},
     "parallelism": {"data": 4, "zero_stage": 3}, "gpu": "a100-40gb"},
    {"model": {"num_params": 13_000_000_000}, "parallelism": {"data": 16, "zero_stage": 2}, "gpu": "a100-80gb"},
]
FORMS = [
    {},
    {"source": "preset", "preset": "llama-3-8b", "seq_len": "4096", "micro_batch_size": "2", "gpu": "h100-80gb"},
    {"source": "preset", "preset": "llama-3-70b", "data": "8", "tensor": "8", "pipeline": "2", "zero_stage": "1",
     "activation_checkpointing": "selective"},
    {"source": "preset", "preset": "qwen2.5-7b", "attention": "eager", "precision": "autocast-bf16", "unit": "GB"},
]


def estimate(body: dict) -> Request:
    return Request("estimate", "POST", "/api/v1/estimate", API, json.dumps(body).encode())


def page(form: dict, *, fragment: bool) -> Request:
    path = "/?" + urlencode(form) if form else "/"
    return Request("fragment" if fragment else "page", "GET", path, HTMX if fragment else BROWSER)


BARE = Request("bare", "GET", "/healthz", (("Accept", "application/json"),))
SINGLE_ROUTE = {
    "bare": [BARE],
    "estimate": [estimate(body) for body in ESTIMATE_BODIES],
    "fragment": [page(form, fragment=True) for form in FORMS],
    "page": [page(form, fragment=False) for form in FORMS],
}


def mixed() -> list[Request]:
    """One cycle of the mix: 2 estimates, 2 fragments and 1 whole page in every 5 requests."""
    estimates = itertools.cycle(SINGLE_ROUTE["estimate"])
    fragments = itertools.cycle(SINGLE_ROUTE["fragment"])
    pages = itertools.cycle(SINGLE_ROUTE["page"])
    cycle = []
    for _ in range(len(ESTIMATE_BODIES) * len(FORMS)):
        cycle += [next(estimates), next(fragments), next(estimates), next(fragments), next(pages)]
    return cycle


# --- the client ---------------------------------------------------------------------------------------------


class ResponseError(Exception):
    pass


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """The status and whether the server keeps the connection, after reading the whole body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        raise ResponseError("a response without Content-Length or chunked encoding")
    return status, headers.get("connection", "").lower() != "close"


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter = field(default_factory=Counter)
    done: int = 0
    wall_s: float = 0.0
    stopped_early: bool = False

    def errors_total(self) -> int:
        return sum(self.errors.values())


async def run_requests(host: str, port: int, requests: list[Request], total: int, concurrency: int,
                       deadline: float, on_progress=None) -> Tally:
    """`total` requests taken in turn from `requests`, over `concurrency` kept-alive connections."""
    tally = Tally()
    encoded = [(request.route, request.encode(f"{host}:{port}")) for request in requests]
    counter = itertools.count()
    start = time.perf_counter()

    async def worker() -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        while True:
            index = next(counter)
            if index >= total:
                break
            if time.monotonic() > deadline:
                tally.stopped_early = True
                break
            route, payload = encoded[index % len(encoded)]
            began = time.perf_counter()
            try:
                if reader is None or writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(payload)
                status, keep = await asyncio.wait_for(read_response(reader), REQUEST_TIMEOUT_S)
                if not keep:
                    writer.close()
                    reader = writer = None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ResponseError,
                    ValueError, IndexError) as error:
                tally.errors[f"{route}: {type(error).__name__}"] += 1
                if writer is not None:
                    writer.close()
                reader = writer = None
                continue
            tally.latencies[route].append(time.perf_counter() - began)
            if status != 200:
                tally.errors[f"{route}: HTTP {status}"] += 1
            tally.done += 1
            if on_progress is not None:
                on_progress(tally.done)
        if writer is not None:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    tally.wall_s = time.perf_counter() - start
    return tally


# --- the server -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = os.environ | {"PORT": str(port), "TRAINMEM_HOST": "127.0.0.1", "TRAINMEM_WORKERS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "app.serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            assert process.stderr is not None  # stderr=PIPE
            raise SystemExit("load: the server exited: " + process.stderr.read().decode()[-2000:])
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as response:
                if response.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("load: the server did not answer /healthz within 30 s")


def rss_kib(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of the process so far."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# --- report ---------------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one on a free loopback port)")
    parser.add_argument("--pid", type=int, help="the running server's process id, for its RSS and CPU time")
    parser.add_argument("--requests", type=int, default=20_000, help="mixed requests (default 20,000)")
    parser.add_argument("--throughput-requests", type=int, default=3_000,
                        help="requests per route in the throughput part (default 3,000)")
    parser.add_argument("--concurrency", type=int, default=32, help="connections at once (default 32)")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="stop after this long (default 600)")
    args = parser.parse_args(argv)

    process = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
    else:
        process, url = start_server()
        pid = process.pid
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127."):
        raise SystemExit("load: only a server on this machine's loopback addresses")
    deadline = time.monotonic() + args.max_seconds
    failed = False
    try:
        print(f"load: {url} (server pid {pid if pid else 'unknown'}), concurrency {args.concurrency}, "
              f"{os.cpu_count()} CPUs")
        # Warm: templates compiled, the model's caches filled, connections made.
        warm = asyncio.run(run_requests(host, port, mixed() + [BARE], 200, 8, deadline))
        if warm.errors_total():
            print(f"load: errors while warming up: {dict(warm.errors)}")
            return 1

        print(f"\n1. Throughput, one route at a time: {args.throughput_requests:,} requests each")
        print(f"{'route':<10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'server CPU ms/req':>18} {'errors':>7}")
        rates: dict[str, float] = {}
        cpu_per_request: dict[str, float] = {}
        for route, requests in SINGLE_ROUTE.items():
            cpu_before = cpu_s(pid)
            tally = asyncio.run(run_requests(host, port, requests, args.throughput_requests, args.concurrency,
                                             deadline))
            cpu_after = cpu_s(pid)
            failed |= bool(tally.errors_total()) or tally.stopped_early
            rates[route] = tally.done / tally.wall_s if tally.wall_s else 0.0
            latencies = tally.latencies[route] or [0.0]
            per_request = "n/a"
            if cpu_before is not None and cpu_after is not None and tally.done:
                cpu_per_request[route] = (cpu_after - cpu_before) / tally.done
                per_request = f"{cpu_per_request[route] * 1000:.2f}"
            print(f"{route:<10} {rates[route]:>8,.0f} {ms(statistics.median(latencies)):>8} "
                  f"{ms(percentile(latencies, 0.99)):>8} {per_request:>18} {tally.errors_total():>7}")
            if tally.errors:
                print(f"           errors: {dict(tally.errors)}")
        for route, target in TARGETS.items():
            ratio = rates[route] / rates["bare"] if rates["bare"] else 0.0
            verdict = "met" if ratio >= target else "not met"
            line = f"ratio {route} ÷ bare: {ratio:.2f} req/s (target ≥ {target}: {verdict})"
            if cpu_per_request.get(route) and cpu_per_request.get("bare"):
                # What one server process could serve if the client cost nothing: the inverse of CPU per request.
                capacity = cpu_per_request["bare"] / cpu_per_request[route]
                line += f"; by server CPU per request {capacity:.2f} ({'met' if capacity >= target else 'not met'})"
            print(line)

        print(f"\n2. Mixed: {args.requests:,} requests (2 estimates, 2 fragments, 1 page in every 5)")
        rss = {"start": rss_kib(pid)}
        half = args.requests // 2

        def progress(done: int) -> None:
            if done == half:
                rss["middle"] = rss_kib(pid)

        tally = asyncio.run(run_requests(host, port, mixed(), args.requests, args.concurrency, deadline, progress))
        rss["end"] = rss_kib(pid)
        failed |= bool(tally.errors_total()) or tally.stopped_early
        print(f"{'route':<10} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for route in ("estimate", "fragment", "page"):
            latencies = tally.latencies[route] or [0.0]
            print(f"{route:<10} {len(tally.latencies[route]):>9,} {ms(statistics.median(latencies)):>8} "
                  f"{ms(percentile(latencies, 0.99)):>8}")
        print(f"requests: {tally.done:,} in {tally.wall_s:.1f} s = {tally.done / tally.wall_s:,.0f} req/s; "
              f"errors: {tally.errors_total()}" + (f" {dict(tally.errors)}" if tally.errors else ""))
        if tally.stopped_early:
            print(f"load: stopped at the time limit ({args.max_seconds:g} s) before the count")
        print(f"server RSS: start {mib(rss['start'])}, middle {mib(rss.get('middle'))}, end {mib(rss['end'])}", end="")
        if rss["start"] and rss["end"]:
            growth = rss["end"] - rss["start"]
            flat = growth <= max(10 * 1024, rss["start"] // 10)
            print(f" ({growth / 1024:+.1f} MiB: {'flat' if flat else 'growing'})")
        else:
            print()
        print("\nload: " + ("FAILED (errors or an early stop)" if failed else "no errors"))
        return 1 if failed else 0
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    raise SystemExit(main())
