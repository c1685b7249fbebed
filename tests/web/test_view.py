"""Display arithmetic: units, segment widths, the capacity line and the verdict, checked against hand-computed numbers."""

from __future__ import annotations

from app import core
from app.web.view import (
    attention_note,
    compact_verdict,
    format_bytes,
    format_bytes_per_param,
    format_count,
    peak_note,
    percent,
    result_view,
    verdict,
)

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


def test_the_per_gpu_bar_is_what_is_alive_at_the_peak_scaled_to_the_larger_of_peak_and_capacity():
    gpu = core.get_gpu("b200-180gb")
    result = _estimate(gpu=gpu)
    view = result_view(result, core.Parallelism(), "GiB")
    bar = view.per_gpu_bar
    assert result.gpu is not None
    cached = result.peak.reserved_bytes - result.peak.bytes
    whole = result.peak.reserved_bytes + result.gpu.outside_bytes
    scale = max(whole, gpu.capacity_bytes)
    assert [s.category for s in bar.segments] == [*core.CATEGORIES, "cached", "outside"]
    beyond = {"cached": cached, "outside": gpu.context_bytes}
    for segment in bar.segments:
        assert segment.bytes == (result.peak.breakdown[segment.category] if segment.category in core.CATEGORIES
                                 else beyond[segment.category])
        assert float(segment.width) == round(100 * segment.bytes / scale, 3)
    assert sum(segment.bytes for segment in bar.segments) == whole
    assert result.peak.bytes < result.per_gpu.total_bytes
    assert bar.capacity_at is not None and float(bar.capacity_at) == round(100 * gpu.capacity_bytes / scale, 3)
    assert not bar.over
    # Beside the bar, the sum of every buffer.
    assert view.per_gpu_total == format_bytes(result.per_gpu.total_bytes, "GiB")
    assert view.peak_total == format_bytes(result.peak.bytes, "GiB")


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


def test_the_verdict_is_judged_at_the_peak():
    gpu = core.get_gpu("h100-80gb")
    at = "backward: loss gradients, step 2"
    fit = core.GpuFit(gpu, False, -5 * GIB, reserved_bytes=gpu.capacity_bytes + 4 * GIB, outside_bytes=GIB)
    over = verdict(fit, gpu.capacity_bytes + 3 * GIB, "GiB", gpus=8, at=at)
    assert over.detail.startswith(f"At the peak ({at}) its tensors take 82.65 GiB; the caching allocator holds "
                                  "83.65 GiB at its worst and 1.00 GiB lies outside it")
    assert "on each of 8 × NVIDIA H100" in over.detail
    assert verdict(None, 3 * GIB, "GiB", gpus=1).headline == "3.00 GiB at the peak per GPU"


def test_an_estimate_that_does_not_fit_at_its_peak_says_so():
    # Llama-3-8B on one H100 80GB: the peak (not only the sum of every buffer) is above the capacity.
    gpu = core.get_gpu("h100-80gb")
    result = _estimate(gpu=gpu)
    view = result_view(result, core.Parallelism(), "GiB")
    assert result.peak.bytes > gpu.capacity_bytes and result.gpu is not None
    assert view.verdict.kind == "over" and view.per_gpu_bar.over and view.cluster_bar.over
    # short by the allocator's reserve and the context beyond the capacity, not by the tensors alone
    over_by = format_bytes(result.peak.reserved_bytes + gpu.context_bytes - gpu.capacity_bytes, "GiB")
    assert view.verdict.headline == f"Does not fit, by {over_by}"
    assert f"At the peak ({result.peak.event}, step {result.peak.step})" in view.verdict.detail
    # The chart marks the same point the verdict is judged at.
    assert view.timeline.rows[view.timeline.peak.index].event == result.peak.event
    assert view.timeline.peak.text == f"peak: {view.peak_total} at {result.peak.event}, step {result.peak.step}"


def test_peak_note_names_what_is_not_alive_at_the_peak():
    # By hand: every buffer sums to 10 + 10 + 20 + 8 = 48 GiB; at the peak 10 + 10 + 0 + 2 = 22 GiB are alive.
    per_gpu = core.Breakdown({"weights": 10 * GIB, "gradients": 10 * GIB, "activations": 20 * GIB, "temporary": 8 * GIB})
    alive = core.Breakdown({"weights": 10 * GIB, "gradients": 10 * GIB, "temporary": 2 * GIB})
    peak = core.Peak(alive.total_bytes, "backward: loss gradients", 2, alive)
    assert peak_note(peak, per_gpu, "GiB") == (
        "The peak, 22.00 GiB at “backward: loss gradients” in step 2, is less than the 48.00 GiB sum of every "
        "buffer, because not every buffer is alive at once: at the peak, none of the 20.00 GiB of activations "
        "and 2.00 GiB of the 8.00 GiB of temporary buffers are alive."
    )
    everything = core.Peak(per_gpu.total_bytes, "optimizer.step", 1, per_gpu)
    assert peak_note(everything, per_gpu, "GiB").endswith("is the 48.00 GiB sum of every buffer: all of them are alive at once.")


