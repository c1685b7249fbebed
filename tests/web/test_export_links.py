"""The page's "download as a config" links: each writes what POST /api/v1/export writes for the page's setup."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)
QUERY = "preset=llama-3-8b&seq_len=4096&gpu=h100-80gb&data=8&zero_stage=3"


def test_each_link_downloads_the_api_export_of_this_setup():
    page = client.get("/?" + QUERY).text
    links = [html.unescape(link) for link in re.findall(r'href="(/export/[^"]+)"', page)]
    assert [link.split("?")[0] for link in links] == ["/export/deepspeed", "/export/training-arguments",
                                                      "/export/accelerate", "/export/axolotl"]
    body = {"model": {"preset": "llama-3-8b"}, "training": {"seq_len": 4096},
            "parallelism": {"data": 8, "zero_stage": 3}, "gpu": "h100-80gb"}
    for link in links:
        download = client.get(link)
        kind = link.split("?")[0].rsplit("/", 1)[1]
        expected = client.post("/api/v1/export", json=body | {"kind": kind}).json()
        assert download.status_code == 200
        assert download.headers["content-disposition"] == f'attachment; filename="{expected["filename"]}"'
        assert download.text == expected["text"]


def test_bad_setups_and_kinds_are_plain_refusals():
    assert client.get("/export/megatron?" + QUERY).status_code == 404
    refused = client.get("/export/deepspeed?preset=llama-3-8b&seq_len=abc")
    assert refused.status_code == 422 and "seq_len" in refused.text
    assert 'href="/export/' not in client.get("/?preset=llama-3-8b&seq_len=abc").text
