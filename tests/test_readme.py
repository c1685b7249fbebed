"""The README is a newcomer's guide: short, opening with the two commands that do all the set-up, and every file it
links to or shows is there. The reference lives in docs/, whose links to each other are checked here too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 120
MAX_SCREENSHOT_BYTES = 300_000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)\)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _without_code(text: str) -> str:
    return FENCE.sub("", text)


def _links(path: Path) -> list[tuple[bool, str]]:
    """(is an image, target) for each Markdown link outside code blocks that stays in this repository."""
    found = LINK.findall(_without_code(_text(path)))
    return [(bang == "!", target) for bang, target in found if not re.match(r"[a-z]+:", target)]


def _anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in _without_code(_text(path)).splitlines() if line.startswith("#")}


def test_readme_is_under_the_line_limit() -> None:
    assert len(_text(README).splitlines()) < MAX_LINES


def test_readme_opens_with_make_run_then_make_test() -> None:
    text = _text(README)
    first_block = FENCE.search(text)
    assert first_block is not None
    assert "\n## " not in text[: first_block.start()], "the set-up commands come before any section"
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert [command for command in commands if command][:2] == ["make run", "make test"]


@pytest.mark.parametrize("path", [README, ROOT / "docs" / "API.md", ROOT / "docs" / "SCOPE.md"],
                         ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(path: Path) -> None:
    assert _links(path)
    for _, target in _links(path):
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.is_file(), f"{path.name} links to {target}, which is not a file"
        if fragment and linked.suffix == ".md":
            assert fragment in _anchors(linked), f"{path.name} links to {target}, which has no such heading"


def test_the_screenshot_the_readme_shows_exists() -> None:
    images = [target for is_image, target in _links(README) if is_image]
    assert images, "the README shows the page"
    for target in images:
        screenshot = README.parent / target
        assert screenshot.read_bytes()[:8] == PNG_SIGNATURE, f"{target} is not a PNG"
        assert screenshot.stat().st_size < MAX_SCREENSHOT_BYTES


def test_readme_names_every_model_type_a_config_may_have():
    from app import core

    paragraph = README.read_text(encoding="utf-8").split("model\ntypes measured", 1)[1].split(".", 1)[0]
    named = set(re.findall(r"\b[a-z][a-z0-9_]*[0-9_][a-z0-9_]*\b|\b[a-z]+\b", paragraph))
    assert set(core.SUPPORTED_MODEL_TYPES) <= named, set(core.SUPPORTED_MODEL_TYPES) - named
