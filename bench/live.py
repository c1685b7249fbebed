"""The page's live update in a real Chromium: time from a change to the settled result, and bytes per update.

    python -m bench.live                 # 20 edits of each kind, the update as the page sends it
    python -m bench.live --whole         # the same edits, each update sent whole (no HX-Current-URL)
    python -m bench.live --edits 50

Starts the app (uvicorn, one worker) on a free loopback port in this process, opens the Llama-3-8B preset at
sequence 4,096 in headless Chromium (Debian's, or TRAINMEM_CHROMIUM) and makes two kinds of edit, one after
another: the sequence length up by 8 tokens (typed, then committed as a change event, as leaving the field
does), and the optimizer between AdamW and SGD. For each it prints the median and the 95th percentile of the
time from the change event to the last `htmx:afterSettle` of its answer, and of the answer's bytes: decoded
(raw HTML) and as sent (gzip). With `--whole` the page drops HX-Current-URL from its requests, so the server
cannot tell what the page shows and sends every fragment: the update as it was before it sent only changes.

Not part of `make test` or `make bench`: it needs Chromium and its timings move with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from playwright.sync_api import Page, sync_playwright

CHROMIUM = os.environ.get("TRAINMEM_CHROMIUM", "/usr/bin/chromium")
START = "/?preset=llama-3-8b&seq_len=4096"
WATCH = """(whole) => {
  window.__marks = {change: null, settled: null};
  document.addEventListener('change', () => { window.__marks = {change: performance.now(), settled: null}; }, true);
  document.addEventListener('htmx:afterSettle', () => { window.__marks.settled = performance.now(); });
  if (whole) document.addEventListener('htmx:configRequest', (e) => { delete e.detail.headers['HX-Current-URL']; });
}"""
SETTLED = "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')"


@contextmanager
def _server() -> Iterator[str]:
    from app.main import app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _edit(page: Page, action, field: str, value: str) -> tuple[float, int, int]:
    """(ms from the change to the settled answer, decoded bytes, bytes as sent) for one edit."""
    with page.expect_response(lambda r: r.request.headers.get("hx-request") == "true"
                              and f"{field}={value}" in r.url) as answer:
        action()
    page.wait_for_function(SETTLED)
    page.wait_for_timeout(30)  # any afterSettle still due
    marks = page.evaluate("window.__marks")
    response = answer.value
    sent = int(response.headers.get("content-length") or response.request.sizes()["responseBodySize"])
    return marks["settled"] - marks["change"], len(response.body()), sent


def _row(label: str, values: list[float], unit: str) -> str:
    values = sorted(values)
    p95 = values[max(0, int(0.95 * len(values)) - 1)]
    return f"{label:<40} {statistics.median(values):>10,.1f} {p95:>10,.1f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edits", type=int, default=20, help="edits of each kind (default 20)")
    parser.add_argument("--whole", action="store_true", help="send every update whole (no HX-Current-URL)")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set TRAINMEM_CHROMIUM)")
    results: dict[str, list[tuple[float, int, int]]] = {"seq_len +8": [], "optimizer": []}
    with _server() as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + START)
        page.evaluate(WATCH, args.whole)
        seq_len = 4096
        for edit in range(args.edits + 1):  # the first of each kind warms up and is not counted
            seq_len += 8

            def typed(value: int = seq_len) -> None:
                page.fill("#f-seq_len", str(value))
                page.dispatch_event("#f-seq_len", "change")

            timing = _edit(page, typed, "seq_len", str(seq_len))
            if edit:
                results["seq_len +8"].append(timing)
            optimizer = "sgd" if edit % 2 == 0 else "adamw"
            timing = _edit(page, lambda o=optimizer: page.select_option("#f-optimizer", o), "optimizer", optimizer)
            if edit:
                results["optimizer"].append(timing)
        browser.close()
    mode = "each update sent whole" if args.whole else "each update as the page sends it"
    print(f"live update in Chromium, {args.edits} edits of each kind, {mode}")
    print(f"{'':<40} {'median':>10} {'p95':>10}")
    for kind, timings in results.items():
        print(_row(f"{kind}: change to settled", [t[0] for t in timings], "ms"))
        print(_row(f"{kind}: bytes, decoded", [t[1] for t in timings], "B"))
        print(_row(f"{kind}: bytes, as sent (gzip)", [t[2] for t in timings], "B"))


if __name__ == "__main__":
    main()
