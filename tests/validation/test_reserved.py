"""The verdict and the allocator's reserved peak against the H200 runs kept in validation/gpu-runs (measured:
``torch.cuda.max_memory_reserved()`` and PyTorch's out-of-memory errors), re-predicted from the code as it is."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from validation import reserved  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.fixture(scope="module")
def table() -> list[dict]:
    return reserved.rows()


def test_the_verdict_says_which_runs_died(table):
    wrong = [(row["label"], row["fits"]) for row in table if row["fits"] == row["out_of_memory"]]
    assert not wrong
    assert sum(row["out_of_memory"] for row in table) >= 7 and len(table) >= 60


def test_the_six_largest_reserves_within_two_percent(table):
    ran = [row for row in table if not row["out_of_memory"] and row["measured_reserved_bytes"] is not None]
    largest = sorted(ran, key=lambda row: row["measured_excess_pct"], reverse=True)[:reserved.LARGEST_EXCESS]
    assert min(row["measured_excess_pct"] for row in largest) > 10  # the runs where the reserve matters most
    assert all(abs(row["error_pct"]) <= reserved.TARGET_PCT for row in largest), largest


def test_every_reserve_within_five_percent(table):
    ran = [row for row in table if row.get("error_pct") is not None]
    assert len(ran) >= 30
    assert all(abs(row["error_pct"]) <= 5 for row in ran), [(r["label"], r["error_pct"]) for r in ran]


def test_the_published_table_is_what_the_code_predicts(table):
    published = json.loads(reserved.RESULTS.read_text(encoding="utf-8"))["rows"]
    assert published == table


def test_expandable_segments_never_reserve_more_than_the_default(table):
    ran = [row for row in table if not row["out_of_memory"]]
    assert all(row["reserved_bytes"] <= row["default_reserved_bytes"] for row in ran), \
        [(r["label"], r["reserved_bytes"], r["default_reserved_bytes"]) for r in ran
         if r["reserved_bytes"] > r["default_reserved_bytes"]]
