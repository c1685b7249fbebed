"""The GPU catalogue, read from ``data/gpus.json`` (usable capacity as the driver reports it, with sources)."""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass
from functools import cache

from app.core.errors import DomainError


@dataclass(frozen=True)
class Gpu:
    id: str
    name: str
    capacity_bytes: int
    source: str


@dataclass(frozen=True)
class GpuFit:
    """Whether a per-GPU total fits: headroom is capacity minus total (negative when it does not fit)."""

    gpu: Gpu
    fits: bool
    headroom_bytes: int


@cache
def gpu_catalogue() -> dict[str, Gpu]:
    # pkgutil reads package data from a directory or a zip as importlib.resources does, without
    # importing tempfile, shutil and the compression modules into the command line's start-up.
    raw = json.loads(pkgutil.get_data("app.core", "data/gpus.json").decode("utf-8"))  # type: ignore[union-attr]
    return {
        gpu_id: Gpu(id=gpu_id, name=entry["name"], capacity_bytes=entry["capacity_bytes"], source=entry["source"])
        for gpu_id, entry in raw.items()
        if not gpu_id.startswith("_")
    }


def get_gpu(gpu_id: str) -> Gpu:
    catalogue = gpu_catalogue()
    if gpu_id not in catalogue:
        raise DomainError("gpu", f"unknown GPU {gpu_id!r}; known: {', '.join(catalogue)}")
    return catalogue[gpu_id]


def fit(gpu: Gpu, *, total_bytes: int) -> GpuFit:
    headroom_bytes = gpu.capacity_bytes - total_bytes
    return GpuFit(gpu=gpu, fits=headroom_bytes >= 0, headroom_bytes=headroom_bytes)
