"""Reentrant checkpoints, measured: torch.utils.checkpoint's two variants under full recomputation, on CPU.

transformers 5 checkpoints each decoder layer with ``use_reentrant=False`` unless told otherwise
(transformers/modeling_utils.py, ``_activation_checkpointing_enable``); many fine-tuning scripts still pass
``gradient_checkpointing_kwargs={"use_reentrant": True}``. The two keep the same tensors from forward (each layer's
input). In backward, the non-reentrant checkpoint rebuilds a layer's saved tensors and stops there
(``torch.utils.checkpoint.set_checkpoint_early_stop``, on by default); the reentrant one
(``CheckpointFunction.backward``) runs the whole layer again, the residual sum that is its output too, and holds that
output until the layer's backward returns: one b × s × h tensor in the residual stream's dtype beside the rebuild.

Each case runs two training steps of a small model both ways (the timeline harness, validation/timeline.py) and
compares the peak with trainmem's ``estimate`` for ``Training(activation_checkpointing="full", use_reentrant=...)``.

    python -m validation.reentrant              # measure, compare, print a line per case
    python -m validation.reentrant --write      # and publish docs/reentrant.json and the section
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any, Final

from validation import peak
from validation import timeline as tl
from validation.models import Size
from validation.sections import write_section

SECTION: Final = "## Reentrant checkpoints"
RESULTS: Final = tl.DOCS / "reentrant.json"
SIZE: Final = Size(hidden=256, layers=6, heads=4, kv_heads=2, intermediate=1536, vocab=512, head_dim=64)
TOLERANCE: Final = 0.02  # the project's peak target


def cases() -> tuple[tl.TimelineCase, ...]:
    """Llama and Qwen2 in bf16, Llama at another width and shape, in fp32 and with LoRA: each both ways."""
    base = tl.TimelineCase("llama", precision="bf16", seq=1024, batch=2, size=SIZE, checkpointing="full")
    shapes = (base, replace(base, family="qwen2"),
              replace(base, seq=2048, batch=1, size=replace(SIZE, hidden=384, heads=6)),
              replace(base, precision="fp32"), replace(base, lora_rank=8, lora_targets=("q_proj", "v_proj")))
    return tuple(replace(case, use_reentrant=reentrant) for case in shapes for reentrant in (False, True))


def measure(case: tl.TimelineCase) -> dict[str, Any]:
    measured = tl.measure(case)
    point = measured.peak()
    return {"case": case.as_dict(), "config": measured.config, "peak": point.peak, "event": point.event}


def row(result: dict[str, Any]) -> dict[str, Any]:
    """A measured case beside trainmem's answer for it."""
    fields = {name: value for name, value in result["case"].items() if name in tl.TimelineCase.__dataclass_fields__}
    fields |= {"size": Size(**fields["size"]), "lora_targets": tuple(fields.get("lora_targets", ()))}
    case = tl.TimelineCase(**fields)
    predicted = peak.predict(case, result["config"]).peak
    error = predicted.bytes / result["peak"] - 1
    return {"label": case.label, "measured": result["peak"], "measured_event": result["event"],
            "predicted": predicted.bytes, "predicted_event": predicted.event, "error": round(error, 6)}


def published() -> list[dict[str, Any]]:
    return json.loads(RESULTS.read_text(encoding="utf-8"))["measured"]


def section(rows: list[dict[str, Any]]) -> list[str]:
    lines = [SECTION, "",
             "torch.utils.checkpoint's reentrant variant (`use_reentrant=True`) against transformers' default, two "
             "training steps on CPU (validation/reentrant.py). The reentrant checkpoint runs a layer's whole forward "
             "again in its backward and holds the layer's output (b × s × h in the residual stream's dtype) until "
             "that backward returns; trainmem counts it as `recompute.output`.", "",
             "| Case | Measured peak | Predicted | Error | Event (measured / predicted) |",
             "|---|---:|---:|---:|---|"]
    for item in rows:
        lines.append(f"| {item['label']} | {item['measured']:,} | {item['predicted']:,} | {item['error']:+.2%} | "
                     f"{item['measured_event']} / {item['predicted_event']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="publish docs/reentrant.json and the section")
    args = parser.parse_args(argv)
    results = [measure(case) for case in cases()]
    rows = [row(result) for result in results]
    for item in rows:
        print(f"{item['label']}: measured {item['measured']:,} at {item['measured_event']}, predicted "
              f"{item['predicted']:,} ({item['error']:+.3%})", flush=True)
    if args.write:
        RESULTS.write_text(json.dumps({"measured": results, "rows": rows}, indent=1) + "\n", encoding="utf-8")
        write_section(section(rows))
    return 0 if all(abs(item["error"]) <= TOLERANCE for item in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
