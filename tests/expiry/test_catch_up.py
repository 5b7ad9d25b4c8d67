"""No false expiry while the job catches up (audit D2-c).

The job is stopped for longer than the brokers' timeout while the fleet keeps heartbeating;
restarted, it reads the backlog in several small batches. A broker is expired only on
evidence the job has read: each batch's expiry clock is the log time it has read up to
(`pipelines.offset_log.LogClock`), not the wall clock. So nobody expires and no route flaps:
the change log has no BROKER_EXPIRED. A broker that really stopped during the outage still
expires once the job has read past its deadline.

The default run is small (60 brokers, 3 s timeout, 8 s outage); `./run.sh soak --catch-up`
runs the issue's case: 1,000 brokers, the 120 s timeout, a 3-minute outage.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.harness import Pipeline
from tests.helpers import hb, reg, topics

pytestmark = pytest.mark.integration
BROKERS = int(os.environ.get("NAMESRV_CATCHUP_BROKERS", "60"))
TIMEOUT_MS = int(os.environ.get("NAMESRV_CATCHUP_TIMEOUT_MS", "3000"))
OUTAGE_S = float(os.environ.get("NAMESRV_CATCHUP_OUTAGE_S", "8"))
PERIOD_S = TIMEOUT_MS / 4000  # four heartbeats per timeout (RocketMQ: 30 s against 120 s)


def addr(i: int) -> str:
    return f"10.7.{i // 250}.{i % 250}:10911"


def test_a_backlog_longer_than_the_timeout_expires_nobody_still_heartbeating(spark, kafka_bootstrap, tmp_path,
                                                                              figures):
    p = Pipeline(spark, kafka_bootstrap, tmp_path, broker_timeout_ms=TIMEOUT_MS,
                 # small batches: the backlog takes several, each judged at its own log clock
                 NAMESRV_MAX_RECORDS_PER_BATCH=str(max(100, BROKERS * 2))).start_job().start_http()
    stop = threading.Event()
    try:
        names = [f"cu-{i}" for i in range(BROKERS)]
        coords = p.publish([reg(n, 0, addr(i), tps=topics(f"CU{i}", n)) for i, n in enumerate(names)]
                           + [reg("cu-quitter", 0, "10.7.99.1:10911", tps=topics("Quitter", "cu-quitter"))])

        def heartbeats() -> None:
            while not stop.wait(PERIOD_S):
                p.publish([hb(n, 0, addr(i)) for i, n in enumerate(names)])  # cu-quitter has stopped

        beating = threading.Thread(target=heartbeats, daemon=True)
        beating.start()
        p.wait_served(coords, 120)
        time.sleep(PERIOD_S * 2)
        p.stop_job()
        down = time.monotonic()
        time.sleep(OUTAGE_S)
        restarted = time.time() * 1000
        p.start_job()
        # caught up: a heartbeat published now is served
        mark = p.publish([hb(names[0], 0, addr(0))])
        p.wait_served(mark, 120 + OUTAGE_S)
        caught_up_s = time.time() - restarted / 1000
        stop.set()
        beating.join(10)

        status, body = p.get("/history/changes?kind=BROKER_EXPIRED&limit=1000")
        assert status == 200
        expired = sorted({c["brokerName"] for c in body["changes"]})
        assert expired == ["cu-quitter"], f"falsely expired during catch-up: {[n for n in expired if n != 'cu-quitter']}"
        status, cluster = p.get("/cluster")
        assert status == 200
        assert sorted(cluster["clusterAddrTable"]["DefaultCluster"]) == sorted(names)
        assert p.get(f"/topics/CU{BROKERS - 1}/route")[0] == 200 and p.get("/topics/Quitter/route")[0] == 404
        figures(f"catch-up: {BROKERS} brokers, {TIMEOUT_MS} ms timeout, job down {time.monotonic() - down:.0f} s "
                f"(outage {OUTAGE_S:.0f} s), caught up {caught_up_s:.1f} s after restart; 0 false expiries")
    finally:
        stop.set()
        p.close()