def test_legend_has_each_category_at_the_peak_and_the_totals():
    result = _estimate()
    view = result_view(result, core.Parallelism(), "GiB")
    assert [row.at_peak for row in view.legend] == [format_bytes(result.peak.breakdown[c], "GiB") for c in core.CATEGORIES]
    assert view.legend_total.at_peak == view.peak_total
    assert view.legend_total.per_gpu == view.per_gpu_total
    assert view.legend_total.cluster == format_bytes(result.cluster.total_bytes, "GiB")


def test_model_states_only_have_no_activations_at_the_peak_either():
    result = core.estimate(num_params=7 * 10**9)
    view = result_view(result, core.Parallelism(), "GiB")
    assert "activations" not in [segment.category for segment in view.per_gpu_bar.segments]
    assert dict((row.category, row.at_peak) for row in view.legend)["activations"] == "not computed"
    assert view.attention_note is None


def test_the_attention_kernel_in_words():
    assert str(attention_note("sdpa", "flash")).startswith("Kernel assumed: sdpa → flash (fused;")
    assert str(attention_note("eager", "eager")).startswith("Kernel assumed: eager (explicit softmax")
    assert attention_note("sdpa", None) is None
    # fp32 activations rule flash out, and grouped K/V heads the memory-efficient kernel: sdpa falls back to math.
    training = core.Training(attention="sdpa", precision=core.precision_preset("fp32"))
    result = _estimate(training=training)
    view = result_view(result, core.Parallelism(), "GiB", attention="sdpa")
    assert str(view.attention_note).startswith("Kernel assumed: sdpa → math")


def test_bytes_per_parameter_of_the_classic_rule():
    view = result_view(_estimate(), core.Parallelism(), "GiB")
    # bf16 weights and gradients, fp32 master copy, two fp32 Adam moments: 2 + 2 + 4 + 8 (ZeRO, section 3.1).
    assert view.bytes_per_param_sum == "2 + 2 + 4 + 8"
    assert view.bytes_per_param_total == "16"


def test_the_compact_verdict_is_the_headline_with_the_peak_against_the_capacity():
    gpu = core.get_gpu("h100-80gb")
    # 60 GiB of the capacity: the meter is filled to 60 / capacity; over the capacity it is full, never more.
    said = verdict(core.GpuFit(gpu, True, gpu.capacity_bytes - 60 * GIB), 60 * GIB, "GiB", gpus=1)
    compact = compact_verdict(said, 60 * GIB, gpu.capacity_bytes, "GiB")
    assert compact.headline == said.headline and compact.kind == "fits"
    assert compact.peak == f"needs 60.00 GiB of {format_bytes(gpu.capacity_bytes, 'GiB')}"
    assert compact.used is not None and float(compact.used) == round(100 * 60 * GIB / gpu.capacity_bytes, 3)
    over = compact_verdict(said, 2 * gpu.capacity_bytes, gpu.capacity_bytes, "GiB")
    assert over.used == "100.000"
    bare = compact_verdict(verdict(None, 3 * GIB, "GiB", gpus=1), 3 * GIB, None, "GiB")
    assert bare.peak == "peak 3.00 GiB per GPU" and bare.used is None


def test_nccl_buffers_are_their_own_segment_and_named_in_the_verdict():
    gpu = core.get_gpu("h100-80gb")
    parallelism = core.Parallelism(data=8, zero_stage=3)
    result = _estimate(gpu=gpu, parallelism=parallelism)
    assert result.gpu is not None
    view = result_view(result, parallelism, "GiB")
    segments = {s.category: s.bytes for s in view.per_gpu_bar.segments}
    # 24 ring channels × 9,633,792 B + NVLS 16 × 2 × 1 MiB × 8 GPUs (app/core/communicators.py)
    assert segments["communicators"] == 24 * 9_633_792 + 256 * (1 << 20)
    assert segments["outside"] == gpu.context_bytes
    assert "the CUDA context, and 0.47 GiB of NCCL's buffers for 1 process group" in view.verdict.detail
