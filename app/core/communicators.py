"""The collective library's buffers on each GPU: NCCL's connection buffers for every process group a setup creates.

They live outside PyTorch's allocator (NCCL maps them itself), so they count against the capacity beside the CUDA
context. The figures follow NVIDIA/nccl v2.30.7 (commit 5067397c); none is measured here, and the channel counts
depend on the machine's topology, which NCCL searches at start-up (``NCCL_DEBUG=INFO`` prints them):

- Each connection to a peer holds, per channel, one buffer per protocol (src/transport/p2p.cc:486-490, on the
  receiving GPU; under P2P read the Simple buffer moves to the sender, p2p.cc:407-409, which leaves the sum on each
  GPU of a ring unchanged). Their sizes are NCCL's defaults (src/init.cc:810-813): LL 8 lines × 512 threads ×
  8 steps × 16 B = 524,288 B; LL128 120 elements × 640 threads × 8 steps × 8 B = 4,915,200 B; Simple 4 MiB
  (``NCCL_BUFFSIZE``).
- A collective group connects each GPU to its ring neighbour on every channel. On NVLink the ring search finds
  6 channels at 60 GB/s (Hopper) or 40 GB/s (Ampere) on this reading of the search, doubled when the links are
  fast (src/graph/search.cc:1036-1046) and doubled again when rings are connected (src/graph/connect.cc:460): 24.
  Over PCIe it finds one and keeps two.
- A point-to-point group (pipeline stages, ring attention, the experts' all-to-all) connects to each peer over
  2 × (NVLink bandwidth ÷ one link's) channels, rounded up to a power of two and capped by the p2p channels (the
  ring channels rounded up: 32); two over PCIe (src/graph/paths.cc:933-939, 985-990).
- On NVSwitch systems with NVLink SHARP (H100 and H200 SXM, B200), a collective group within a node also maps the
  NVLS buffers: 16 channels on Hopper × 2 × (128 KiB × 8 steps) per GPU of the node's group
  (src/transport/nvls.cc:155-160, 425-430), rounded up to 2 MiB (nvls.cc:352); Blackwell maps 24 channels within a
  node (nvls.cc:157, 211). ``NCCL_NVLS_ENABLE=0`` removes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from app.core.setup import Parallelism

LL_BYTES: Final = 8 * 512 * 8 * 16
LL128_BYTES: Final = 120 * 640 * 8 * 8
SIMPLE_BYTES: Final = 1 << 22
CONNECTION_BYTES: Final = LL_BYTES + LL128_BYTES + SIMPLE_BYTES  # per channel and peer: 9,633,792 B

NVLS_STEP_BYTES: Final = 128 * 1024
NVLS_STEPS: Final = 8
NVLS_ALIGN: Final = 2 * 1024 * 1024

Interconnect = Literal["nvswitch-hopper", "nvswitch-blackwell", "nvlink", "pcie"]

# Channels per interconnect: (ring channels of a collective group, channels per peer of a point-to-point group,
# NVLS channels within a node, 0 where NVLS buffers are not mapped). See the module's notes for each.
_CHANNELS: Final[dict[Interconnect, tuple[int, int, int]]] = {
    "nvswitch-hopper": (24, 32, 16),
    "nvswitch-blackwell": (24, 32, 24),
    "nvlink": (24, 32, 0),
    "pcie": (2, 2, 0),
}
INTERCONNECTS: Final = tuple(_CHANNELS)


@dataclass(frozen=True)
class Communicator:
    """One process group's NCCL buffers on a GPU."""

    group: str  # tensor, pipeline, context, data, expert, expert-data
    ranks: int  # GPUs in the group
    pattern: str  # "collective" (a ring) or "point-to-point"
    connections: int  # channels × peers this GPU receives from
    nvls_bytes: int
    bytes: int
    formula: str


def _nvls_bytes(nvls_channels: int, local_ranks: int) -> int:
    size = nvls_channels * 2 * NVLS_STEP_BYTES * NVLS_STEPS * local_ranks
    return -(-size // NVLS_ALIGN) * NVLS_ALIGN


def _collective(group: str, ranks: int, interconnect: Interconnect, on_node: int) -> Communicator:
    """`on_node`: the most GPUs of the group one node holds."""
    channels, _, nvls = _CHANNELS[interconnect]
    local = min(ranks, on_node)
    nvls_bytes = _nvls_bytes(nvls, local) if nvls and local > 1 else 0
    formula = f"{channels} ring channels × {CONNECTION_BYTES:,} B"
    if nvls_bytes:
        formula += f" + NVLS {nvls} channels × 2 × {NVLS_STEP_BYTES * NVLS_STEPS:,} B × {local} GPUs"
    return Communicator(group, ranks, "collective", channels, nvls_bytes, channels * CONNECTION_BYTES + nvls_bytes,
                        formula)


def _point_to_point(group: str, ranks: int, peers: int, interconnect: Interconnect) -> Communicator:
    _, per_peer, _ = _CHANNELS[interconnect]
    connections = per_peer * peers
    formula = f"{peers} peer{'s' if peers > 1 else ''} × {per_peer} channels × {CONNECTION_BYTES:,} B"
    return Communicator(group, ranks, "point-to-point", connections, 0, connections * CONNECTION_BYTES, formula)


def communicators(parallelism: Parallelism, interconnect: Interconnect) -> tuple[Communicator, ...]:
    """The process groups a setup creates on each GPU (as Megatron-LM and PyTorch's process groups carve them) and
    their buffers: tensor parallelism's all-reduces and the data-parallel gradient reduction (over data × context,
    as the states are sharded) are collectives; pipeline stages and ring attention send to their two neighbours (one
    when there are two); expert parallelism's all-to-all reaches every other GPU of its group, and the experts'
    gradients are reduced over the GPUs that hold the same experts."""
    p = parallelism
    found = []
    # Ranks are laid out tensor-parallel innermost (Megatron-LM's order tp-cp-ep-dp-pp), so a node holds
    # gpus_per_node ÷ tensor GPUs of a data-parallel group.
    per_node_outside_tensor = max(p.gpus_per_node // p.tensor, 1)
    if p.tensor > 1:
        found.append(_collective("tensor", p.tensor, interconnect, p.gpus_per_node))
    if p.pipeline > 1:
        found.append(_point_to_point("pipeline", p.pipeline, min(p.pipeline - 1, 2), interconnect))
    if p.context > 1:
        found.append(_point_to_point("context", p.context, min(p.context - 1, 2), interconnect))
    if p.shard_group > 1:
        found.append(_collective("data", p.shard_group, interconnect, per_node_outside_tensor))
    if p.expert > 1:
        found.append(_point_to_point("expert", p.expert, p.expert - 1, interconnect))
        if p.shard_group // p.expert > 1:
            found.append(_collective("expert-data", p.shard_group // p.expert, interconnect,
                                     max(per_node_outside_tensor // p.expert, 1)))
    return tuple(found)


def communicator_bytes(parallelism: Parallelism, interconnect: Interconnect) -> int:
    return sum(c.bytes for c in communicators(parallelism, interconnect))
