"""The app's modules import in one direction: no module reaches itself through its imports, and no two of the app's
packages (api, configs, core, web) import each other. Imports under TYPE_CHECKING are for the type checker only
and are left out."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def _modules() -> dict[str, Path]:
    found = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("app"):
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("app")}
    return found & modules.keys()


@functools.cache  # both tests read the same files
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


def test_no_module_imports_itself_through_others():
    graph = _graph()
    assert [name for name in graph if name in _reaches(graph, name)] == []


def test_no_two_packages_import_each_other():
    graph = _graph()
    packages = ("app.api", "app.configs", "app.core", "app.web")

    def package(name: str) -> str:
        return next((p for p in packages if name == p or name.startswith(p + ".")), name)

    edges = {(package(a), package(b)) for a, targets in graph.items() for b in targets if package(a) != package(b)}
    assert sorted((a, b) for a, b in edges if (b, a) in edges) == []
    assert not any(a == "app.core" for a, _ in edges)  # the core imports nothing of the app's
