"""An Estimate as the page shows it: formatted sizes, bar segment widths, the verdict, the timeline chart
and the explanations. The verdict, the per-GPU bar and the chart follow the peak (what is alive at once);
the sum of every buffer is shown beside it, with a sentence on the difference.

All arithmetic for display lives here, so templates only place strings and routes only wire things up.
Sizes are formatted with thousands separators, two decimals and their unit (GB = 10^9 bytes,
GiB = 2^30 bytes), always labelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from app import core
from app.core.estimate import Host
from app.core.warnings import is_general
from app.web.chart import Chart, timeline_chart
from app.web.controls import LABELS
from app.web.form import Unit

UNIT_BYTES: Final[dict[str, int]] = {"GB": 10**9, "GiB": 1 << 30}
UNIT_NAMES: Final[dict[str, str]] = {"GB": "gigabytes (10⁹ bytes)", "GiB": "gibibytes (2³⁰ bytes)"}

CATEGORY_LABELS: Final[dict[str, str]] = {c.id: c.label for c in core.CATEGORY_TABLE.values()}
CATEGORY_SHORT: Final[dict[str, str]] = {c.id: c.short for c in core.CATEGORY_TABLE.values()}
CATEGORY_ABOUT: Final[dict[str, str]] = {c.id: c.about for c in core.CATEGORY_TABLE.values()}
# How a category reads inside a sentence ("31.40 GiB of the 34.60 GiB of temporary buffers").
CATEGORY_NOUNS: Final[dict[str, str]] = {c.id: c.label.lower() for c in core.CATEGORY_TABLE.values()} | {
    "temporary": "temporary buffers",
}
# A segment narrower than this (percent of the bar) has no room for text; the legend names it.
LABEL_MIN_PERCENT: Final = 14.0
SHORT_LABEL_MIN_PERCENT: Final = 3.0
PERCENT_DECIMALS: Final = 3


SMALL_UNITS: Final[dict[str, str]] = {"GB": "MB", "GiB": "MiB"}
SMALL_UNIT_BYTES: Final[dict[str, int]] = {"MB": 10**6, "MiB": 1 << 20}
# Below a tenth of the unit a size is written in the next smaller unit of the same family, so a
# megabyte-sized buffer does not read as 0.00 GiB.
SMALL_BELOW: Final = 0.1


def format_bytes(value: int, unit: Unit) -> str:
    """``137.44 GiB``: thousands separators, two decimals, the unit always written (MB/MiB when small)."""
    if 0 < value < SMALL_BELOW * UNIT_BYTES[unit]:
        small = SMALL_UNITS[unit]
        return f"{value / SMALL_UNIT_BYTES[small]:,.2f} {small}"
    return f"{value / UNIT_BYTES[unit]:,.2f} {unit}"


def format_exact_bytes(value: int) -> str:
    return f"{value:,} bytes"


def format_count(value: int) -> str:
    """An exact count with separators and its rounded size: ``8,030,261,248 (8.03 B)``."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "k")):
        if value >= scale:
            return f"{value:,} ({value / scale:,.2f} {suffix})"
    return f"{value:,}"


def format_bytes_per_param(value: float) -> str:
    """Whole numbers as they are (2, 4, 8); anything else with two decimals (8-bit states: 2.03)."""
    return f"{value:,.0f}" if value == round(value) else f"{value:,.2f}"


def format_size_input(value: int) -> str:
    """A byte count as the overhead control shows it: in GiB or MiB when exact, else in bytes."""
    for size, unit in ((1 << 30, "GiB"), (1 << 20, "MiB")):
        if value and value % size == 0:
            return f"{value // size:,} {unit}"
    return f"{value:,}"


