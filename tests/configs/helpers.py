"""Shared by the config tests: the sample files, and the lists an import answers, by key and by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.configs import import_config, import_files
from app.core import DomainError

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def imported(kind: str, text: str | dict) -> dict[str, Any]:
    return import_config(kind, text if isinstance(text, str) else json.dumps(text))


def merged(*files: tuple[str, str | dict]) -> dict[str, Any]:
    return import_files([{"kind": kind, "text": text if isinstance(text, str) else json.dumps(text)}
                         for kind, text in files])


def understood(answer: dict[str, Any]) -> dict[str, list[Any]]:
    """key -> the fields it set."""
    out: dict[str, list[Any]] = {}
    for entry in answer["understood"]:
        out.setdefault(entry["key"], []).append(entry["field"])
    return out


def ignored(answer: dict[str, Any]) -> dict[str, str]:
    return {entry["key"]: entry["why"] for entry in answer["ignored"]}


def assumed(answer: dict[str, Any]) -> dict[str, list[tuple[Any, str]]]:
    out: dict[str, list[tuple[Any, str]]] = {}
    for entry in answer["assumed"]:
        out.setdefault(entry["field"], []).append((entry["value"], entry["why"]))
    return out


def refused(kind: str, text: str | dict, *, files: list[tuple[str, str | dict]] | None = None) -> DomainError:
    with pytest.raises(DomainError) as error:
        if files is not None:
            merged(*files)
        else:
            imported(kind, text)
    return error.value


def leaves(data: Any, prefix: str = "") -> list[str]:
    """Every key path of a parsed config that holds a value (a scalar, a list or an empty mapping)."""
    if isinstance(data, dict) and data:
        return [path for key, value in data.items() for path in leaves(value, f"{prefix}.{key}" if prefix else key)]
    return [prefix]


def accounted(answer: dict[str, Any], key: str) -> bool:
    """Whether a key path shows in understood or ignored, itself or through a key above or below it."""
    seen = {entry["key"] for entry in answer["understood"]} | {entry["key"] for entry in answer["ignored"]}
    return any(key == s or key.startswith(s + ".") or s.startswith(key + ".") for s in seen)
