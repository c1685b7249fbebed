"""Display arithmetic: units, segment widths, the capacity line and the verdict, checked against hand-computed numbers."""

from __future__ import annotations

from app import core
from app.web.view import format_bytes, format_bytes_per_param, format_count, percent, result_view, verdict

GIB = 1 << 30


def test_sizes_are_labelled_with_separators_and_two_decimals():
    assert format_bytes(137_438_953_472, "GiB") == "128.00 GiB"
    assert format_bytes(137_438_953_472, "GB") == "137.44 GB"
    assert format_bytes(2_000 * 10**9, "GB") == "2,000.00 GB"
    assert format_bytes(0, "GiB") == "0.00 GiB"
    # A megabyte-sized buffer is not shown as 0.00 GiB.
    assert format_bytes(3 * (1 << 20), "GiB") == "3.00 MiB"
    assert format_bytes(3 * 10**6, "GB") == "3.00 MB"


def test_counts_and_bytes_per_parameter():
    assert format_count(6_738_415_616) == "6,738,415,616 (6.74 B)"
    assert format_bytes_per_param(2.0) == "2"
    assert format_bytes_per_param(2.03125) == "2.03"
    assert percent(1, 4) == "25.000"


def _estimate(**kwargs):
    return core.estimate(architecture=core.get_preset("llama-3-8b").architecture, **kwargs)


def test_segments_scale_to_the_larger_of_total_and_capacity():
    gpu = core.get_gpu("b200-180gb")
    result = _estimate(gpu=gpu)
    view = result_view(result, core.Parallelism(), "GiB")
    bar = view.per_gpu_bar
    scale = max(result.per_gpu.total_bytes, gpu.capacity_bytes)
    assert [s.category for s in bar.segments] == list(core.CATEGORIES)
    for segment in bar.segments:
        assert segment.bytes == result.per_gpu[segment.category]
        assert float(segment.width) == round(100 * segment.bytes / scale, 3)
    assert float(bar.capacity_at) == round(100 * gpu.capacity_bytes / scale, 3)
    assert not bar.over


def test_cluster_bar_keeps_sharded_bytes():
    parallelism = core.Parallelism(data=8, zero_stage=3)
    result = _estimate(parallelism=parallelism, gpu=core.get_gpu("h100-80gb"))
    view = result_view(result, parallelism, "GiB")
    per_gpu = {s.category: s.bytes for s in view.per_gpu_bar.segments}
    cluster = {s.category: s.bytes for s in view.cluster_bar.segments}
    unsharded = _estimate()
    # ZeRO-3 over 8 ranks: each holds an eighth of the optimizer state; the cluster still holds all of it.
    assert per_gpu["optimizer_states"] * 8 >= cluster["optimizer_states"] == unsharded.per_gpu["optimizer_states"]
    assert view.world_size == 8


def test_verdict_in_words():
    gpu = core.get_gpu("h100-80gb")
    fits = verdict(core.GpuFit(gpu, True, 10 * GIB), gpu.capacity_bytes - 10 * GIB, "GiB", gpus=1)
    assert fits.kind == "fits" and fits.headline == "Fits, with 10.00 GiB to spare"
    over = verdict(core.GpuFit(gpu, False, -5 * GIB), gpu.capacity_bytes + 5 * GIB, "GiB", gpus=1)
    assert over.kind == "over" and over.headline == "Does not fit, by 5.00 GiB"
    assert verdict(None, GIB, "GiB", gpus=1).kind == "none"


def test_bytes_per_parameter_of_the_classic_rule():
    view = result_view(_estimate(), core.Parallelism(), "GiB")
    # bf16 weights and gradients, fp32 master copy, two fp32 Adam moments: 2 + 2 + 4 + 8 (ZeRO, section 3.1).
    assert view.bytes_per_param_sum == "2 + 2 + 4 + 8"
    assert view.bytes_per_param_total == "16"
