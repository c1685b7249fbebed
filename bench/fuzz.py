"""Fuzzing: schemathesis with every phase over every operation of the API's OpenAPI document, in process, then
the slow-input search (tests/api/test_slow_inputs.py) with more examples than the suite gives it.

    python -m bench.fuzz                 # about 2 minutes
    python -m bench.fuzz --seconds 1200  # longer: both parts scale with the budget

Schemathesis gets 60% of `--seconds` (its phases: examples, coverage, fuzzing and, where the document
links operations, stateful) with all its checks; the search gets the rest, as examples per endpoint. Printed:
cases sent, by phase and status class; 5xx; each check's failures (response_schema_conformance and the other
conformance checks are the schema violations; positive_data_acceptance counts bodies the schema allows and a
cross-field rule refuses); the slowest case; and the search's slowest input per endpoint.
Exits 1 on any 5xx, any schema violation, or a failed search.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema

# Checks whose failure means an answer the document does not describe.
SCHEMA_CHECKS = ("status_code_conformance", "content_type_conformance", "response_schema_conformance",
                 "response_headers_conformance")
SCHEMATHESIS_SHARE = 0.6
SECONDS_PER_EXAMPLE = 3.0  # the search's cost per example per endpoint, roughly, on 2 cores (shrinking included)
SEARCH = "tests/api/test_slow_inputs.py"


@dataclass
class Tally:
    cases: int = 0
    by_phase: Counter[str] = field(default_factory=Counter)
    by_status: Counter[str] = field(default_factory=Counter)
    failed_checks: Counter[str] = field(default_factory=Counter)
    operations: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    slowest: tuple[float, str, str] = (0.0, "", "")

    def add(self, finished: events.ScenarioFinished) -> None:
        recorder = finished.recorder
        if finished.label:
            self.operations.add(finished.label)
        for interaction in recorder.interactions.values():
            self.cases += 1
            self.by_phase[finished.phase.value] += 1
            response = interaction.response
            if response is None:
                self.by_status["no answer"] += 1
                continue
            self.by_status[f"{response.status_code // 100}xx"] += 1
            if response.elapsed > self.slowest[0]:
                body = interaction.request.body or b""
                self.slowest = (response.elapsed, f"{interaction.request.method} {interaction.request.uri}",
                                body[:200].decode(errors="replace"))
        for checks in recorder.checks.values():
            for check in checks:
                if check.status == Status.FAILURE:
                    self.failed_checks[check.name] += 1


def run_schemathesis(seconds: int) -> Tally:
    from app.main import app

    config = SchemathesisConfig.from_dict({
        "max-time": seconds, "continue-on-failure": True, "generation": {"max-examples": 100_000},
        "phases": {"enabled": True}, "checks": {"enabled": True}, "suppress-health-check": ["all"],
        "cache": {"enabled": False},  # nothing written to the checkout; each run starts afresh
    })
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    tally = Tally()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            tally.add(event)
        elif isinstance(event, (events.NonFatalError, events.FatalError)):
            tally.errors.append(str(getattr(event, "info", event))[:300])
    return tally


def report(tally: Tally, elapsed_s: float) -> int:
    fivexx = tally.by_status["5xx"]
    violations = sum(tally.failed_checks[name] for name in SCHEMA_CHECKS)
    print(f"schemathesis: {tally.cases:,} cases over {len(tally.operations)} operations in {elapsed_s:.0f} s")
    print("  by phase: " + ", ".join(f"{phase} {count:,}" for phase, count in sorted(tally.by_phase.items())))
    print("  by status: " + ", ".join(f"{status} {count:,}" for status, count in sorted(tally.by_status.items())))
    print(f"  5xx: {fivexx}; schema violations: {violations}")
    failed = ", ".join(f"{name} {count:,}" for name, count in tally.failed_checks.most_common()) or "none"
    print(f"  failed checks: {failed}")
    seconds, request, body = tally.slowest
    print(f"  slowest case: {seconds * 1000:.0f} ms, {request} {body}")
    for error in tally.errors:
        print(f"  error: {error}")
    return 1 if fivexx or violations or tally.errors else 0


def run_search(seconds: int) -> int:
    examples = max(10, int(seconds / SECONDS_PER_EXAMPLE))
    print(f"slow-input search: {examples} examples per endpoint ({SEARCH})", flush=True)
    env = os.environ | {"SLOW_INPUT_EXAMPLES": str(examples)}
    command = [sys.executable, "-m", "pytest", SEARCH, "-q", "-s", "-rxX", "-p", "no:cacheprovider"]
    return subprocess.run(command, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120, help="the whole run's budget (default 120)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    fuzzed = report(run_schemathesis(int(args.seconds * SCHEMATHESIS_SHARE)), time.monotonic() - start)
    searched = run_search(int(args.seconds - (time.monotonic() - start)))
    print(f"fuzz: {time.monotonic() - start:.0f} s in all", "(failed)" if fuzzed or searched else "")
    return 1 if fuzzed or searched else 0


if __name__ == "__main__":
    raise SystemExit(main())
