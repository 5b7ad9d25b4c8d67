"""Benchmarks without Spark: the state step's cost per group (scale sweep), and the serving
side's snapshot refresh over a warehouse written by the real sink."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.probes import heartbeat, registration
from conf import load_config
from pipelines.sink import DeltaSink
from pipelines.step import GroupRunner, StepConfig, run_group
from schemas import events as ev
from snapshots.reader import SnapshotReader
from snapshots.store import SnapshotStore

CFG_RETENTION_MS = load_config({}).history_retention_ms
CFG = dataclasses.replace(StepConfig.from_config(load_config({})), max_message_bytes=16 << 20,
                          max_clock_skew_ms=10**12)


def _records(events: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
    out = []
    for i, e in enumerate(events):
        key, value = ev.encode(e)
        out.append({"partition": 0, "offset": i, "timestamp": now, "key": key.decode(), "value": value})
    return out


def host_speed() -> float:
    """The pure step's heartbeat, ms of CPU per group (best of 3): the same work on every run, so
    parts measured on hosts of different speed can be told apart (lower is faster)."""
    return min(float(step_costs(200, 10)["heartbeat_ms_per_group"]) for _ in range(3))


def step_costs(groups: int, topics: int, *, sample: int = 200) -> dict[str, Any]:
    """CPU per group call for a registration and for a heartbeat (the state read back from its
    stored form each time, as Spark hands it over). Measured on `sample` groups, scaled."""
    now = 1_700_000_000_000
    n = min(groups, sample)
    states: list[Any] = []
    reg_s = 0.0
    for g in range(n):
        recs = _records([registration(g, topics)], now)
        t0 = time.process_time()
        state, _, _ = run_group(f"bench-{g}", recs, None, now, CFG)
        reg_s += time.process_time() - t0
        states.append(state)
    hb_s = 0.0
    for g, state in enumerate(states):
        recs = _records([heartbeat(g)], now + 1000)
        t0 = time.process_time()
        run_group(f"bench-{g}", recs, state, now + 1000, CFG)
        hb_s += time.process_time() - t0
    return {"groups": groups, "topics": topics, "register_ms_per_group": 1000 * reg_s / n,
            "heartbeat_ms_per_group": 1000 * hb_s / n,
            "heartbeat_round_s": hb_s / n * groups,
            "state_bytes": sum(len(s[0]) + len(s[1] or "") for s in states if s is not None) // n}


class _RulesOnly(GroupRunner):
    """Every group through its route rules: the bucket as it was before its live table."""

    def signals(self, records: list[dict[str, Any]]) -> None:
        return None


def bucket_costs(groups: int, topics: int, signals: int, *, rounds: int = 5) -> dict[str, Any]:
    """CPU of one bucket call that carries `signals` small repeats (a default fleet's re-registrations
    as the front publishes them) in a bucket of `groups` registered groups, per signal: absorbed by
    the bucket's live table (`liveness/hot.py`), and through every group's route rules. Median of
    `rounds`, each on other groups, the state handed over in its stored form as Spark does."""
    from pipelines import buckets as bk
    from routeinfo.state import topic_keys_digest
    now = 1_700_000_000_000
    regs = [registration(g, topics) for g in range(groups)]
    keys = [topic_keys_digest(r["topicConfigTable"]) for r in regs]
    first = _records(regs, now)
    out: dict[str, Any] = {"groups": groups, "topics": topics, "signals": signals}
    for name, runner in (("live_table", GroupRunner), ("rules", _RulesOnly)):
        state, _, _ = bk.run_bucket(first, None, now, runner(now, CFG))
        costs = []
        for n in range(1, rounds + 1):
            at = now + 3_000 * n
            picked = [(n * signals + i) % groups for i in range(signals)]
            repeats = [ev.repeated_registration_event(regs[g], [g], keys[g]) for g in picked]
            recs = [{**r, "offset": groups + n * signals + i} for i, r in enumerate(_records(repeats, at))]
            t0 = time.process_time()
            state, _, _ = bk.run_bucket(recs, state, at, runner(at, CFG))
            costs.append(time.process_time() - t0)
        costs.sort()
        out[f"{name}_ms_per_call"] = 1000 * costs[len(costs) // 2]
        out[f"{name}_us_per_signal"] = 1e6 * costs[len(costs) // 2] / signals
        assert state is not None
        out["state_bytes"] = len(state[0]) + len(state[1])
    return out


def write_warehouse(root: Path, groups: int, topics: int) -> Path:
    """A warehouse whose topic_queue holds groups × topics rows, written by the real sink."""
    sink = DeltaSink(root / "delta", retention_ms=7 * 86_400_000, maintenance_interval_ms=10**12)
    sink.ensure_tables()
    now = int(time.time() * 1000)
    batch: list[dict[str, Any]] = []
    batch_id = 0
    for g in range(groups):
        _, _, rows = run_group(f"bench-{g}", _records([registration(g, topics)], now), None, now, CFG)
        batch.extend(r for r in rows if r["target"] != "route_changes")
        if len(batch) > 4 * 2000 or g == groups - 1:
            sink.commit(batch_id, batch, {"0": g + 1}, g + 1)
            batch, batch_id = [], batch_id + 1
    return root / "delta"


def snapshot_refresh(groups: int, topics: int) -> dict[str, Any]:
    """Time to load the newest cut with groups × topics queue rows, and the worst lookup latency
    seen by a reader thread while it loads (lookups only dereference the current snapshot)."""
    root = Path(tempfile.mkdtemp(prefix="bench-refresh-"))
    t0 = time.monotonic()
    warehouse = write_warehouse(root, groups, topics)
    write_s = time.monotonic() - t0
    store = SnapshotStore(SnapshotReader(warehouse), 3600.0, retention_ms=CFG_RETENTION_MS)
    worst = [0.0]
    lookups = [0]
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            store.current.topics.get("BenchTopic-0-0")
            worst[0] = max(worst[0], time.perf_counter() - t)
            lookups[0] += 1
            time.sleep(0.0005)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    times = []
    for _ in range(3):
        store_fresh = SnapshotStore(SnapshotReader(warehouse), 3600.0, retention_ms=CFG_RETENTION_MS)
        t = time.monotonic()
        store_fresh.refresh()
        times.append(time.monotonic() - t)
    t = time.monotonic()
    store.refresh()  # the store the reader thread is using
    times.append(time.monotonic() - t)
    stop.set()
    th.join()
    rows = sum(len(q) for q in store.current.topics.values())
    return {"rows": rows, "refresh_ms": 1000 * min(times), "refresh_ms_max": 1000 * max(times),
            "worst_lookup_ms": 1000 * worst[0], "lookups_during": lookups[0], "write_s": write_s}
