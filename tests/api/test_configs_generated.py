"""Generated requests to /import and /export: never a server error, and the answers match the documented shapes."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from app.main import app
from tests.budget import examples

schema = schemathesis.openapi.from_asgi("/openapi.json", app)
pytestmark = pytest.mark.search  # building the generated tests alone takes seconds: make test-fast leaves them out
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@schema.include(path="/api/v1/import").parametrize()
@settings(max_examples=examples(150), deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_import_generated(case):
    case.call_and_validate(checks=CHECKS)


@schema.include(path="/api/v1/export").parametrize()
@settings(max_examples=examples(150), deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_export_generated(case):
    case.call_and_validate(checks=CHECKS)
