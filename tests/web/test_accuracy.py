"""The measured accuracy published by the validation sweep is shown next to the breakdown."""

import json

from fastapi.testclient import TestClient

from app.main import app
from app.web.accuracy import SUMMARY_FILE, accuracy

client = TestClient(app)


def test_page_shows_the_published_summary():
    summary = json.loads(SUMMARY_FILE.read_text(encoding="utf-8"))["summary"]
    html = client.get("/").text
    assert 'id="accuracy"' in html
    assert f"over {summary['activation_configurations']} setups" in html
    assert f"{summary['worst_activation_error_pct']:.2f}%" in html
    assert accuracy().model_states_max_error_bytes == summary["model_states_max_error_bytes"]


def test_validation_report_is_served():
    response = client.get("/validation")
    assert response.status_code == 200
    assert response.text.startswith("# Validation")
    assert response.headers["content-type"].startswith("text/markdown")
