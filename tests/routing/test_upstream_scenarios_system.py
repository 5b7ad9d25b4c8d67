"""RocketMQ's namesrv unit tests (semantics §11), ported, against the running system:
broker events through Kafka, admin/KV writes and every read through HTTP. Scenarios share a
pipeline under distinct name prefixes and run concurrently; a scenario that flips a global
switch runs alone afterwards."""

from __future__ import annotations

import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.harness import Pipeline
from tests.scenarios.drivers import SystemDriver
from tests.scenarios.upstream import SCENARIOS

pytestmark = pytest.mark.integration


def run_all(pipe: Pipeline, scenarios, prefix: str) -> dict[str, str]:
    status, _ = pipe.write("PUT", "/config", {"supportActingMaster": True})
    assert status == 200
    failures: dict[str, str] = {}

    def one(item):
        i, sc = item
        try:
            sc.run(SystemDriver(pipe, f"{prefix}{i}-"))
        except Exception:
            failures[sc.upstream] = traceback.format_exc(limit=3)

    shared = [(i, s) for i, s in enumerate(scenarios) if not s.exclusive]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(one, shared))
    for item in [(i, s) for i, s in enumerate(scenarios) if s.exclusive]:
        one(item)
    return failures


def test_upstream_scenarios_against_the_system(spark, kafka_bootstrap, tmp_path_factory, figures):
    plain = [s for s in SCENARIOS if not s.delete_topic_with_broker_registration]
    pruning = [s for s in SCENARIOS if s.delete_topic_with_broker_registration]
    failures = {}
    for flag, group in ((False, plain), (True, pruning)):
        pipe = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("upstream"),
                        NAMESRV_DELETE_TOPIC_WITH_BROKER_REGISTRATION=str(flag).lower()).start_job().start_http()
        try:
            failures.update(run_all(pipe, group, "p" if flag else "s"))
        finally:
            pipe.close()
    figures(f"upstream namesrv scenarios ported: {len(SCENARIOS)}; passed against the system: "
            f"{len(SCENARIOS) - len(failures)}")
    assert not failures, "\n\n".join(f"{name}:\n{tb}" for name, tb in failures.items())
