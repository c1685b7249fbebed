"""Fixtures every test folder may use: a stand-in for the Hugging Face Hub (tests/hub_stand_in.py), and no test
reaching the real one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub_stand_in import StandInHub


@pytest.fixture(autouse=True)
def _no_real_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server does not fetch, and a fetch that is made anyway finds nothing listening (port 9, discard), whatever
    the environment the tests run in says; `stand_in_hub` sets both for its own Hub."""
    monkeypatch.delenv("TRAINMEM_HUB", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


@pytest.fixture
def stand_in_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInHub]:
    """A stand-in Hub on a loopback port as HF_ENDPOINT, an empty HF_HOME of this test's own, no token, online, and
    the server allowed to fetch (TRAINMEM_HUB=1). huggingface_hub reads its settings once, at import: the ones
    a fetch would read from there are set on its constants too."""
    from huggingface_hub import constants

    hub = StandInHub()
    hub.start()
    home = tmp_path / "hf-home"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HUB_ETAG_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("TRAINMEM_HUB", "1")
    for name, value in {"HF_HOME": home, "HF_HUB_CACHE": home / "hub", "HF_TOKEN_PATH": home / "token",
                        "HF_STORED_TOKENS_PATH": home / "stored_tokens", "HF_HUB_OFFLINE": False,
                        "HF_HUB_DISABLE_PROGRESS_BARS": True}.items():
        monkeypatch.setattr(constants, name, str(value) if isinstance(value, Path) else value)
    yield hub
    hub.stop()
