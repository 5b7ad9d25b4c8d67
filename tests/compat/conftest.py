"""The compatibility matrix's system and RocketMQ software: one running system (job, HTTP and
remoting front over Tansu) with a key pair that mqadmin signs its writes with, and that accepts
unsigned broker requests (NAMESRV_REMOTING_UNSIGNED_BROKERS: 4.9 brokers cannot sign); brokers of
each line started on first use; the outcomes of the run, written to docs/compatibility.md at the
end of a `--compat` run that reached every cell."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from ops import rocketmq_software as rmq
from tests.compat import matrix
from tests.harness import REMOTING_AK, REMOTING_SK, Pipeline

_OUTCOMES = pytest.StashKey[matrix.Outcomes]()
_STARTED = pytest.StashKey[float]()

if shutil.which("java") is None or shutil.which("javac") is None:
    pytest.skip("a JDK (java and javac) is needed to run RocketMQ's software", allow_module_level=True)


def pytest_configure(config):
    config.stash[_OUTCOMES] = matrix.Outcomes()
    config.stash[_STARTED] = time.monotonic()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    outcomes = config.stash.get(_OUTCOMES, None)
    if outcomes is None or not config.getoption("--compat") or outcomes.missing():
        return
    versions = {line: rmq.version(line) for line in matrix.LINES}
    matrix.PAGE.write_text(matrix.render(
        outcomes, versions, when=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command="./run.sh compat", seconds=time.monotonic() - config.stash[_STARTED]))


@pytest.fixture(scope="session")
def outcomes(request) -> matrix.Outcomes:
    return request.config.stash[_OUTCOMES]


@pytest.fixture(scope="module")
def compat_system(spark, kafka_bootstrap, tmp_path_factory) -> Iterator[Pipeline]:
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("compat"), broker_timeout_ms=matrix.TIMEOUT_MS)
    yield p.start_signed_system(NAMESRV_REMOTING_UNSIGNED_BROKERS="true")
    p.close()


@pytest.fixture(scope="module")
def brokers(compat_system) -> Iterator[Callable[[str], rmq.JavaProcess]]:
    """`brokers(line)`: the line's resident broker of CompatCluster (broker-<line>), started on
    first use and kept for the module."""
    started: dict[str, rmq.JavaProcess] = {}

    def get(line: str) -> rmq.JavaProcess:
        if line not in started:
            started[line] = rmq.start_broker(compat_system.remoting_addr, cluster=matrix.CLUSTER,
                                             broker_name=f"broker-{line}", extra=matrix.BROKER_CONF, line=line)
        return started[line]

    yield get
    for broker in started.values():
        broker.cleanup()


@pytest.fixture(scope="module")
def admins(compat_system) -> Iterator[Callable[[str], rmq.AdminShell]]:
    """`admins(line)`: the line's mqadmin, pointed at the system and signing (conf/tools.yml),
    started on first use."""
    started: dict[str, rmq.AdminShell] = {}

    def get(line: str) -> rmq.AdminShell:
        if line not in started:
            started[line] = rmq.AdminShell(compat_system.remoting_addr, access_key=REMOTING_AK,
                                           secret_key=REMOTING_SK, line=line)
        return started[line]

    yield get
    for shell in started.values():
        shell.close()
