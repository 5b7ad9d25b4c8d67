"""Issue 6, idle cost: batches run when they are useful, not every trigger.

Heartbeats alone wait up to NAMESRV_HEARTBEAT_DEFER_MS; anything else runs at the next trigger;
a group timeout runs a batch when it is due (the sink publishes the earliest one), so expiry
stays on time and a heartbeat that waited is still counted before its broker's deadline.
"""

from __future__ import annotations

import time

import pytest

from schemas.progress import read_progress
from tests.harness import Pipeline
from tests.helpers import hb, reg, topics

pytestmark = pytest.mark.integration

DEFER_MS = 3000
TRIGGER_MS = 200


@pytest.fixture(scope="module")
def pipe(spark, kafka_bootstrap, tmp_path_factory):
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("admission"), trigger_ms=TRIGGER_MS,
                 NAMESRV_HEARTBEAT_DEFER_MS=str(DEFER_MS), NAMESRV_LIVE_FLUSH_MS="600000").start_job().start_http()
    yield p
    p.close()


def batch_id(p: Pipeline) -> int:
    return (read_progress(p.cfg.warehouse) or {}).get("batchId", -1)


def route_brokers(p: Pipeline, topic: str) -> list[str]:
    status, body = p.get(f"/topics/{topic}/route")
    return [q["brokerName"] for q in body["queueDatas"]] if status == 200 else []


def test_heartbeats_wait_registrations_do_not_and_timeouts_run_on_time(pipe, figures):
    tps = topics("AdmTopic", "AdmBase")
    a, b = ("adm-a", 0, "127.0.0.1:31911"), ("adm-b", 0, "127.0.0.1:31921")
    pipe.wait_served(pipe.publish([reg("adm-warm", 0, "127.0.0.1:31931", tps=topics("Warm", "WarmBase"))]), 60)
    time.sleep(DEFER_MS / 1000)  # the next batch is not one the deferral bound would run anyway
    t0 = time.monotonic()
    pipe.wait_served(pipe.publish([reg(*a, tps=tps, timeout_ms=5000), reg(*b, tps=tps, timeout_ms=4000)]), timeout=30)
    register_s = time.monotonic() - t0
    assert route_brokers(pipe, "AdmTopic") == ["adm-a", "adm-b"]
    assert register_s < 3, "a registration must not wait for the heartbeat deferral"

    # 9 s of heartbeats from adm-a only (5 per second); adm-b is silent from now on.
    first = batch_id(pipe)
    gone_at = None
    deadline = time.monotonic() + 9
    while time.monotonic() < deadline:
        pipe.publish([hb(*a)])
        if gone_at is None and route_brokers(pipe, "AdmTopic") == ["adm-a"]:
            gone_at = time.monotonic()
        time.sleep(0.2)
    batches = batch_id(pipe) - first
    triggers = 9000 // TRIGGER_MS
    assert gone_at is not None, "adm-b was not expired"
    overshoot = gone_at - t0 - 4.0  # t0 is before the registration was published: an upper bound
    # adm-a heartbeats only, yet never expires: a deadline batch takes the waiting heartbeats along.
    assert route_brokers(pipe, "AdmTopic") == ["adm-a"]
    assert overshoot < 2.0
    # Heartbeat-only batches: one per DEFER_MS, plus adm-b's expiry and adm-a's deadlines.
    assert batches <= 9000 // DEFER_MS + 4, f"{batches} batches for {triggers} triggers"
    figures(f"admission: registration served {register_s:.2f} s; 9 s of heartbeats → {batches} batches "
            f"({triggers} triggers); silent broker removed {overshoot:.2f} s after its timeout")


def test_unchanged_re_registrations_wait_like_heartbeats_and_a_changed_one_does_not(pipe, figures):
    """A broker with default settings re-sends its whole registration every 30 s, data version
    unchanged: a liveness signal (liveness/ledger.py), which keeps it alive without a batch
    per trigger; the first one that registers something new is served at once."""
    c = ("adm-c", 0, "127.0.0.1:31941")
    tps = topics("AdmReg", "AdmRegBase")
    pipe.wait_served(pipe.publish([reg(*c, tps=tps, timeout_ms=6000)]), timeout=30)
    first = batch_id(pipe)
    deadline = time.monotonic() + 8  # longer than its timeout: only the re-registrations keep it alive
    sent = 0
    while time.monotonic() < deadline:
        pipe.publish([reg(*c, tps=tps, timeout_ms=6000)])
        sent += 1
        time.sleep(0.4)
    batches = batch_id(pipe) - first
    assert route_brokers(pipe, "AdmReg") == ["adm-c"]
    assert batches <= 8000 // DEFER_MS + 3, f"{batches} batches for {sent} unchanged re-registrations"
    t0 = time.monotonic()
    pipe.wait_served(pipe.publish([reg(*c, tps={**tps, **topics("AdmRegNew")}, timeout_ms=6000)]), timeout=30)
    changed_s = time.monotonic() - t0
    assert route_brokers(pipe, "AdmRegNew") == ["adm-c"]
    assert changed_s < 3, "a registration that changes something must not wait for the deferral"
    figures(f"admission: {sent} unchanged re-registrations in 8 s → {batches} batches; "
            f"a changed one served in {changed_s:.2f} s")
