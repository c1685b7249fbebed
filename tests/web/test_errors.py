"""An address or method the site does not have answers a page, not the API's JSON."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/nowhere", 404), ("GET", "/static/README.md", 404), ("GET", "/docs/", 404), ("DELETE", "/", 405),
    ("GET", "/nowhere/<script>alert(1)</script>", 404),
])
def test_a_page_that_is_not_there_answers_html(method, path, status):
    response = client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert '<a href="/">' in response.text and "<script>" not in response.text


def test_a_405_page_says_which_methods_the_address_takes():
    assert "GET" in client.delete("/").headers["allow"]
