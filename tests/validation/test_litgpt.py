"""docs/VALIDATION.md shows LitGPT's rows as validation/litgpt.py states and estimates them today."""

from pathlib import Path

from validation import litgpt

REPORT = Path(__file__).resolve().parents[2] / "docs" / "VALIDATION.md"


def test_the_report_shows_the_rows_as_estimated_now():
    assert "\n".join(litgpt.text()) in REPORT.read_text(encoding="utf-8")
