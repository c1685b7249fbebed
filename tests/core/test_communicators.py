"""NCCL's buffers per process group, worked by hand from NVIDIA/nccl v2.30.7 (the lines are cited in
`app.core.communicators`), and their place in the verdict."""

from __future__ import annotations

import dataclasses

from app.core import Parallelism, Training, get_gpu, get_preset
from app.core.communicators import CONNECTION_BYTES, LL128_BYTES, LL_BYTES, SIMPLE_BYTES, communicators
from app.core.job import Job

MIB = 1 << 20


def test_protocol_buffer_sizes_follow_nccl_defaults():
    # init.cc:810-813: LL 8 lines/thread × 512 threads × 8 steps × 16 B; LL128 120 elements × 640 threads × 8 steps ×
    # 8 B; Simple 1 << 22.
    assert (LL_BYTES, LL128_BYTES, SIMPLE_BYTES) == (524_288, 4_915_200, 4_194_304)
    assert CONNECTION_BYTES == 9_633_792


def test_one_gpu_creates_no_communicator():
    assert communicators(Parallelism(), "nvswitch-hopper") == ()


def test_data_parallel_on_an_hgx_h100_node():
    # A ring over 24 channels, one receiving connection each, and NVLS: 16 channels × 2 × 1 MiB × 8 GPUs = 256 MiB.
    (data,) = communicators(Parallelism(data=8), "nvswitch-hopper")
    assert (data.group, data.ranks, data.pattern) == ("data", 8, "collective")
    assert data.nvls_bytes == 256 * MIB
    assert data.bytes == 24 * 9_633_792 + 256 * MIB


def test_nvls_only_on_nvswitch_and_within_a_node():
    (a100,) = communicators(Parallelism(data=8), "nvlink")
    assert a100.nvls_bytes == 0 and a100.bytes == 24 * 9_633_792
    # 64 GPUs over 8 nodes: the NVLS buffers count the node's 8 GPUs, not 64.
    (wide,) = communicators(Parallelism(data=64), "nvswitch-hopper")
    assert wide.nvls_bytes == 256 * MIB
    # Blackwell maps 24 NVLS channels within a node: 24 × 2 × 1 MiB × 2 GPUs = 96 MiB.
    (b200,) = communicators(Parallelism(data=2), "nvswitch-blackwell")
    assert b200.nvls_bytes == 96 * MIB
    # Tensor-parallel pairs innermost: a node of 8 holds 4 GPUs of each data-parallel group of 8.
    tensor, data = communicators(Parallelism(data=8, tensor=2), "nvswitch-hopper")
    assert (tensor.nvls_bytes, data.nvls_bytes) == (64 * MIB, 128 * MIB)


def test_pcie_cards_use_two_channels():
    # paths.cc:939: two channels per PCIe peer; the ring search keeps one channel, doubled when connected.
    tensor, pipeline = communicators(Parallelism(tensor=2, pipeline=4), "pcie")
    assert tensor.bytes == 2 * 9_633_792
    assert (pipeline.pattern, pipeline.bytes) == ("point-to-point", 2 * 2 * 9_633_792)  # two neighbouring stages


def test_groups_a_3d_mixture_setup_creates():
    groups = communicators(Parallelism(data=4, tensor=2, pipeline=2, context=2, expert=4), "nvlink")
    assert [(c.group, c.ranks) for c in groups] == [
        ("tensor", 2), ("pipeline", 2), ("context", 2), ("data", 8), ("expert", 4), ("expert-data", 2)]
    expert = groups[4]
    assert expert.bytes == 3 * 32 * 9_633_792  # the all-to-all reaches the other three GPUs of its group


def test_formula_multiplies_out_to_the_bytes():
    for parallelism in (Parallelism(data=8), Parallelism(tensor=4, pipeline=3), Parallelism(data=16, expert=8)):
        for interconnect in ("nvswitch-hopper", "nvswitch-blackwell", "nvlink", "pcie"):
            for group in communicators(parallelism, interconnect):
                terms = [t.replace(",", "").replace(" B", "").replace(" GPUs", "").split(" ")[0]
                         for t in group.formula.split(" + ")[0].split(" × ")]
                ring = 1
                for term in terms:
                    ring *= int(term)
                assert ring + group.nvls_bytes == group.bytes, group.formula


def test_communicators_count_outside_the_allocator_in_the_verdict():
    arch = get_preset("llama-3-8b").architecture
    job = Job(architecture=arch, training=Training(seq_len=2048, micro_batch_size=1),
              parallelism=Parallelism(data=8, zero_stage=3), gpu=get_gpu("h100-80gb"))
    result = job.estimate()
    fit = result.gpu
    assert fit is not None
    assert fit.communicator_bytes == 24 * 9_633_792 + 256 * MIB
    assert fit.outside_bytes == fit.gpu.context_bytes + fit.communicator_bytes
    assert fit.headroom_bytes == fit.gpu.capacity_bytes - fit.reserved_bytes - fit.outside_bytes


def test_communicators_can_decide_the_verdict():
    # A card sized between the step's needs without its communicators and with them: NVSwitch's 487 MiB of buffers
    # put it over; the same card on PCIe (two channels, 18 MiB) keeps it within.
    arch = get_preset("llama-3-8b").architecture
    job = Job(architecture=arch, training=Training(seq_len=2048), parallelism=Parallelism(data=8, zero_stage=3),
              gpu=get_gpu("h100-80gb"))
    fit = job.estimate().gpu
    assert fit is not None
    needed_without = fit.reserved_bytes + fit.gpu.context_bytes
    card = dataclasses.replace(fit.gpu, capacity_bytes=needed_without + fit.communicator_bytes // 2)
    tight = dataclasses.replace(job, gpu=card).estimate().gpu
    assert tight is not None and not tight.fits
    pcie = dataclasses.replace(card, interconnect="pcie")  # 2 channels: 19 MB of buffers, well within the margin
    assert dataclasses.replace(job, gpu=pcie).estimate().gpu.fits  # type: ignore[union-attr]
