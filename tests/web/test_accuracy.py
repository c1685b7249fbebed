"""The measured accuracy published by the validation sweep is shown next to the breakdown."""

import json

from fastapi.testclient import TestClient

from app.main import app
from app.web.accuracy import GPU_FILE, SUMMARY_FILE, accuracy

client = TestClient(app)


def test_page_shows_the_published_summary():
    summary = json.loads(SUMMARY_FILE.read_text(encoding="utf-8"))["summary"]
    html = client.get("/").text
    assert 'id="accuracy"' in html
    assert f"over {summary['activation_configurations']} setups" in html
    assert f"{summary['worst_activation_error_pct']:.2f}%" in html
    shown = accuracy()
    assert shown is not None and shown.model_states_max_error_bytes == summary["model_states_max_error_bytes"]


def test_page_shows_the_gpu_measurement():
    summary = json.loads(GPU_FILE.read_text(encoding="utf-8"))["summary"]
    html = client.get("/").text
    assert f"checked on an {summary['gpu']}" in html
    assert f"within {summary['worst_peak_error_pct']:.2f}%" in html
    assert f"in {summary['same_event']} of {summary['cases']} real-size setups" in html


def test_validation_report_is_an_html_page_with_its_tables_and_charts():
    response = client.get("/validation")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert '<h1 id="validation-trainmem-against-measured-pytorch-training-steps">' in html
    assert html.count("<table>") >= 3 and "<th scope=\"col\">" in html
    assert '<img src="/validation/timeline-llama-3-8b.svg"' in html
    chart = client.get("/validation/timeline-llama-3-8b.svg")
    assert chart.status_code == 200 and chart.headers["content-type"].startswith("image/svg+xml")
    assert client.get("/validation/..%2Fpyproject.toml").status_code == 404
    assert client.get("/validation/VALIDATION.md").status_code == 404
