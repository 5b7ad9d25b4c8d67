"""Issue 5, HTTP fuzzing: schemathesis generates requests from /openapi.json against the app
(in-process WSGI, backed by a running pipeline so writes really publish and materialize) and
checks that no answer is a 5xx and that every answer matches the documented status codes,
content type and schema."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis (test extra) is not installed")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from serving import lifecycle  # noqa: E402
from serving.app import create_app  # noqa: E402
from tests.harness import ADMIN_TOKEN, Pipeline  # noqa: E402
from tests.helpers import reg, topics  # noqa: E402

pytestmark = pytest.mark.integration
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api_schema(spark, kafka_bootstrap, tmp_path_factory):
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("fuzz-http"),
                 NAMESRV_WRITE_TIMEOUT_MS="20000").start_job().start_http()
    try:
        p.wait_served(p.publish([reg("broker-a", 0, "127.0.0.1:35911", tps=topics("TopicTest", "Base"))]))
        with lifecycle.running(create_app(p.cfg)) as app:
            # the watch streams are served by the RSGI front (serving/asgi.py), not by this WSGI app
            yield schemathesis.openapi.from_wsgi("/openapi.json", app).exclude(path_regex=r"/watch$")
    finally:
        p.close()


def test_no_5xx_and_answers_match_the_document(api_schema, figures):
    """Every operation, up to 12 generated cases each (schemathesis' pytest plugin predates pytest 9,
    so the operations' hypothesis strategies are driven directly)."""
    calls = 0
    operations = [result.ok() for result in api_schema.get_all_operations()]
    for operation in operations:
        @settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def run(case):
            nonlocal calls
            calls += 1
            case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, checks=CHECKS)
        run()
    figures(f"OpenAPI fuzzing (schemathesis): {calls} HTTP cases over {len(operations)} operations, "
            f"0 server errors or schema violations")
    assert calls >= len(operations)
