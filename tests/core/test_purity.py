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


def test_only_the_family_records_and_the_config_reader_ask_for_a_model_type():
    # A trait a family has is a field of its record (app/core/families.py), not a test of model_type elsewhere.
    # hf_config.py reads each family's config.json and still chooses its reader by model type.
    asked = []
    for path in CORE.rglob("*.py"):
        if path.name in ("families.py", "hf_config.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "model_type"
                    for side in (node.left, *node.comparators)):
                asked.append(f"{path.name}:{node.lineno}")
    assert asked == []
