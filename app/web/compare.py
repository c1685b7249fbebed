"""A pinned setup to compare with: its query in the URL, and both breakdowns at the peak side by side.

Pinning keeps the current setup's query string in the ``pin`` parameter (URL-encoded), so the page's
URL still holds the whole state and opening it shows the comparison. The pinned setup is read with
the same form parser as the page; whatever is wrong with it becomes a message on the page, never an
error status. Differences are this setup's bytes minus the pinned setup's, category by category.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import parse_qsl, urlencode

from app import core
from app.api.schemas import EstimateRequest
from app.web import controls, links
from app.web.form import ALL_CONTROLS, ParsedForm, Unit, parse_form
from app.web.view import CATEGORY_LABELS, CATEGORY_SHORT, format_bytes, format_size_input, percent

# A pin longer than this is refused with a message (a pasted config.json fits well within it).
MAX_PIN_CHARS: Final = 64_000
# Fields that matter only when another holds (the page shows their controls only then).
MATTERS_WHEN: Final[dict[str, Callable[[Mapping[str, object]], bool]]] = {
    "parallelism.zero_stage": lambda fields: (fields.get("parallelism.data") or 1) > 1,  # type: ignore[operator]
    "parallelism.sequence_parallel": lambda fields: (fields.get("parallelism.tensor") or 1) > 1,  # type: ignore[operator]
    "training.adafactor_momentum": lambda fields: fields.get("training.optimizer") == "adafactor",
}
MINUS: Final = "\u2212"

Sign = Literal["more", "less", "same"]


@dataclass(frozen=True)
class Segment:
    category: str
    short: str
    width: str  # percent of the common scale
    size: str


@dataclass(frozen=True)
class SideBar:
    title: str
    total: str
    segments: tuple[Segment, ...]
    capacity_at: str | None  # percent along the bar; None without a GPU


@dataclass(frozen=True)
class Row:
    category: str
    label: str
    short: str
    pinned: str
    current: str
    difference: str
    sign: Sign


@dataclass(frozen=True)
class Comparison:
    bars: tuple[SideBar, SideBar]  # pinned, then this setup, on one scale
    rows: tuple[Row, ...]
    total: Row
    verdicts: tuple[str, str]  # pinned, this setup
    changes: tuple[str, ...]  # "Sequence length: 4,096 → 8,192"
    same: bool  # nothing differs yet


@dataclass(frozen=True)
class Pin:
    value: str | None  # the pinned query as the hidden field carries it; None when nothing is pinned
    pin_href: str  # pins this setup (instead of the pinned one, when there is one)
    unpin_href: str | None
    swap_href: str | None  # makes the pinned setup the current one, and pins this one
    comparison: Comparison | None
    message: str | None  # why there is no comparison


def pin_value(state: Mapping[str, str], source: str) -> str:
    """The query a pin holds: the setup's controls, never empty (it starts with the model's source)."""
    return urlencode({"source": source} | {name: value for name, value in state.items() if name in ALL_CONTROLS})


def pin(params: Mapping[str, str], form: ParsedForm, unit: Unit) -> Pin:
    """The pin control and, when a setup is pinned, the comparison of `form` with it."""
    state = links.state_of(params, names=ALL_CONTROLS)
    here = pin_value(state, form.source)
    pin_href = links.href(state | {links.PIN: here})
    raw = str(params.get(links.PIN, "") or "")
    if not raw:
        return Pin(None, pin_href, None, None, None, None)
    unpin_href = links.href(state)
    if len(raw) > MAX_PIN_CHARS:
        return Pin(None, pin_href, unpin_href, None, None,
                   f"The pinned setup is too long to read ({len(raw):,} characters; at most {MAX_PIN_CHARS:,}).")
    pinned_params = dict(parse_qsl(raw, keep_blank_values=True))
    pinned = parse_form(pinned_params)
    pinned_state = links.state_of(pinned_params, names=ALL_CONTROLS)
    swap_href = links.href(pinned_state | {links.PIN: here})
    if not pinned.ok or pinned.estimate is None:
        return Pin(raw, pin_href, unpin_href, None, None, f"The pinned setup cannot be estimated: {_first_error(pinned)}")
    if not form.ok or form.estimate is None:
        return Pin(raw, pin_href, unpin_href, swap_href, None, None)
    return Pin(raw, pin_href, unpin_href, swap_href, comparison(pinned, form, unit), None)


def _first_error(form: ParsedForm) -> str:
    name, message = next(iter(form.errors.items()), ("form", "it gives no estimate"))
    label = controls.LABELS.get(name)
    return f"{label}: {message}" if label else message


def comparison(pinned: ParsedForm, current: ParsedForm, unit: Unit) -> Comparison:
    """Both peaks by category, the differences (this setup minus the pinned one) and what was changed."""
    a, b = pinned.estimate, current.estimate
    assert a is not None and b is not None
    rows = _rows(a, b, unit)
    total = _row("total", "Total", "", a.peak.bytes, b.peak.bytes, unit)
    capacities = [e.gpu.gpu.capacity_bytes for e in (a, b) if e.gpu is not None]
    scale = max(a.peak.bytes, b.peak.bytes, *capacities)
    assert pinned.request is not None and current.request is not None
    changes = what_changed(pinned.request, current.request)
    return Comparison(
        bars=(_bar("Pinned", a, scale, unit), _bar("This setup", b, scale, unit)),
        rows=tuple(rows),
        total=total,
        verdicts=(_verdict(a, unit), _verdict(b, unit)),
        changes=changes,
        same=not changes and total.sign == "same",
    )


def _rows(a: core.Estimate, b: core.Estimate, unit: Unit) -> list[Row]:
    """A row per category either estimate computes."""
    rows = []
    for category in core.CATEGORIES:
        before, after = _at_peak(a, category), _at_peak(b, category)
        if before is None and after is None:
            continue
        rows.append(_row(category, CATEGORY_LABELS[category], CATEGORY_SHORT[category], before, after, unit))
    return rows


def _at_peak(result: core.Estimate, category: str) -> int | None:
    # A category the estimate does not compute (activations of a bare parameter count) is None in its sums.
    return None if result.per_gpu[category] is None else result.peak.breakdown[category] or 0


def _row(category: str, label: str, short: str, before: int | None, after: int | None, unit: Unit) -> Row:
    if before is None or after is None:
        return Row(category, label, short, _size(before, unit), _size(after, unit), "", "same")
    delta = after - before
    sign: Sign = "more" if delta > 0 else "less" if delta < 0 else "same"
    text = "same" if not delta else ("+" if delta > 0 else MINUS) + format_bytes(abs(delta), unit)
    return Row(category, label, short, format_bytes(before, unit), format_bytes(after, unit), text, sign)


def _size(value: int | None, unit: Unit) -> str:
    return "not computed" if value is None else format_bytes(value, unit)


def _bar(title: str, result: core.Estimate, scale: int, unit: Unit) -> SideBar:
    segments = tuple(
        Segment(category, CATEGORY_SHORT[category], percent(result.peak.breakdown[category] or 0, scale),
                format_bytes(result.peak.breakdown[category] or 0, unit))
        for category in core.CATEGORIES if result.peak.breakdown[category]
    )
    capacity = result.gpu.gpu.capacity_bytes if result.gpu else None
    return SideBar(title, format_bytes(result.peak.bytes, unit), segments,
                   percent(capacity, scale) if capacity else None)


def _verdict(result: core.Estimate, unit: Unit) -> str:
    if result.gpu is None:
        return "no GPU chosen"
    if result.gpu.fits:
        return f"fits the {result.gpu.gpu.name}, {format_bytes(result.gpu.headroom_bytes, unit)} to spare"
    return f"does not fit the {result.gpu.gpu.name}, by {format_bytes(-result.gpu.headroom_bytes, unit)}"


def what_changed(before: EstimateRequest, after: EstimateRequest) -> tuple[str, ...]:
    """Each field that differs between two setups, as "Label: old → new", in the request's order.

    Requests, not the raw query, are compared, so ``1 GiB`` and ``1073741824`` are the same overhead.
    A field that only matters when another holds (the ZeRO stage with data parallelism) is left out
    where it matters in neither.
    """
    old, new = _flat(before), _flat(after)
    options = controls.options()
    out = []
    for path in dict.fromkeys([*old, *new]):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        condition = MATTERS_WHEN.get(path)
        if condition and not (condition(old) or condition(new)):
            continue
        name = path.rpartition(".")[2]
        label = controls.LABELS.get(name, name)
        out.append(f"{label}: {_shown(name, a, options)} → {_shown(name, b, options)}")
    return tuple(out)


def _flat(request: EstimateRequest) -> dict[str, object]:
    """The request's fields by path (``training.seq_len``); a custom precision and a config.json stay whole."""
    out: dict[str, object] = {}
    for section, fields in request.model_dump(include={"model", "training", "parallelism", "gpu"}).items():
        if section == "gpu" and isinstance(fields, dict):  # a custom GPU: one change, in the page's words
            out[section] = _custom_gpu(fields)
            continue
        if not isinstance(fields, dict):
            out[section] = fields
            continue
        for name, value in fields.items():
            out[f"{section}.{name}"] = value
    return out


