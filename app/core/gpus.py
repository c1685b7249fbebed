"""The GPU catalogue, read from ``data/gpus.json`` (usable capacity as the driver reports it, with sources)."""

from __future__ import annotations

import json
import pkgutil
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

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
    if not isinstance(gpu_id, str):
        raise DomainError("gpu", f"must be a GPU id from the catalogue or a custom GPU's object, got "
                                 f"{type(gpu_id).__name__}")
    if gpu_id not in catalogue:
        raise DomainError("gpu", f"unknown GPU {gpu_id!r}; known: {', '.join(catalogue)}")
    return catalogue[gpu_id]


def fit(gpu: Gpu, *, total_bytes: int, reserved_bytes: int = 0, outside_bytes: int = 0,
        out_of_memory: bool = False, communicators: tuple[Communicator, ...] = ()) -> GpuFit:
    headroom_bytes = gpu.capacity_bytes - total_bytes
    return GpuFit(gpu=gpu, fits=headroom_bytes >= 0 and not out_of_memory, headroom_bytes=headroom_bytes,
                  reserved_bytes=reserved_bytes, outside_bytes=outside_bytes, communicators=communicators)


CUSTOM_ID: Final = "custom"
# A custom GPU's capacity: from 1 GiB to 4 TiB (the largest card in the catalogue holds 192 GB).
MIN_CUSTOM_BYTES: Final = 1 << 30
MAX_CUSTOM_BYTES: Final = 1 << 42
MAX_NAME_CHARS: Final = 64
# The catalogue GPU whose context, workspace and interconnect a custom GPU takes when it names none.
DEFAULT_LIKE: Final = "h100-80gb"


def custom_gpu(capacity_bytes: int, *, name: str | None = None, like: str | None = None,
               field: str = "gpu") -> Gpu:
    """A GPU the catalogue does not hold: its capacity as the driver reports it, with the CUDA context, the
    libraries' workspace and the interconnect of a catalogue GPU (`like`, else DEFAULT_LIKE's)."""
    if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int):
        raise DomainError(f"{field}.capacity_bytes", f"must be a whole number of bytes, got {capacity_bytes!r}")
    if not MIN_CUSTOM_BYTES <= capacity_bytes <= MAX_CUSTOM_BYTES:
        raise DomainError(f"{field}.capacity_bytes", f"must be between {MIN_CUSTOM_BYTES:,} B (1 GiB) and "
                                                     f"{MAX_CUSTOM_BYTES:,} B (4 TiB), got {capacity_bytes:,}")
    if name is not None and (not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS):
        raise DomainError(f"{field}.name", f"must be a name of 1 to {MAX_NAME_CHARS} characters")
    catalogue = gpu_catalogue()
    if like is not None and not isinstance(like, str):
        raise DomainError(f"{field}.like", "must be a GPU id from the catalogue")
    if like is not None and like not in catalogue:
        raise DomainError(f"{field}.like", f"unknown GPU {str(like)[:60]!r}; known: {', '.join(catalogue)}")
    base = catalogue[like or DEFAULT_LIKE]
    shown = name or "Custom GPU"
    return Gpu(id=CUSTOM_ID, name=shown, capacity_bytes=capacity_bytes, source="given by the user",
               context_bytes=base.context_bytes, workspace_bytes=base.workspace_bytes,
               context_source=f"the {base.name}'s, as the catalogue gives it ({base.context_source})"
               if like else f"the {base.name}'s (no GPU named as `like`): {base.context_source}",
               interconnect=base.interconnect)
