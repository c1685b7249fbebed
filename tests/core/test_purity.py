"""The domain core imports nothing but the standard library and itself."""

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "app" / "core"


def test_core_imports_only_the_standard_library():
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and not name.startswith("app.core"):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_only_the_family_records_ask_for_a_model_type():
    # A trait a family has is a field of its record (app/core/families.py), and how its config.json is read is its
    # record in app/core/hf_records.py, looked up by model type; no test of model_type elsewhere.
    asked = []
    for path in CORE.rglob("*.py"):
        if path.name == "families.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "model_type"
                    for side in (node.left, *node.comparators)):
                asked.append(f"{path.name}:{node.lineno}")
    assert asked == []


def _is_model_type(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "model_type") or (
        isinstance(node, ast.Attribute) and node.attr == "model_type")


def _is_text(node: ast.expr) -> bool:
    """A string literal, or a tuple, list or set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and all(_is_text(item) for item in node.elts)


def _model_type_tests(source: str) -> list[int]:
    """The lines where `source` compares a model_type with a name written out (``model_type == "gpt2"``,
    ``arch.model_type in ("gemma2", "gemma3_text")``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            if any(_is_model_type(side) for side in sides) and any(_is_text(side) for side in sides):
                lines.append(node.lineno)
    return lines


def test_the_finder_sees_a_model_type_test():
    source = ('a = model_type == "gpt2"\nb = arch.model_type in ("mixtral", "qwen3_moe")\n'
              'c = "olmo2" != self.model_type\nd = model_type in RECORDS\ne = kind == "gpt2"\n')
    assert _model_type_tests(source) == [1, 2, 3]


def test_no_model_type_is_tested_by_name_outside_the_family_records():
    # Which reader reads a model type and what it does differently are its record's (app/core/hf_records.py,
    # looked up as RECORDS[model_type]); families.py holds the estimate's traits and may name a model type.
    app = CORE.parent
    named = [f"{path.relative_to(app)}:{line}" for path in sorted(app.rglob("*.py"))
             if path != CORE / "families.py"
             for line in _model_type_tests(path.read_text(encoding="utf-8"))]
    assert named == []
