"""Hostile inputs against the real server: each is refused with a 4xx within a second, and /healthz keeps
answering within a second while they are sent, one at a time and all at once.

The bounds that make this true: `wire.loads_bounded` (size, nesting, number length, floats) before the API parses
a body, the form's own parsers for the page, and `middleware.Guard` for the body's size.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest

from tests.cpu import wall_slowness

LIMIT_S = 1.0  # on the idle 2-core machine; scaled by how much slower a busy one runs (`tests.cpu.wall_slowness`)
DIGITS = "9" * 4301  # one past Python's 4,300-digit limit on int() from text
JSON = {"content-type": "application/json"}
# One TLS context for every client: httpx builds one per client otherwise (loading the CA bundle, about 40 ms of CPU
# each), though the server is plain HTTP.
TLS = ssl.create_default_context()


@dataclass(frozen=True)
class Bad:
    id: str
    method: str
    path: str
    status: int
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _json(text: str) -> dict:
    return {"body": text.encode(), "headers": JSON}


CASES = [
    Bad("page: num_params 1e999999", "GET", "/?source=params&num_params=1e999999", 422),
    Bad("page: framework overhead 1e999999", "GET", "/?framework_overhead_bytes=1e999999", 422),
    Bad("page: 4,301 digits in num_params", "GET", f"/?source=params&num_params={DIGITS}", 422),
    Bad("page: 4,301 digits in micro_batch_size", "GET", f"/?micro_batch_size={DIGITS}", 422),
    Bad("api: 4,301 digits", "POST", "/api/v1/estimate", 422, **_json(f'{{"model": {{"num_params": {DIGITS}}}}}')),
    Bad("api: hf_config of 100,000 brackets", "POST", "/api/v1/estimate", 422,
        **_json('{"model": {"hf_config": "' + "[" * 100_000 + '"}}')),
    Bad("api: nesting of 100,000 brackets", "POST", "/api/v1/estimate", 422,
        **_json('{"model": {"hf_config": ' + "[" * 100_000 + "]" * 100_000 + "}}")),
    Bad("api: 1e999999", "POST", "/api/v1/estimate", 422, **_json('{"model": {"num_params": 1e999999}}')),
    Bad("api: 2 MB body", "POST", "/api/v1/estimate", 413,
        **_json('{"model": {"preset": "gpt2"}, "pad": "' + "x" * 2_000_000 + '"}')),
    Bad("api: true for zero_stage", "POST", "/api/v1/estimate", 422,
        **_json('{"model": {"preset": "gpt2"}, "parallelism": {"zero_stage": true}}')),
    Bad("api: \"4096\" for seq_len", "POST", "/api/v1/estimate", 422,
        **_json('{"model": {"preset": "gpt2"}, "training": {"seq_len": "4096"}}')),
    Bad("HEAD /", "HEAD", "/", 200),
    # Sizes that drive a loop are checked before the loop: 90 bytes once held the event loop for 6.9 s
    # (per-layer lists built before the layer-count check), and 2**63 layers grew the server to 24 GB.
    Bad("api: gpt_oss with 100,000,000 layers", "POST", "/api/v1/estimate", 422,
        **_json('{"model":{"hf_config":{"model_type":"gpt_oss","num_hidden_layers":100000000}}}')),
    Bad("api: gemma3_text with 2**63 layers", "POST", "/api/v1/estimate", 422,
        **_json('{"model":{"hf_config":{"model_type":"gemma3_text","num_hidden_layers":9223372036854775807}}}')),
    Bad("api: qwen2_moe with 100,000,000 layers", "POST", "/api/v1/solve", 422,
        **_json('{"model":{"hf_config":{"model_type":"qwen2_moe","num_hidden_layers":100000000}}}')),
    Bad("page: gpt_oss with 100,000,000 layers", "GET",
        "/?source=config&hf_config=%7B%22model_type%22%3A%22gpt_oss%22%2C%22num_hidden_layers%22%3A100000000%7D",
        422),
    # tomllib keeps every prefix of a dotted key: 20,000 parts took 9.3 s and 1.8 GB.
    Bad("import: TOML key of 20,000 dotted parts", "POST", "/api/v1/import", 422,
        **_json('{"kind": "auto", "text": "[job]\\n' + "a." * 20_000 + 'a = 1\\n"}')),
    Bad("import: 900 KB of TOML", "POST", "/api/v1/import", 422,
        **_json('{"kind": "torchtitan", "text": "[job]\\n' + "x = 1 #" * 128_000 + '\\n"}')),
    # shlex grows a token a character at a time; variables that double per line grow 4x a line.
    Bad("import: megatron token of 900 KB", "POST", "/api/v1/import", 422,
        **_json('{"kind": "megatron", "text": "--num-layers ' + "a" * 900_000 + '"}')),
    Bad("import: megatron variables doubling per line", "POST", "/api/v1/import", 422,
        **_json('{"kind": "megatron", "text": "A=xxxxxxxxxxxxxxxx\\n'
                + "".join("A=$A$A$A$A\\n" for _ in range(40)) + '--num-layers $A"}')),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server_url():
    port = _free_port()
    env = os.environ | {"PORT": str(port), "TRAINMEM_HOST": "127.0.0.1"}
    process = subprocess.Popen([sys.executable, "-m", "app.serve"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            assert process.stderr is not None
            pytest.fail("the server did not start: " + process.stderr.read().decode()[-2000:])
        time.sleep(0.2)
    # Warm: the page's templates and the model's caches, so that the timings are of the inputs, not the first call.
    with httpx.Client(base_url=url, timeout=10, verify=TLS) as client:
        client.get("/")
        client.post("/api/v1/estimate", json={"model": {"preset": "gpt2"}})
    yield url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class HealthPoller:
    """Polls /healthz from its own thread while the block runs, keeping each answer's start, status and time.

    The block starts after a first answer and ends after an answer to a poll sent once the block's work was done,
    so the polls cover the whole time the hostile requests were in the server.
    """

    def __init__(self, url: str, every_s: float = 0.05) -> None:
        self.url, self.every_s = url, every_s
        self.answers: list[tuple[float, int | str, float]] = []
        self.ended = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=LIMIT_S * 5, verify=TLS) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    status: int | str = client.get(f"{self.url}/healthz").status_code
                except httpx.HTTPError as error:
                    status = type(error).__name__
                self.answers.append((start, status, time.perf_counter() - start))
                self._stop.wait(self.every_s)

    def _wait_for_answer_after(self, moment: float) -> None:
        deadline = time.perf_counter() + LIMIT_S * 10
        while not any(start >= moment for start, _, _ in self.answers) and time.perf_counter() < deadline:
            time.sleep(0.01)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        self._wait_for_answer_after(0.0)
        return self

    def __exit__(self, *_: object) -> None:
        self.ended = time.perf_counter()
        self._wait_for_answer_after(self.ended)
        self._stop.set()
        self._thread.join(timeout=10)

    def check(self, limit_s: float = LIMIT_S) -> None:
        assert len(self.answers) >= 2 and self.answers[-1][0] >= self.ended, self.answers
        late = [(status, round(elapsed, 3)) for _, status, elapsed in self.answers
                if status != 200 or elapsed > limit_s]
        assert not late, f"/healthz failed or was slow: {late}"


def send(url: str, case: Bad) -> tuple[int, bytes, float]:
    # A fresh connection for each: the server closes a connection after refusing a body.
    with httpx.Client(base_url=url, timeout=LIMIT_S * 10, verify=TLS) as client:
        start = time.perf_counter()
        response = client.request(case.method, case.path, content=case.body, headers=case.headers)
        return response.status_code, response.content, time.perf_counter() - start


def _check(case: Bad, status: int, body: bytes, elapsed: float, limit_s: float = LIMIT_S) -> None:
    assert status == case.status, (case.id, status, body[:300])
    assert elapsed < limit_s, (case.id, f"{elapsed:.3f} s against {limit_s:.2f} s")
    if case.method == "HEAD":
        assert body == b""
    else:
        assert 400 <= status < 500


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_refused_within_a_second_while_healthz_answers(server_url, case):
    limit_s = LIMIT_S * wall_slowness()
    with HealthPoller(server_url) as poller:
        _check(case, *send(server_url, case), limit_s)
    poller.check(limit_s)


def test_all_at_once(server_url):
    before = wall_slowness()
    with HealthPoller(server_url) as poller, ThreadPoolExecutor(len(CASES)) as pool:
        results = list(pool.map(lambda case: send(server_url, case), CASES))
    limit_s = LIMIT_S * max(before, wall_slowness(kept_s=0))  # the machine's load while they ran, as near as it can be had
    for case, result in zip(CASES, results, strict=True):
        _check(case, *result, limit_s)
    poller.check(limit_s)
