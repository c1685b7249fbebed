"""Under /static: every file the pages load, and nothing else; no redirect built from the Host header."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)
ASSET = re.compile(r'(?:src|href)="(/static/[^"?]+)')


@pytest.mark.parametrize("page", ["/", "/docs", "/validation"])
def test_every_file_a_page_loads_is_served(page):
    assets = ASSET.findall(client.get(page).text)
    assert assets
    for path in assets:
        assert client.get(path).status_code == 200, path


@pytest.mark.parametrize("path", ["/static/README.md", "/static/swagger-ui-5.35.0/LICENSE",
                                  "/static/swagger-ui-5.35.0/NOTICE",
                                  "/static/swagger-ui-5.35.0/swagger-ui-bundle.js.LICENSE.txt",
                                  "/static/", "/static/swagger-ui-5.35.0/", "/static/../app/main.py"])
def test_files_the_pages_do_not_load_are_not_found(path):
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("path", ["/static", "/docs/", "/api/v1/gpus/"])
def test_no_redirect_names_the_host_the_client_sent(path):
    response = client.get(path, headers={"host": "evil.example"}, follow_redirects=False)
    assert "evil.example" not in response.headers.get("location", "")
    assert response.status_code == 404
