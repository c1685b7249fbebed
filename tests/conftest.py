"""Fixtures every test folder may use: a stand-in for the Hugging Face Hub (tests/hub_stand_in.py), and no test
reaching the real one."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from tests import budget
from tests.hub_stand_in import StandInHub


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--examples-share", type=float, default=1.0,
                     help="the share of each generated-input test's examples to draw (tests/budget.py)")


def pytest_configure(config: pytest.Config) -> None:
    budget.share = config.getoption("--examples-share")


MODULE_MARKS = re.compile(r"^pytestmark = (.*)$", re.M)
OPERATORS = {"and", "or", "not"}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test module whose `pytestmark` the -m expression deselects, whatever marks its tests add, is not imported:
    `make test-fast` would otherwise import torch and transformers, and build the schemathesis tests, in each worker
    only to leave them out."""
    expression = config.getoption("markexpr")
    if not expression or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    line = MODULE_MARKS.search(collection_path.read_text(encoding="utf-8"))
    marks = set(re.findall(r"pytest\.mark\.(\w+)", line.group(1))) if line else set()
    if not marks:
        return None
    others = sorted(set(re.findall(r"[A-Za-z_]\w*", expression)) - OPERATORS - marks)
    compiled = Expression.compile(expression)
    for present in itertools.product((False, True), repeat=len(others)):
        if compiled.evaluate(_Marked(marks | {name for name, on in zip(others, present, strict=True) if on})):
            return None
    return True


class _Marked:
    """The -m expression's matcher for a test that carries `names`."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def __call__(self, name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name in self.names


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
