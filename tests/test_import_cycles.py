"""No import cycle in `app/`: the modules' load-time imports (at module level, `if TYPE_CHECKING:` left aside) form a
graph without a loop, so every room can be read, and loaded, after the rooms it stands on."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def _modules() -> dict[str, Path]:
    found = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _load_time(statements: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module loads: at its top level, or in a top-level if or try."""
    for node in statements:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            yield from _load_time(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _load_time(node.body + node.orelse + node.finalbody
                                  + [line for handler in node.handlers for line in handler.body])


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def module_of(name: str) -> str | None:  # a name's module: itself, or the package or module that defines it
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in _load_time(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                edges |= {module_of(alias.name) for alias in node.names if alias.name.startswith("app")}
            elif node.level == 0 and node.module and node.module.split(".")[0] == "app":
                edges |= {module_of(f"{node.module}.{alias.name}") for alias in node.names}
        graph[name] = {edge for edge in edges if edge is not None and edge != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One loop of the graph (its modules in order), or [] where there is none: a depth-first walk."""
    state: dict[str, int] = {}  # 1 on the walk's path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for edge in sorted(graph[node]):
            if state.get(edge) == 1:
                return path[path.index(edge):] + [edge]
            if edge not in state and (found := visit(edge)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_no_import_cycle_in_app():
    graph = _graph()
    assert len(graph) > 100 and "app.core.estimate" in graph["app.core"]
    assert _cycle(graph) == []


def test_the_walk_finds_a_loop_where_there_is_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
