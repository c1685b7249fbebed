"""Compiled layers (validation/compiled.py): the measurements kept in docs/compiled.json are what trainmem predicts
now for `training.compile: inductor`, within the activation target and to the byte, and the published section is
the table they make. Re-predicts only: compiling the cases again takes minutes (`make validate`)."""

from __future__ import annotations

import pytest

from validation import compiled
from validation.sections import REPORT

pytestmark = pytest.mark.validation

PUBLISHED = compiled.published()


@pytest.mark.parametrize("result", PUBLISHED, ids=[compiled.Case(**result["case"]).label for result in PUBLISHED])
def test_each_measured_layer_is_predicted_to_the_byte(result):
    case = compiled.Case(**result["case"])
    measured, predicted = result["measured"], compiled.predict(case)
    assert measured["compiled_graphs"] == 1 and measured["graph_breaks"] == 0  # the layer ran as one compiled graph
    assert {key: measured[key] for key in compiled.PARTS} == {key: predicted[key] for key in compiled.PARTS}


def test_every_case_and_family_is_measured_with_and_without_recomputation():
    assert [compiled.Case(**result["case"]) for result in PUBLISHED] == list(compiled.CASES)
    measured = {(case.family, case.checkpointing) for case in compiled.CASES}
    assert measured == {(family, ckpt) for family in compiled.FAMILIES for ckpt in ("none", "full")}
    assert len(compiled.FAMILIES) >= 4


def test_compile_lowers_a_layer_without_recomputation_and_leaves_the_kept_input_with_it():
    for result in PUBLISHED:
        case = compiled.Case(**result["case"])
        eager = compiled.predict(case, "none")["layers"][0]
        if case.checkpointing == "none":
            assert result["measured"]["layers"][0] < eager
        else:
            assert result["measured"]["layers"][0] == eager


def test_the_published_section_is_the_table_of_these_measurements():
    rows = [compiled.compare(result) for result in PUBLISHED]
    assert all(abs(row.layer_error_pct) <= compiled.TARGET_PCT for row in rows)
    text = REPORT.read_text(encoding="utf-8")
    assert "\n".join(compiled.section(rows, PUBLISHED, compiled.whole_model_rows())).strip() in text


def test_whole_models_ran_as_one_graph_each():
    whole = compiled.published("whole_model")
    assert [compiled.Case(**result["case"]) for result in whole] == list(compiled.WHOLE_MODEL)
    assert all(r["measured"]["compiled_graphs"] == 1 and r["measured"]["graph_breaks"] == 0 for r in whole)
