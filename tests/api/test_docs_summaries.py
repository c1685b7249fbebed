"""The API's documentation names each operation in words, and the operation ids clients use stay as they were."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.main import app

# FastAPI derives an id from the function, the path and the method; clients generated from the schema use these
# names, so they are a promise: a summary may change, an id may not.
OPERATION_IDS = {
    ("post", "/api/v1/estimate"): "post_estimate_api_v1_estimate_post",
    ("post", "/api/v1/solve"): "post_solve_api_v1_solve_post",
    ("post", "/api/v1/sweep"): "post_sweep_api_v1_sweep_post",
    ("post", "/api/v1/import"): "post_import_api_v1_import_post",
    ("post", "/api/v1/export"): "post_export_api_v1_export_post",
    ("get", "/api/v1/presets"): "get_presets_api_v1_presets_get",
    ("get", "/api/v1/gpus"): "get_gpus_api_v1_gpus_get",
}


def _operations() -> dict[tuple[str, str], dict]:
    schema = TestClient(app).get("/openapi.json").json()
    return {(method, path): operation for path, item in schema["paths"].items() for method, operation in item.items()}


def _default_summary(operation_id: str, path: str, method: str) -> str:
    """What FastAPI writes when a route has no summary: the function's name in title case ("Post Estimate")."""
    function = operation_id.removesuffix(f"_{path.strip('/').replace('/', '_')}_{method}")
    return function.replace("_", " ").title()


def test_every_operation_has_a_summary_of_its_own():
    operations = _operations()
    assert operations, "the schema lists no operations"
    for (method, path), operation in operations.items():
        summary = operation.get("summary", "")
        assert summary, f"{method.upper()} {path} has no summary"
        assert summary != _default_summary(operation["operationId"], path, method), (
            f"{method.upper()} {path} is still named after its function: {summary!r}")


def test_operation_ids_are_unchanged():
    assert {key: operation["operationId"] for key, operation in _operations().items()} == OPERATION_IDS
