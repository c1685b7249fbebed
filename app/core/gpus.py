"""The GPU catalogue, read from ``data/gpus.json`` (usable capacity as the driver reports it, with sources)."""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from app.core.errors import DomainError

if TYPE_CHECKING:
    from app.core.communicators import Communicator, Interconnect


@dataclass(frozen=True)
class Gpu:
    id: str
    name: str
    capacity_bytes: int
    source: str
    context_bytes: int = 0  # in use outside the allocator before the first tensor (CUDA context, modules)
    workspace_bytes: int = 0  # the libraries' workspaces, allocated through the allocator and kept
    context_source: str = ""
    interconnect: Interconnect = "pcie"  # a key of communicators.INTERCONNECTS: how a node's GPUs reach each other


@dataclass(frozen=True)
class GpuFit:
    """Whether a step fits: the allocator's reserved peak and what lives outside it (the context, an extra the user
    sets) against the capacity. Headroom is capacity minus that total (negative when it does not fit); `fits` is
    also false when the replay ran out of memory with the cache released, whatever the total says."""

    gpu: Gpu
    fits: bool
    headroom_bytes: int
    reserved_bytes: int = 0  # the allocator's reserved peak
    outside_bytes: int = 0  # the CUDA context, the communicators' buffers and the user's extra, outside the allocator
    communicators: tuple[Communicator, ...] = ()  # NCCL's buffers per process group, part of outside_bytes

    @property
    def communicator_bytes(self) -> int:
        return sum(c.bytes for c in self.communicators)


@cache
def gpu_catalogue() -> dict[str, Gpu]:
    # pkgutil reads package data from a directory or a zip as importlib.resources does, without
    # importing tempfile, shutil and the compression modules into the command line's start-up.
    raw = json.loads(pkgutil.get_data("app.core", "data/gpus.json").decode("utf-8"))  # type: ignore[union-attr]
    return {
        gpu_id: Gpu(id=gpu_id, name=entry["name"], capacity_bytes=entry["capacity_bytes"], source=entry["source"],
                    context_bytes=entry["context_bytes"], workspace_bytes=entry["workspace_bytes"],
                    context_source=entry["context_source"], interconnect=entry["interconnect"])
        for gpu_id, entry in raw.items()
        if not gpu_id.startswith("_")
    }


def get_gpu(gpu_id: str) -> Gpu:
    catalogue = gpu_catalogue()
    if gpu_id not in catalogue:
        raise DomainError("gpu", f"unknown GPU {gpu_id!r}; known: {', '.join(catalogue)}")
    return catalogue[gpu_id]


def fit(gpu: Gpu, *, total_bytes: int, reserved_bytes: int = 0, outside_bytes: int = 0,
        out_of_memory: bool = False, communicators: tuple[Communicator, ...] = ()) -> GpuFit:
    headroom_bytes = gpu.capacity_bytes - total_bytes
    return GpuFit(gpu=gpu, fits=headroom_bytes >= 0 and not out_of_memory, headroom_bytes=headroom_bytes,
                  reserved_bytes=reserved_bytes, outside_bytes=outside_bytes, communicators=communicators)
