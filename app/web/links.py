"""Links that change the page's state: this page's URL with some fields changed.

The URL is the whole state (app/web/form.py), so an answer such as "use micro-batch 6" is a plain
link to the same page with that query parameter changed; it works without JavaScript, and htmx
follows the same href in place. Changes are named by the API's field paths
(``training.micro_batch_size``, ``parallelism.zero_stage``, ``gpu``), each of which feeds the control
of the same last name.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlencode

from app.web.form import (
    COMMON_CONTROLS,
    CUSTOM_GPU,
    CUSTOM_PRECISION,
    DTYPE_FIELDS,
    FINETUNING_ALIASES,
    GPU_FIELDS,
    TRUE,
)

PAGE: Final = "/"
PIN: Final = "pin"  # the page's own state beside the controls: a pinned setup to compare with (app/web/compare.py)
# The API sections whose fields are controls of the same name; `gpu` is a control by itself.
SECTIONS: Final = ("training", "parallelism", "finetuning")
SETTABLE: Final = frozenset(COMMON_CONTROLS) - {"source", "unit"}

State = dict[str, str]  # query parameter -> value, in the order the URL gave them

TEMPLATES_DIR: Final = Path(__file__).resolve().parent.parent.parent / "templates"
# The configs a setup downloads as (app.web.docs.export_file), by kind.
EXPORT_LABELS: Final = {"deepspeed": "DeepSpeed JSON", "training-arguments": "Trainer arguments JSON",
                        "accelerate": "accelerate YAML", "axolotl": "axolotl YAML"}


def state_of(params: Mapping[str, str], *, names: frozenset[str] | set[str]) -> State:
    """The parameters among `names` that `params` holds (the last of repeated ones, as the form reads them).

    One-off requests (``fill``) and anything unknown are left out, so a link never repeats them.
    """
    return {name: str(params[name]) for name in dict.fromkeys(params) if name in names}


def control_for(path: str) -> str:
    """The query parameter that feeds the API field at `path`; ValueError for a field the page cannot set."""
    section, _, name = path.rpartition(".")
    if section == "finetuning":
        name = FINETUNING_ALIASES.get(name, name)
    if (section in SECTIONS or (not section and name == "gpu")) and name in SETTABLE:
        return name
    if section == "gpu" and name in GPU_FIELDS:  # a custom GPU's capacity and the GPU it is like
        return GPU_FIELDS[name]
    raise ValueError(f"no control sets {path!r}")


def changed(state: Mapping[str, str], change: Mapping[str, object]) -> State:
    """`state` with each API field in `change` set; ValueError if the page cannot set one of them.

    A true box is ``true`` and a false one is left out, as a browser sends an unticked checkbox. A
    precision preset drops any per-tensor dtypes, which only a custom precision reads.
    """
    out = dict(state)
    for path, value in change.items():
        name = control_for(path)
        out.pop(name, None)  # a changed field moves to the end, so the URL reads as "the setup, then the change"
        if value is None:  # a field set back to blank (its default) is left out, as the page sends a blank box
            continue
        if isinstance(value, bool):
            if value:
                out[name] = TRUE
            continue
        out[name] = str(value)
        if name == "gpu" and value != CUSTOM_GPU:  # a catalogue GPU: a custom one's fields no longer count
            for custom in GPU_FIELDS.values():
                out.pop(custom, None)
        if name == "precision" and value != CUSTOM_PRECISION:
            for dtype in DTYPE_FIELDS:
                out.pop(dtype, None)
    return out


def href(state: Mapping[str, str]) -> str:
    """The page's URL for `state`."""
    return f"{PAGE}?{urlencode(state)}" if state else PAGE
