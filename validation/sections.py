"""One section of docs/VALIDATION.md, written by the module that measures it."""

from __future__ import annotations

from pathlib import Path

REPORT = Path(__file__).resolve().parent.parent / "docs" / "VALIDATION.md"


def write_section(lines: list[str], path: Path = REPORT) -> None:
    """Replace the section whose heading is ``lines[0]`` (up to the next ``## `` heading), or append it."""
    heading = lines[0]
    text = path.read_text(encoding="utf-8").splitlines()
    if heading in text:
        start = text.index(heading)
        end = next((i for i in range(start + 1, len(text)) if text[i].startswith("## ")), len(text))
        text[start:end] = lines
    else:
        text += ["", *lines]
    path.write_text("\n".join(text).rstrip() + "\n", encoding="utf-8")