def percent(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole`` for a CSS width, fixed decimals."""
    return f"{100 * part / whole:.{PERCENT_DECIMALS}f}" if whole else f"{0:.{PERCENT_DECIMALS}f}"


@dataclass(frozen=True)
class Segment:
    category: str
    label: str
    short: str
    bytes: int
    size: str
    exact: str
    width: str
    text: str  # what fits inside the segment on a wide bar: the label, its letter, or nothing
    short_text: str  # the same on a narrow bar: the letter, or nothing


@dataclass(frozen=True)
class Bar:
    title: str
    segments: tuple[Segment, ...]
    total: str
    total_exact: str
    capacity_at: str | None  # percent along the bar, or None when no GPU is chosen
    capacity_label: str | None
    capacity_align: Literal["start", "end"]  # which side of the line its label sits
    over: bool


@dataclass(frozen=True)
class LegendRow:
    category: str
    label: str
    short: str
    at_peak: str
    per_gpu: str
    cluster: str
    share: str  # percent of the per-GPU total
    bytes_per_param: str | None


@dataclass(frozen=True)
class Verdict:
    kind: Literal["fits", "over", "none"]
    headline: str
    detail: str


@dataclass(frozen=True)
class CompactVerdict:
    """The verdict in one line, for the bar that stays in view while the inputs are edited."""

    kind: Literal["fits", "over", "none"]
    headline: str
    peak: str  # "needs 152.51 GiB of 80.00 GiB" (or "peak 152.51 GiB per GPU" without a GPU)
    used: str | None  # the peak as a percentage of the capacity, at most 100, for the meter; None without a GPU


@dataclass(frozen=True)
class TermLine:
    label: str
    formula: str
    size: str
    exact: str


@dataclass(frozen=True)
class Explanation:
    category: str
    label: str
    short: str
    about: str
    size: str
    lines: tuple[TermLine, ...]
    details: tuple[TermLine, ...] = ()


@dataclass(frozen=True)
class LegendTotal:
    at_peak: str
    per_gpu: str
    cluster: str


@dataclass(frozen=True)
class ResultView:
    unit: Unit
    unit_name: str
    verdict: Verdict
    compact: CompactVerdict
    peak_total: str
    peak_total_exact: str
    per_gpu_total: str  # the sum of every buffer, an upper bound on the peak
    per_gpu_total_exact: str
    peak_note: str  # why the peak is less than the sum of every buffer (or that it is the sum)
    param_count: str
    world_size: int
    layout: str
    stage_note: str | None
    model_states_only: bool
    per_gpu_bar: Bar
    cluster_bar: Bar
    legend: tuple[LegendRow, ...]
    legend_total: LegendTotal
    timeline: Chart
    attention_note: str | None
    bytes_per_param_total: str
    bytes_per_param_sum: str
    explanations: tuple[Explanation, ...]
    warnings: tuple[str, ...]  # what is news about this setup, the most telling first
    general_warnings: tuple[str, ...]  # true of every setup of the kind: shown folded, after the rest
    trainable: str | None = None  # "6,815,744 trainable of 8,037,076,992", when fewer than all train
    host: HostView | None = None  # host memory per node, when offloading


@dataclass(frozen=True)
class HostView:
    """Host memory one node needs for the offloaded states, against the host RAM the person gave."""

    bar: Bar
    verdict: Verdict
    gpus_per_node: int


def trainable_note(param_count: int, trainable_count: int) -> str | None:
    """``6,815,744 trainable of 8,037,076,992`` when not every parameter trains."""
    if not trainable_count or trainable_count == param_count:
        return None
    return f"{trainable_count:,} trainable of {param_count:,} ({100 * trainable_count / param_count:.2f} %)"


def host_view(host: Host, host_ram: int | None, unit: Unit) -> HostView:
    """The offloaded states of one node's GPUs as a bar against `host_ram`, with the fit in words."""
    gpus = host.gpus_per_node
    per_node = {category: (host.per_gpu[category] or 0) * gpus for category in core.CATEGORIES}
    need = format_bytes(host.per_node_bytes, unit)
    each = f"{gpus:,} GPU{'' if gpus == 1 else 's'} per node"
    if all(buffer.key == "optimizer_states.paged" for buffer in host.ledger):
        said = Verdict("none", f"Up to {need} of host memory per node", f"For {each}: a paged optimizer's state, "
                       "in host memory only when the GPU runs short (the notes say how much crosses PCIe).")
    elif not host_ram:
        said = Verdict("none", f"{need} of host memory per node", f"For {each}; give the host RAM to check the fit.")
    elif host.per_node_bytes <= host_ram:
        said = Verdict("fits", f"Host memory fits, with {format_bytes(host_ram - host.per_node_bytes, unit)} to spare",
                       f"The offloaded states of {each} take {need} of the {format_bytes(host_ram, unit)} host RAM.")
    else:
        said = Verdict("over", f"Host memory does not fit, by {format_bytes(host.per_node_bytes - host_ram, unit)}",
                       f"The offloaded states of {each} take {need}; the node has {format_bytes(host_ram, unit)}.")
    bar = _bar(f"Host memory per node, {each}", per_node, host_ram, unit, over=said.kind == "over")
    return HostView(bar=bar, verdict=said, gpus_per_node=gpus)


# The capacity line's label sits to the left of the line once the line is this far along the bar.
CAPACITY_LABEL_FLIP_PERCENT: Final = 55.0


# Beyond the tensors, on the per-GPU bar: (id, label, letter) of the allocator's cached free blocks and of the
# memory outside it.
RESERVE_SEGMENTS: Final = (("cached", "Cached by the allocator, free", "R"),
                           ("communicators", "NCCL's buffers (process groups)", "N"),
                           ("outside", "Outside the allocator (CUDA context, your extra)", "X"))


def _bar(title: str, breakdown: Mapping[str, int | None], capacity: int | None, unit: Unit, *,
         over: bool, unknown: frozenset[str] = frozenset(), beyond: Mapping[str, int] | None = None) -> Bar:
    """Segments scaled so that the whole bar is the larger of the total and the capacity line.

    `over` colours the capacity line as exceeded: the fit follows the peak, so a bar of sums can
    pass its line while the job still fits. Categories in `unknown` are not computed and get no segment.
    """
    beyond = beyond or {}
    total = sum(value or 0 for value in breakdown.values()) + sum(beyond.values())
    scale = max(total, capacity or 0)
    segments = tuple(_segment(category, label, short, value, scale, unit)
                     for category, label, short, value in _named(breakdown, unknown, beyond) if value is not None)
    return Bar(
        title=title,
        segments=segments,
        total=format_bytes(total, unit),
        total_exact=format_exact_bytes(total),
        **_capacity_line(capacity, scale, unit),
        over=over,
    )


def _named(breakdown: Mapping[str, int | None], unknown: frozenset[str],
           beyond: Mapping[str, int]) -> list[tuple[str, str, str, int | None]]:
    """(id, label, letter, bytes) of each segment a bar may show: the computed categories, then what lies beyond
    the tensors."""
    named = [(category, CATEGORY_LABELS[category], CATEGORY_SHORT[category], breakdown[category])
             for category in core.CATEGORIES if category not in unknown]
    named += [(key, label, short, beyond[key]) for key, label, short in RESERVE_SEGMENTS if beyond.get(key)]
    return named


def _segment(category: str, label: str, short: str, value: int, scale: int, unit: Unit) -> Segment:
    """One category's part of a bar: the label where it fits, else the letter where that fits, else nothing."""
    share = 100 * value / scale if scale else 0.0
    short_text = short if share >= SHORT_LABEL_MIN_PERCENT else ""
    text = label if share >= LABEL_MIN_PERCENT else short_text
    return Segment(
        category=category, label=label, short=short, bytes=value,
        size=format_bytes(value, unit), exact=format_exact_bytes(value), width=percent(value, scale), text=text, short_text=short_text,
    )


def _capacity_line(capacity: int | None, scale: int, unit: Unit) -> dict[str, Any]:
    """Where a bar's capacity line sits, its label and the side the label goes on; none without a capacity."""
    if not capacity:
        return {"capacity_at": None, "capacity_label": None, "capacity_align": "start"}
    return {"capacity_at": percent(capacity, scale), "capacity_label": format_bytes(capacity, unit),
            "capacity_align": "end" if 100 * capacity / scale > CAPACITY_LABEL_FLIP_PERCENT else "start"}


def verdict(fit: core.GpuFit | None, peak_bytes: int, unit: Unit, *, gpus: int, at: str = "") -> Verdict:
    """In words: fits with N to spare, or does not fit by N, on the chosen GPU, judged by what decides CUDA out of
    memory: the allocator's reserved peak and what lives outside it.

    `at` names where the peak is ("optimizer.step, step 1"), when known.
    """
    peak = format_bytes(peak_bytes, unit)
    where_peak = f"At the peak ({at})" if at else "At the peak"
    if fit is None:
        return Verdict("none", f"{peak} at the peak per GPU", "Choose a GPU to see whether it fits.")
    name, capacity = fit.gpu.name, format_bytes(fit.gpu.capacity_bytes, unit)
    where = f"each of {gpus:,} × {name}" if gpus > 1 else f"one {name}"
    needs = fit.reserved_bytes + fit.outside_bytes
    held = (f"{where_peak} its tensors take {peak}; the caching allocator holds {format_bytes(fit.reserved_bytes, unit)} "
            f"at its worst and {format_bytes(fit.outside_bytes, unit)} lies outside it ({_outside_words(fit, unit)})")
    if fit.fits:
        return Verdict("fits", f"Fits, with {format_bytes(fit.headroom_bytes, unit)} to spare",
                       f"{held}: {format_bytes(min(needs, fit.gpu.capacity_bytes), unit)} of the {capacity} on {where} "
                       f"({_share(min(needs, fit.gpu.capacity_bytes), fit.gpu.capacity_bytes)} used).")
    return Verdict("over", f"Does not fit, by {format_bytes(-fit.headroom_bytes, unit)}",
                   f"{held}, on {where}, which has {capacity}.")


def _outside_words(fit: core.GpuFit, unit: Unit) -> str:
    if not fit.communicator_bytes:
        return "the CUDA context"
    groups = len(fit.communicators)
    return (f"the CUDA context, and {format_bytes(fit.communicator_bytes, unit)} of NCCL's buffers for "
            f"{groups} process group{'s' if groups > 1 else ''}")


def compact_verdict(full: Verdict, peak_bytes: int, capacity: int | None, unit: Unit) -> CompactVerdict:
    """The headline with what the step needs against the capacity (the allocator's reserve and what lies outside
    it), and how full the GPU is (capped at 100 %); without a GPU, the tensors' peak."""
    peak = format_bytes(peak_bytes, unit)
    if not capacity:
        return CompactVerdict(full.kind, full.headline, f"peak {peak} per GPU", None)
    return CompactVerdict(full.kind, full.headline, f"needs {peak} of {format_bytes(capacity, unit)}",
                          percent(min(peak_bytes, capacity), capacity))


def peak_note(peak: core.Peak, per_gpu: core.Breakdown, unit: Unit) -> str:
    """One sentence on how the peak relates to the sum of every buffer, category by category.

    The sum counts every buffer as if all were alive at once; at the peak, some are not yet
    allocated or already freed. Each category short of its sum is named with what is alive of it.
    """
    total = per_gpu.total_bytes
    head = f"The peak, {format_bytes(peak.bytes, unit)} at “{peak.event}” in step {peak.step}"
    short = []
    for category in core.CATEGORIES:
        whole = per_gpu[category]
        alive = peak.breakdown[category] or 0
        if whole is None or alive >= whole:
            continue
        noun = CATEGORY_NOUNS[category]
        if alive:
            short.append(f"{format_bytes(alive, unit)} of the {format_bytes(whole, unit)} of {noun}")
        else:
            short.append(f"none of the {format_bytes(whole, unit)} of {noun}")
    if not short:
        return f"{head}, is the {format_bytes(total, unit)} sum of every buffer: all of them are alive at once."
    listed = short[0] if len(short) == 1 else ", ".join(short[:-1]) + " and " + short[-1]
    verb = "is" if len(short) == 1 and not short[0].startswith("none") else "are"
    return (f"{head}, is less than the {format_bytes(total, unit)} sum of every buffer, because not every buffer "
            f"is alive at once: at the peak, {listed} {verb} alive.")


def attention_note(choice: str | None, kernel: str | None) -> str | None:
    """The attention kernel the estimate assumes, in words: ``sdpa → flash (fused; saves ...)``."""
    if kernel is None:
        return None
    about = core.KERNELS[kernel].about if kernel in core.KERNELS else ""
    chosen = f"{choice} → {kernel}" if choice and choice != kernel else kernel
    return f"Kernel assumed: {chosen}" + (f" ({about})." if about else ".")


def result_view(result: core.Estimate, parallelism: core.Parallelism, unit: Unit, *,
                attention: str | None = None, host_ram: int | None = None) -> ResultView:
    """Everything the page shows of `result`; `attention` is the attention choice the kernel was picked for."""
    capacity = result.gpu.gpu.capacity_bytes if result.gpu else None
    world = parallelism.world_size
    per_gpu_total = result.per_gpu.total_bytes
    peak = result.peak
    over = result.gpu is not None and not result.gpu.fits
    unknown = frozenset(category for category in core.CATEGORIES if result.per_gpu[category] is None)
    gpus_word = "GPU" if world == 1 else "GPUs"
    per_param = result.bytes_per_param
    said = verdict(result.gpu, peak.bytes, unit, gpus=world, at=f"{peak.event}, step {peak.step}")
    return ResultView(
        unit=unit,
        unit_name=UNIT_NAMES[unit],
        verdict=said,
        compact=compact_verdict(said, _needs(result), capacity, unit),
        peak_total=format_bytes(peak.bytes, unit),
        peak_total_exact=format_exact_bytes(peak.bytes),
        per_gpu_total=format_bytes(per_gpu_total, unit),
        per_gpu_total_exact=format_exact_bytes(per_gpu_total),
        peak_note=peak_note(peak, result.per_gpu, unit),
        param_count=format_count(result.param_count),
        world_size=world,
        layout=f"{world:,} {gpus_word}: data {parallelism.data} × tensor {parallelism.tensor} × pipeline {parallelism.pipeline}",
        stage_note=_stage_note(result, parallelism),
        model_states_only=result.per_gpu["activations"] is None,
        per_gpu_bar=_bar("Per GPU at the peak (most-loaded rank)", peak.breakdown, capacity, unit, over=over,
                         unknown=unknown, beyond=_beyond(result)),
        cluster_bar=_bar(f"Cluster, sum of every buffer, {world:,} {gpus_word}", result.cluster,
                         capacity * world if capacity else None, unit, over=over),
        legend=_legend(result, unit, unknown),
        legend_total=LegendTotal(format_bytes(peak.bytes, unit), format_bytes(per_gpu_total, unit),
                                 format_bytes(result.cluster.total_bytes, unit)),
        timeline=timeline_chart(result.timeline, unit=unit, unit_bytes=UNIT_BYTES[unit],
                                size=lambda value: format_bytes(value, unit), capacity_bytes=capacity,
                                reserved=result.reserved_timeline, over=over),
        attention_note=attention_note(attention, result.attention_kernel),
        bytes_per_param_total=format_bytes_per_param(sum(per_param.values())),
        bytes_per_param_sum=_per_param_sum(per_param),
        explanations=_explanations(result, unit),
        warnings=_warnings(result, general=False),
        general_warnings=_warnings(result, general=True),
        trainable=trainable_note(result.param_count, result.trainable_param_count),
        host=host_view(result.host, host_ram, unit) if result.host is not None else None,
    )


def _per_param_sum(per_param: Mapping[str, float]) -> str:
    return " + ".join(format_bytes_per_param(per_param[c]) for c in core.CATEGORIES if c in per_param)


def _warnings(result: core.Estimate, *, general: bool) -> tuple[str, ...]:
    """The estimate's warnings about this setup, or (`general`) those true of every setup of its kind."""
    return tuple(warning for warning in result.warnings if is_general(warning) == general)


def _needs(result: core.Estimate) -> int:
    """What the step needs of a GPU: the allocator's reserve and what lies outside it; without a GPU, the peak."""
    return result.gpu.reserved_bytes + result.gpu.outside_bytes if result.gpu else result.peak.bytes


def _stage_note(result: core.Estimate, parallelism: core.Parallelism) -> str | None:
    if parallelism.pipeline <= 1:
        return None
    return (f"Per-GPU figures are those of pipeline stage {result.pipeline_stage + 1} of "
            f"{parallelism.pipeline}, the most loaded.")


def _legend(result: core.Estimate, unit: Unit, unknown: frozenset[str]) -> tuple[LegendRow, ...]:
    """One row per category: at the peak, summed per GPU and over the cluster, its share and its bytes per
    parameter."""
    per_param = result.bytes_per_param
    return tuple(
        LegendRow(
            category=category,
            label=CATEGORY_LABELS[category],
            short=CATEGORY_SHORT[category],
            at_peak=_maybe_bytes(None if category in unknown else result.peak.breakdown[category], unit),
            per_gpu=_maybe_bytes(result.per_gpu[category], unit),
            cluster=_maybe_bytes(result.cluster[category], unit),
            share=_share(result.per_gpu[category], result.per_gpu.total_bytes),
            bytes_per_param=format_bytes_per_param(per_param[category]) if category in per_param else None,
        )
        for category in core.CATEGORIES
    )


def _beyond(result: core.Estimate) -> dict[str, int]:
    """The allocator's cache beyond the tensors at the peak, and the memory outside it (on a GPU): NCCL's buffers,
    then the rest."""
    outside = result.gpu.outside_bytes if result.gpu else 0
    communicators = result.gpu.communicator_bytes if result.gpu else 0
    return {"cached": max(result.peak.reserved_bytes - result.peak.bytes, 0), "communicators": communicators,
            "outside": outside - communicators}


def _maybe_bytes(value: int | None, unit: Unit) -> str:
    return "not computed" if value is None else format_bytes(value, unit)


def _share(value: int | None, total: int) -> str:
    return "" if value is None or not total else f"{100 * value / total:.1f} %"


def _explanations(result: core.Estimate, unit: Unit) -> tuple[Explanation, ...]:
    groups = []
    for category in core.CATEGORIES:
        terms = [buffer for buffer in result.ledger if buffer.category == category]
        if not terms:
            continue
        groups.append(Explanation(
            category=category,
            label=CATEGORY_LABELS[category],
            short=CATEGORY_SHORT[category],
            about=CATEGORY_ABOUT[category],
            size=format_bytes(result.per_gpu[category] or 0, unit),
            lines=tuple(_term_line(t, unit) for t in terms),
            details=_layer_details(result, unit) if category == "activations" else (),
        ))
    return tuple(groups)


# The person's own extra per GPU: named as its control is, and at its default said to be unset.
OVERHEAD_KEY: Final = "overhead"


def _term_line(term: core.Buffer, unit: Unit) -> TermLine:
    label, formula = term.label, term.formula
    if term.key == OVERHEAD_KEY:
        label = LABELS["framework_overhead_bytes"]
        formula = "set by you" if term.bytes else "none set"
    return TermLine(label, formula, format_bytes(term.bytes, unit), format_exact_bytes(term.bytes))


def _layer_details(result: core.Estimate, unit: Unit) -> tuple[TermLine, ...]:
    """One layer's kept tensors, largest first, for the activations explanation."""
    tensors = sorted(result.layer_activations, key=lambda tensor: tensor.bytes, reverse=True)
    return tuple(TermLine(t.name, "", format_bytes(t.bytes, unit), format_exact_bytes(t.bytes)) for t in tensors)
