"""Session-wide real components: one Tansu broker and one SparkSession for the whole run."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conf import load_config
from ops.net import free_port

_FIGURES: list[str] = []


@pytest.fixture
def figures():
    """Record a measured figure; all of them are printed in the terminal summary."""
    return _FIGURES.append


# markers whose tests run only when asked for: the default run keeps a slice of each elsewhere
OPT_IN = {
    "compat": "also run the whole compatibility matrix (tests marked compat; ./run.sh compat) and, when it "
              "reached every cell, write docs/compatibility.md",
    "multihost": "also run the multi-host bed and its fault tests (tests marked multihost; ./run.sh multihost): "
                 "hosts as Linux network namespaces, root needed",
    "faults": "also run the one-host crash and fault tests (tests marked faults; ./run.sh faults): the job killed "
              "at random and at each commit point, Kafka's log wiped, the launcher's children killed",
}


def pytest_addoption(parser):
    for marker, text in OPT_IN.items():
        parser.addoption(f"--{marker}", action="store_true", help=text)


def pytest_collection_modifyitems(config, items):
    """Tests of an opt-in marker not asked for are left out (deselected, not skipped)."""
    left_out = [m for m in OPT_IN if not config.getoption(f"--{m}")]
    dropped = [item for item in items if any(item.get_closest_marker(m) for m in left_out)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("measured figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """A real Kafka-protocol broker (Tansu, memory storage) on 127.0.0.1, or NAMESRV_TEST_KAFKA."""
    external = os.environ.get("NAMESRV_TEST_KAFKA")
    if external:
        yield external
        return
    from ops import embedded_kafka
    port = free_port()
    proc = embedded_kafka.start_tansu(port)
    # Tansu answers a waiting fetch only when its wait ends: every job of the tests (in process or
    # started as ./run.sh would) looks for records as it would with an embedded Tansu
    os.environ.setdefault("NAMESRV_KAFKA_FETCH_WAIT_MS", "100")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def apache_kafka_broker():
    """Apache Kafka itself (one KRaft node on 127.0.0.1, from jvm/kafka), started on first use:
    the broker Spark's Kafka connector is tested against (see test_kafka_connector.py); its
    process for the tests that look inside it."""
    if shutil.which("java") is None:
        pytest.skip("Java 17+ is not on PATH: Apache Kafka cannot start")
    from ops.apache_kafka import start_kafka
    broker = start_kafka()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def apache_kafka(apache_kafka_broker) -> str:
    """That broker's bootstrap address."""
    return str(apache_kafka_broker.bootstrap)


# The two ways the job reads the events topic (NAMESRV_KAFKA_SOURCE); tests of the pipeline run
# with each. Ours runs against Tansu (the embedded broker of ./run.sh), Spark's connector against
# Apache Kafka: Tansu misreports a partition's end offset, which only our source corrects.
SOURCES = ("python", "connector")


def bootstrap_for(request: pytest.FixtureRequest, source: str) -> str:
    return str(request.getfixturevalue("kafka_bootstrap" if source == "python" else "apache_kafka"))


@pytest.fixture(params=SOURCES)
def source(request) -> str:
    return str(request.param)


@pytest.fixture
def source_bootstrap(request, source) -> str:
    return bootstrap_for(request, source)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The one SparkSession of the test run (local[2], like CI)."""
    if shutil.which("java") is None:
        pytest.skip("Java 17+ is not on PATH: Spark cannot start")
    from pipelines.job import build_spark
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path_factory.mktemp("spark"))})
    session = build_spark(cfg, app_name="namesrv-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def remoting_system(spark, kafka_bootstrap, tmp_path_factory):
    """One running system with the remoting front (job, HTTP, front; a remoting key pair set),
    shared by the remoting tests and the tests with RocketMQ's own software."""
    from tests.harness import Pipeline
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("remoting")).start_signed_system()
    yield p
    p.close()
