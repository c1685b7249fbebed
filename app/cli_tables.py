"""The command line's answers as text: tables and sentences in GiB (2^30 bytes); --json keeps the API's bytes."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from app import core
from app.cli_args import PROG

GIB: Final = 1 << 30


# A figure in bytes in the core's prose, "180,054,876,168 B".
BYTES: Final = re.compile(r"(?<![\d,.])(\d{1,3}(?:,\d{3})*) B\b")


def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:,.2f}"


def in_gib(text: str) -> str:
    """The core's sentence with its byte figures in GiB, as the tables around it: "40.00 GiB" for "42,949,672,960 B"."""
    return BYTES.sub(lambda match: f"{gib(int(match[1].replace(',', '')))} GiB", text)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[bool]) -> list[str]:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = []
    for row in (header, *rows):
        cells = [cell.rjust(width) if r else cell.ljust(width) for cell, width, r in zip(row, widths, right, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return lines


def verdict(gpu: Mapping[str, Any] | None) -> str | None:
    if gpu is None:
        return None
    where = f"{gpu['name']} ({gib(gpu['capacity'])} GiB)"
    if gpu["fits"]:
        return f"Fits on {where}: {gib(gpu['headroom'])} GiB headroom"
    return f"Does not fit on {where}: {gib(-gpu['headroom'])} GiB short"


def peak_text(peak: Mapping[str, Any]) -> str:
    return f"{gib(peak['bytes'])} GiB at '{peak['event']}' (step {peak['step']})"


def estimate_text(result: Mapping[str, Any]) -> list[str]:
    lines = [f"Parameters: {result['param_count']:,}"]
    if result["trainable_param_count"] != result["param_count"]:
        lines[0] += f" ({result['trainable_param_count']:,} trainable)"
    fit = verdict(result["gpu"])
    if fit:
        lines.append(fit)
    lines.append(f"Peak on the most-loaded GPU: {peak_text(result['peak'])}")
    lines.append(f"Reserved by the caching allocator at its worst: {gib(result['peak']['reserved_bytes'])} GiB")
    if result["gpu"]:
        lines.append(f"Outside the allocator (CUDA context, NCCL, your extra): {gib(result['gpu']['outside_allocator_bytes'])} GiB")
        for group in result["gpu"]["communicators"]:
            lines.append(f"  NCCL, {group['group']} group of {group['ranks']}: {gib(group['bytes'])} GiB ({group['formula']})")
    lines.append("")
    at_peak, per_gpu = result["peak"]["breakdown"], result["per_gpu"]
    rows = [[category.label, gib(at_peak.get(category.id)), gib(per_gpu[category.id])]
            for category in core.CATEGORY_TABLE.values()]
    rows.append(["Total", gib(result["peak"]["bytes"]), gib(per_gpu["total"])])
    lines += table(["Category", "At the peak (GiB)", "Per-GPU sum (GiB)"], rows, right=[False, True, True])
    host = result.get("host")
    if host:
        lines += ["", f"Host memory (offloaded): {gib(host['per_gpu']['total'])} GiB per GPU, "
                      f"{gib(host['per_node_bytes'])} GiB per node of {host['gpus_per_node']} GPUs"]
    if result["warnings"]:
        lines += ["", "Warnings:", *(f"- {warning}" for warning in result["warnings"])]
    return lines


def solution_text(solution: Mapping[str, Any]) -> list[str]:
    target, value = solution["target"], solution["value"]
    lines = [f"{target}: {value:,}" if value is not None else f"{target}: none fits"]
    if solution["note"]:
        lines.append(in_gib(solution["note"]))
    at = f"At {target} = {value:,}" if value is not None else "As given"
    result = solution["estimate"]
    lines.append(f"{at}, the peak is {peak_text(result['peak'])}")
    fit = verdict(result["gpu"])
    if fit:
        lines.append(fit)
    if solution["fixes"]:
        rows = [[fix["summary"], gib(fix["peak"]["bytes"]), fix["cost"]["text"]] for fix in solution["fixes"]]
        fixes = table(["Change", "Peak (GiB)", "Cost"], rows, right=[False, True, False])
        lines += ["", "Fixes, cheapest first:", *(f"  {line}" for line in fixes)]
    return lines


def series_text(result: Mapping[str, Any]) -> list[str]:
    def shown(value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return f"{value:,}" if isinstance(value, int) else str(value)

    fits = {True: "yes", False: "no", None: "-"}
    points = result["points"]
    rows = [[shown(point["value"]), gib(point["peak"]["bytes"]), point["peak"]["event"], fits[point["fits"]]]
            for point in points]
    numbers = all(isinstance(point["value"], int) and not isinstance(point["value"], bool) for point in points)
    return table([result["field"], "Peak (GiB)", "Event", "Fits"], rows, right=[numbers, True, False, False])


def import_text(read: Mapping[str, Any]) -> list[str]:
    """What the imported files said, in a few lines: what was read, what was left aside and why."""
    lines = [f"Read {', '.join(read['kinds'])}: {len(read['understood'])} keys understood, "
             f"{len(read['ignored'])} ignored, {len(read['assumed'])} assumed"]
    lines += [f"  ignored {item['key']}: {item['why']}" for item in read["ignored"]]
    lines += [f"  assumed {item['field']} = {item['value']}: {item['why']}" for item in read["assumed"]]
    return lines


def _unexpressed(item: Any) -> str:
    """What an exported file cannot carry, in words: ``training.framework = pytorch: why``."""
    if isinstance(item, Mapping) and "field" in item:
        value = item.get("value")
        shown = json.dumps(value) if not isinstance(value, str) else value
        return f"{item['field']} = {shown}" + (f": {item['why']}" if item.get("why") else "")
    return str(item)


def export_text(result: Mapping[str, Any]) -> list[str]:
    """The exported file's text; what it cannot carry goes to stderr, so the output is the file itself."""
    notes = [*result.get("notes", []), *(f"not carried: {_unexpressed(item)}" for item in result.get("unexpressed", []))]
    for note in notes:
        print(f"{PROG} export: {note}", file=sys.stderr)
    return [result["text"].rstrip()]


TEXT: Final = {"estimate": estimate_text, "solve": solution_text, "sweep": series_text, "export": export_text}
