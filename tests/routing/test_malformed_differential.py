"""Malformed and unusual requests, differentially (tests/differential/malformed.py): the same bytes
to RocketMQ 5.5.0's NameServer (the newest line) and to our front over the pipeline's pure core,
each on a fresh TCP connection; the answer's code and remark class, the connection's fate and the
state left behind must agree, or be a difference named in `malformed.ALLOWED`.

NAMESRV_MALFORMED_EXAMPLES raises the count and NAMESRV_MALFORMED_SEED draws other requests
(`./run.sh soak --malformed N` does both); without a seed the suite draws the same ones each run.
NAMESRV_MALFORMED_FAMILIES (comma-separated, `malformed.FAMILIES`' names) draws only those families.
"""

from __future__ import annotations

import itertools
import os
import shutil

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from tests.differential import malformed
from tests.differential.bed import Side, Universe, reset_switches
from tests.harness import REMOTING_AK, REMOTING_SK, FrontThread

pytestmark = pytest.mark.integration
EXAMPLES = int(os.environ.get("NAMESRV_MALFORMED_EXAMPLES", "300"))
KEYS = (REMOTING_AK, REMOTING_SK)
LINE = "5.5"
SEED = os.environ.get("NAMESRV_MALFORMED_SEED")
_names = itertools.count(int(os.environ.get("NAMESRV_MALFORMED_FIRST", "1")))
FAMILIES = tuple(f for f in os.environ.get("NAMESRV_MALFORMED_FAMILIES", "").split(",") if f)


@pytest.fixture(scope="module")
def java_namesrv():
    if shutil.which("java") is None:
        pytest.skip("Java 17+ is not on PATH: RocketMQ's NameServer cannot start")
    from ops import rocketmq_software as rmq
    p = rmq.start_namesrv(line=LINE)
    yield p
    p.cleanup()


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    from conf import load_config
    from tests.differential.in_memory import in_memory_front
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path_factory.mktemp("malformed")), "NAMESRV_REMOTING_PORT": "0",
                       "NAMESRV_REMOTING_ACCESS_KEY": REMOTING_AK, "NAMESRV_REMOTING_SECRET_KEY": REMOTING_SK,
                       # a broker request whose extFields are stripped is unsigned: judged, not refused
                       "NAMESRV_REMOTING_UNSIGNED_BROKERS": "true"})
    front = FrontThread(in_memory_front(cfg))
    yield front
    front.stop()


def test_malformed_requests_are_answered_as_rocketmq_answers_them(java_namesrv, ours, figures, monkeypatch):
    from ops.rocketmq_software import version
    if FAMILIES:
        assert set(FAMILIES) <= set(malformed.FAMILIES), f"unknown families {set(FAMILIES) - set(malformed.FAMILIES)}"
        monkeypatch.setattr(malformed, "FAMILIES", FAMILIES)
    tally = malformed.Tally()
    failures: list[str] = []
    signed = {"access_key": REMOTING_AK, "secret_key": REMOTING_SK}
    java_side, our_side = Side("RocketMQ", java_namesrv.addr, signed), Side("ours", ours.addr, signed)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    @seed(int(SEED or 0))
    def example(data):
        u = Universe(next(_names), (0, 0, 0))
        req = data.draw(malformed.requests(u))
        try:
            report = malformed.compare(java_namesrv.addr, ours.addr, req, u, KEYS, tally, java_side, our_side)
        finally:
            for side in (java_side, our_side):
                reset_switches(side)
        if report is not None:
            failures.append(report)

    try:
        example()
    finally:
        java_side.close()
        our_side.close()
    figures(f"malformed-request differential vs RocketMQ {version(LINE)}: {tally.examples} requests, "
            f"{tally.alike} answered alike ({tally.closed} closed by both), "
            f"{sum(tally.allowed.values())} allowed differences {dict(tally.allowed)}, {len(failures)} differing; "
            f"families {dict(sorted(tally.families.items()))}")
    assert not failures, f"{len(failures)} of {tally.examples} differ:\n" + "\n".join(failures[:40])
    # hypothesis runs a request it drew twice only once, so a seeded run counts a few fewer
    assert tally.examples >= 0.9 * EXAMPLES
