"""``python -m validation [--full] [--out DIR]``: measure, compare, report.

The fast subset prints its summary; ``--full`` runs the whole sweep and writes
docs/VALIDATION.md and docs/validation.json (or into ``--out``). Exits 1 if any row misses its target.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402

from validation import report, sweep  # noqa: E402
from validation.cases import Row  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"


def run(*, full: bool) -> list[Row]:
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    rows: list[Row] = []
    for case in sweep.cases(full=full):
        rows.extend(case.run())
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m validation", description=__doc__)
    parser.add_argument("--full", action="store_true", help="the whole sweep; writes the Markdown and JSON report")
    parser.add_argument("--out", type=Path, default=None, help=f"where to write the report (default {DOCS} with --full)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = run(full=args.full)
    out = args.out or (DOCS if args.full else None)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        report.write_json(rows, out / "validation.json")
        report.write_markdown(rows, out / "VALIDATION.md")
    result = report.summary(rows)
    print(json.dumps(result, indent=1))
    for row in rows:
        if not row.passed:
            print(f"MISSED {row.setup} {row.quantity}: predicted {row.predicted:,} measured {row.measured:,} "
                  f"({row.error_pct:+.2f}%)", file=sys.stderr)
    print(f"{len(rows)} rows in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
