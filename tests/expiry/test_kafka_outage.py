"""A Kafka outage longer than the brokers' timeout expires no one (docs/semantics.md §15.6), on one
host: the multi-host bed's fault (`tests/multihost/test_failover.py`, every Kafka host cut off for
45 s) with the embedded broker paused instead (SIGSTOP: its connections stay open and answer
nothing, as behind a cut). No heartbeat reaches the log meanwhile, and that is not silence: the
source notes when the log is readable again and every broker gets a full timeout from then. A
broker that stopped heartbeating before the outage still expires, about a timeout after the heal.

Two outages, both longer than the timeout: a short one, in which the source's requests only hang
and then succeed (`KafkaStreamReader._slow_look`: the multi-host bed once saw a 45 s cut pass with
no error at all, and every broker expired after the heal), and a long one, in which they fail
(past the consumer's 10 s request timeout).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from ops import embedded_kafka
from ops.net import free_port
from tests.harness import Pipeline
from tests.helpers import hb, reg, topics

pytestmark = pytest.mark.integration
TIMEOUT_MS = 3000
OUTAGES_S = (8.0, 14.0)  # requests hang, then succeed; requests fail (the request timeout is 10 s)


def test_a_kafka_outage_longer_than_the_timeout_expires_no_one(spark, tmp_path, figures):
    port = free_port()
    tansu = embedded_kafka.start_tansu(port)
    p = None
    stop = threading.Event()
    try:
        p = Pipeline(spark, f"127.0.0.1:{port}", tmp_path, broker_timeout_ms=TIMEOUT_MS).start_job().start_http()
        beating = ("ko-a", "127.0.0.1:33911")
        quitters = [(f"ko-q{i}", f"127.0.0.1:3392{i}") for i in range(len(OUTAGES_S))]
        heartbeating = {beating, *quitters}  # each quitter stops right before its outage
        sent = {"ok": 0, "failed": 0}

        def heartbeats() -> None:  # every 0.5 s, as far as the log takes them (bounded: 300 rounds)
            from eventlog.publisher import EventPublisher
            with EventPublisher(p.cfg.bootstrap, p.cfg.kafka_topic, max_message_bytes=p.cfg.max_message_bytes) as pub:
                for _ in range(300):
                    if stop.wait(0.5):
                        return
                    try:
                        pub.publish([hb(n, 0, a) for n, a in sorted(heartbeating)])
                        sent["ok"] += 1
                    except Exception:
                        sent["failed"] += 1

        coords = p.publish([reg(n, 0, a, tps=topics(f"Ko{n}", "KoBase")) for n, a in (beating, *quitters)])
        beater = threading.Thread(target=heartbeats, daemon=True)
        beater.start()
        p.wait_served(coords)
        p.wait_for(lambda: sent["ok"] >= 2, 30, "heartbeats flowing")
        missing: list[tuple[float, int]] = []

        def watch(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                status = p.get(f"/topics/Ko{beating[0]}/route")[0]
                if status != 200:
                    missing.append((round(time.time(), 1), status))
                time.sleep(0.25)

        expired = []
        for quitter, outage_s in zip(quitters, OUTAGES_S, strict=True):
            heartbeating.discard(quitter)
            time.sleep(0.6)  # the quitter's last heartbeat is in the log
            os.kill(tansu.pid, signal.SIGSTOP)
            try:
                watch(outage_s)
            finally:
                os.kill(tansu.pid, signal.SIGCONT)
            healed = time.monotonic()
            # the silent broker's full timeout runs from the heal; meanwhile the beating one stays
            p.wait_for(lambda q=quitter: p.get(f"/topics/Ko{q[0]}/route")[0] == 404, 60, f"{quitter[0]}'s expiry")
            expired.append(time.monotonic() - healed)
            watch(TIMEOUT_MS / 1000)  # and a further timeout: heartbeats flow again
        stop.set()
        beater.join(timeout=30)
        assert not missing, f"a broker that kept heartbeating left the routes: {missing[:10]}"
        assert all(s >= TIMEOUT_MS / 1000 * 0.8 for s in expired), f"the silent brokers expired {expired} s after the heal"
        assert sent["ok"] >= 10, sent
        figures(f"Kafka paused for {' and '.join(f'{s:.0f}' for s in OUTAGES_S)} s (brokers' timeout "
                f"{TIMEOUT_MS / 1000:.0f} s): the heartbeating broker never left the routes ({sent['ok']} heartbeat "
                f"rounds acknowledged, {sent['failed']} refused); the silent ones expired "
                f"{' and '.join(f'{s:.1f}' for s in expired)} s after the heal")
    finally:
        stop.set()
        if p is not None:
            p.close()
        os.kill(tansu.pid, signal.SIGCONT)
        tansu.terminate()
        tansu.wait(10)
