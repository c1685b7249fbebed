"""The app's code stays in rooms a person can hold: no function or method over 60 lines, counted from its `def` to
its last line with the docstring and without decorators, and no module over 600 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600
# Where a statement holds statements: a def is a statement, so nothing inside an expression needs a look.
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _defs(statements: list[ast.AST]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        for block in _BLOCKS:
            yield from _defs(getattr(node, block, []))


def _function_lines(source: str) -> dict[str, int]:
    """Each function's and method's lines (nested ones too), by name and the line of its `def`."""
    return {f"{node.name} (line {node.lineno})": (node.end_lineno or node.lineno) - node.lineno + 1
            for node in _defs(list(ast.parse(source).body))}


@cache
def _sources() -> dict[str, str]:
    return {str(path.relative_to(APP.parent)): path.read_text(encoding="utf-8") for path in sorted(APP.rglob("*.py"))}


def test_no_function_over_60_lines():
    sources = _sources()
    assert len(sources) > 100  # the whole app, not an empty folder
    long = [f"{module}::{name}: {lines} lines" for module, source in sources.items()
            for name, lines in _function_lines(source).items() if lines > MAX_FUNCTION_LINES]
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_no_module_over_600_lines():
    long = [f"{module}: {len(source.splitlines())} lines" for module, source in _sources().items()
            if len(source.splitlines()) > MAX_MODULE_LINES]
    assert not long, "modules over 600 lines:\n" + "\n".join(long)


def test_a_function_counts_from_def_to_last_line_without_decorators():
    body = "".join(f"    x = {i}\n" for i in range(59))
    source = (f'@decorator\ndef long():\n    """Docstring."""\n{body}\nclass C:\n    def method(self):\n'
              "        try:\n            pass\n        except OSError:\n            def inner():\n                pass\n")
    assert _function_lines(source) == {"long (line 2)": 61, "method (line 65)": 6, "inner (line 69)": 2}