def _custom_gpu(fields: Mapping[str, object]) -> str:
    capacity = fields.get("capacity_bytes")
    like = core.gpu_catalogue().get(str(fields.get("like") or core.gpus.DEFAULT_LIKE))
    if not isinstance(capacity, int):
        size = "?"
    elif capacity % (1 << 20) and not capacity % 10**9:  # given in decimal gigabytes
        size = f"{capacity // 10**9:,} GB"
    else:
        size = format_size_input(capacity)
    return f"custom, {size}" + (f" (as on the {like.name})" if like else "")


def _shown(name: str, value: object, options: Mapping[str, tuple[controls.Option, ...]]) -> str:
    if value is None:
        return "(none)"
    if name == "hf_config":
        return "(a config.json)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return _custom_precision(value)
    if name == "framework_overhead_bytes" and isinstance(value, int):
        return format_size_input(value)
    if isinstance(value, int):
        return f"{value:,}"
    return _option_label(options.get(name, ()), str(value))


def _custom_precision(dtypes: Mapping[object, object]) -> str:
    """A custom precision in words: each tensor's dtype."""
    words = ", ".join(f"{controls.LABELS.get(str(k), str(k)).lower()} {v or 'none'}" for k, v in dtypes.items())
    return f"custom ({words})"


def _option_label(options: tuple[controls.Option, ...], value: str) -> str:
    """The label of the option with `value`; the value itself when no option has it."""
    return next((option.label for option in options if option.value == value), value)
