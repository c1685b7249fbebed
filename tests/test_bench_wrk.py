"""bench/wrk.py: the bodies it sends are all answered, and wrk's report is read as wrk writes it."""

from __future__ import annotations

from app import wire
from bench.wrk import bodies, summary

# Reports of Debian's wrk against this server, with --latency (the spaces it leaves at line ends dropped): one
# clean, one with requests past the timeout.
CLEAN = """Running 15s test @ http://127.0.0.1:8765/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.01s   215.35ms   1.67s    70.05%
    Req/Sec    48.28     58.96   290.00     86.07%
  Latency Distribution
     50%    1.02s
     75%    1.15s
     90%    1.27s
     99%    1.47s
  888 requests in 15.02s, 16.35MB read
Requests/sec:     59.11
Transfer/sec:      1.09MB
"""
TIMED_OUT = CLEAN.replace("  888 requests in 15.02s, 16.35MB read\n", "  888 requests in 15.02s, 16.35MB read\n"
                          "  Socket errors: connect 0, read 0, write 0, timeout 34\n"
                          "  Non-2xx or 3xx responses: 2\n").replace("50%    1.02s", "50%  940.96ms")


def test_the_report_is_read():
    assert summary(CLEAN) == {"p50": 1020.0, "p90": 1270.0, "p99": 1470.0, "requests": 888.0, "per_second": 59.11,
                              "errors": 0.0}
    late = summary(TIMED_OUT)
    assert late["errors"] == 36 and late["p50"] == 940.96


def test_every_body_sent_is_one_the_core_answers():
    sent = bodies(40, seed=7)
    assert len(sent) == 40 and len({str(body) for body in sent}) == 40
    for body in sent:
        assert wire.job_from(body).estimate(reserve=False).peak.bytes > 0
