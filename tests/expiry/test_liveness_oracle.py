"""The liveness path against the full route path, on random logs (pure).

Two readers of one random log must leave identical route tables:

- the full route path reads every record the moment it arrives, alone, through the step's pure
  core (`pipelines.step.run_group`);
- the liveness path reads as the job does: the ledger (`liveness.ledger`) calls each record a
  liveness signal or a change, the admission policy (`liveness.admission.decide`) holds signals
  for company and runs a batch at once for a change, at a due deadline or when the deferral ran
  out, and each batch runs through the bucket container (`pipelines.buckets.run_bucket`) at the
  batch's log clock. The job restarts (its ledger starts empty and looks at what waits again, and
  its first batch runs at once) and its log is reset (what follows is a new log; repeats name no
  record from before it) at random points.

After every batch of the liveness path the two must hold the same five tables, row for row,
`lastUpdateTimestamp` included. And a record the ledger calls a liveness signal must change no
table but broker_live's times when it is applied: the deferral it allows may delay nothing a
reader can see, except for the documented case of a small repeat of a group of which the ledger
has seen no full registration and no change since it started. That one is taken at the front's
word (`liveness/ledger.py`); if its address expired or was unregistered meanwhile, it needs its
body and changes the tables, served up to the deferral later.

The logs mix heartbeats, identical and changed re-registrations, small repeats (some naming a body
the log no longer holds), unregistrations, admin writes arriving between a registration and its
repeat, silences past half a timeout and past a whole one, restarts and log resets.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from liveness import admission, fingerprint
from liveness.ledger import LivenessLedger
from pipelines import buckets as bk
from pipelines.offset_log import LogClock
from pipelines.step import GroupRunner, StepConfig, run_group
from routeinfo.route_writes import RoutingConfig
from routeinfo.state import GroupState, table_rows, topic_keys_digest
from schemas import events as ev
from schemas import tables as t

TIMEOUT = 120_000
SHORT = 20_000  # some registrations ask for this timeout, so that expiries happen often
DEFER = 25_000  # NAMESRV_HEARTBEAT_DEFER_MS's default
T0 = 1_700_000_000_000
CFG = StepConfig(routing=RoutingConfig(default_timeout_ms=TIMEOUT, live_flush_ms=0,
                                                           delete_topic_with_broker_registration=False),
                 max_message_bytes=1_000_000, max_clock_skew_ms=10 ** 12, layout=bk.Layout(1))
ADDRS = {("ga", "10.0.0.1:10911"): 0, ("ga", "10.0.0.2:10911"): 1, ("gb", "10.0.1.1:10911"): 0}
TABLES = (t.TOPIC_QUEUE.name, t.BROKER_ADDR.name, t.CLUSTER_ADDR.name, t.BROKER_LIVE.name, t.FILTER_SERVER.name)


@dataclass
class Log:
    """One partition of the events topic: what the job reads and what a repeat's body is read from."""

    records: list[dict[str, Any]] = field(default_factory=list)
    floor: int = 0  # offsets below it are gone (a reset log)
    # whether whole registrations carry their request's fingerprint, as the remoting front's do
    # (liveness/fingerprint.py); else the ledger fingerprints the event, as for other producers
    fingerprinted: bool = False

    def append(self, event: dict[str, Any], at: int) -> dict[str, Any]:
        key, value = ev.encode(event)
        rec = {"key": key.decode(), "value": value, "partition": 0, "offset": len(self.records), "timestamp": at,
               "type": event["type"], "fingerprint": None}
        if self.fingerprinted and event["type"] == ev.REGISTER_BROKER and "repeats" not in event:
            request = {k: v for k, v in event.items() if k != "timestamp"}  # what the broker sent
            rec["fingerprint"] = fingerprint.of_request({}, 0, json.dumps(request, sort_keys=True).encode())
        self.records.append(rec)
        return rec

    def fetch(self, partition: int, offsets: list[int]) -> list[bytes | None]:
        return [self.records[o]["value"] if self.floor <= o < len(self.records) else None for o in offsets]


def tables(states: dict[str, GroupState | None]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    for g in sorted(states):
        for name in TABLES:
            out[name].extend(table_rows(states[g], name))
    return out


def without_times(tbls: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {name: [{k: v for k, v in r.items() if k != "lastUpdateTimestamp"} for r in rows]
            for name, rows in tbls.items()}


def _group_state(state: tuple[str, str | None] | None) -> GroupState | None:
    return None if state is None else GroupState.from_parts(state[0], state[1] or "{}")


class FullPath:
    """Every record alone, the moment it arrives."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.states: dict[str, tuple[str, str | None] | None] = {}

    def at(self, now: int) -> None:
        """Every group looked at `now` (expiry), as RocketMQ's scan would."""
        for g in list(self.states):
            self.states[g] = run_group(g, [], self.states[g], now, CFG, LogClock(until={0: now}), self.log.fetch)[0]

    def apply(self, rec: dict[str, Any]) -> None:
        g = rec["key"]
        self.states[g] = run_group(g, [rec], self.states.get(g), rec["timestamp"], CFG,
                                   LogClock(until={0: rec["timestamp"]}), self.log.fetch)[0]

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        return tables({g: _group_state(s) for g, s in self.states.items()})


class LivenessPath:
    """The job: the ledger's verdicts, the admission policy, batches through the bucket container."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.ledger = LivenessLedger(default_timeout_ms=TIMEOUT)
        self.waiting: list[tuple[dict[str, Any], bool]] = []  # (record, liveness signal)
        self.bucket: tuple[str, str] | None = None
        self.deadline: int | None = None
        self.last_run = 0
        self.batches = 0
        # groups of which the ledger looked at a full registration or a change since it started
        self.learned: set[str] = set()
        self.unseen = False  # the record looked at last is of a group not learned then

    def look(self, rec: dict[str, Any]) -> bool:
        self.unseen = rec["key"] not in self.learned
        if rec["type"] != ev.BROKER_HEARTBEAT and b'"repeats"' not in rec["value"]:
            self.learned.add(rec["key"])
        signal = self.ledger.observe(rec["key"], rec["type"], rec["value"], rec["timestamp"], rec["offset"],
                                     rec["fingerprint"])
        self.waiting.append((rec, signal))
        return signal

    def decide(self, now: int) -> bool:
        signals = [r["timestamp"] for r, s in self.waiting if s]
        return admission.decide(
            now, defer_ms=DEFER, last_run_ms=self.last_run, pending=bool(self.waiting),
            backlog=lambda: admission.Backlog(urgent=not all(s for _, s in self.waiting),
                                              oldest_heartbeat_ms=min(signals, default=None)),
            next_deadline=lambda: self.deadline)

    def next_look(self) -> int:
        """The earliest time at which `decide` may say yes without a new record (as the source asks)."""
        signals = [r["timestamp"] for r, s in self.waiting if s]
        return int(admission.next_look_ms(0, last_run_ms=self.last_run, pace_ms=0, deadline_ms=self.deadline,
                                          defer_ms=DEFER, pending=bool(self.waiting),
                                          oldest_signal_ms=min(signals, default=None)))

    def run(self, now: int) -> None:
        records = [r for r, _ in self.waiting]
        clock = LogClock(since={0: self.last_run} if self.last_run else {}, until={0: now})
        self.bucket, self.deadline, _ = bk.run_bucket(records, self.bucket, now,
                                                      GroupRunner(now, CFG, clock, self.log.fetch))
        self.waiting.clear()
        self.last_run = now
        self.batches += 1

    def restart(self) -> None:
        """A new job process: the ledger starts empty and looks at what waits again."""
        self.ledger = LivenessLedger(default_timeout_ms=TIMEOUT)
        self.learned.clear()
        again = [r for r, _ in self.waiting]
        self.waiting.clear()
        for rec in again:
            self.look(rec)
        self.last_run = 0  # the source's first trigger runs a batch at once

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        return tables({g: GroupState.from_parts(e.core, e.topics) for g, e in bk.groups(self.bucket).items()})


class Fleet:
    """What brokers and operators send: a random next event."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.registered: dict[tuple[str, str], dict[str, Any]] = {}  # the address's newest full registration
        self.at: dict[tuple[str, str], list[int]] = {}  # its offsets in the log

    def registration(self, group: str, addr: str, changed: bool) -> dict[str, Any]:
        prev = self.registered.get((group, addr))
        if prev is not None and not changed:
            return {**prev}
        rng = self.rng
        topics = {f"T{i}": {"readQueueNums": 4, "writeQueueNums": 4} for i in range(rng.randint(1, 4))}
        return ev.register_broker_event(
            cluster="C", broker_name=group, broker_id=ADDRS[(group, addr)], addr=addr, topics=topics,
            data_version={"timestamp": 1, "counter": rng.randint(1, 3), "stateVersion": 0},
            timeout_ms=rng.choice((None, None, SHORT)), zone=rng.choice((None, None, "z1")))

    def next(self, log: Log) -> dict[str, Any] | None:
        rng = self.rng
        group, addr = rng.choice(sorted(ADDRS))
        kind = rng.choices(("heartbeat", "same", "repeat", "changed", "unregister", "admin"),
                           weights=(25, 15, 20, 10, 6, 8))[0]
        if kind == "heartbeat":
            return ev.heartbeat_event(cluster="C", broker_name=group, broker_id=None, addr=addr)
        if kind == "unregister":
            return ev.unregister_broker_event(cluster="C", broker_name=group, broker_id=ADDRS[(group, addr)],
                                              addr=addr)
        if kind == "admin":
            return rng.choice((ev.delete_topic_event("T0", group), ev.wipe_write_perm_event(group),
                               ev.add_write_perm_event(group),
                               ev.register_topic_event("T1", {"brokerName": group, "readQueueNums": 8,
                                                              "writeQueueNums": 8, "perm": 6, "topicSysFlag": 0})))
        full = self.registered.get((group, addr))
        if kind == "repeat" and full is not None and min(self.at[(group, addr)]) >= log.floor:
            return ev.repeated_registration_event(full, self.at[(group, addr)],
                                                  topic_keys_digest(full["topicConfigTable"]))
        return self.registration(group, addr, changed=kind == "changed")

    def published(self, event: dict[str, Any], rec: dict[str, Any]) -> None:
        if event["type"] == ev.REGISTER_BROKER and event.get("repeats") is None:
            key = (event["brokerName"], event["brokerAddr"])
            self.registered[key] = {k: v for k, v in event.items() if k != "timestamp"}
            self.at[key] = [rec["offset"]]

    def forget(self) -> None:
        """The log was reset: the front publishes every address's next registration whole."""
        self.registered.clear()
        self.at.clear()


def _pause(rng: random.Random) -> int:
    return rng.choices((rng.randint(200, 3_000), rng.randint(10_000, 70_000), rng.randint(121_000, 140_000)),
                       weights=(85, 12, 3))[0]


def run_log(seed: int, steps: int) -> dict[str, int]:
    rng = random.Random(seed)
    log = Log(fingerprinted=seed % 2 == 0)
    full, path, fleet = FullPath(log), LivenessPath(log), Fleet(rng)
    now = T0
    seen = {"signals": 0, "changes": 0, "deferred": 0, "repeats_that_changed": 0, "restarts": 0, "resets": 0}

    def batch(at: int) -> None:
        path.run(at)
        full.at(at)
        assert path.tables() == full.tables(), f"seed {seed}: tables differ after the batch at {at - T0}"

    for _ in range(steps):
        arrives = now + _pause(rng)
        # batches the admission policy runs before the next record arrives (deferral, deadlines)
        while (when := path.next_look()) <= arrives:
            now = max(now, when)
            assert path.decide(now), f"seed {seed}: the policy runs no batch at {now - T0}, when it was due"
            batch(now)
        now = arrives
        roll = rng.random()
        if roll < 0.03:
            path.restart()
            seen["restarts"] += 1
            batch(now)
            continue
        if roll < 0.05:
            batch(now)  # a reset log is believed once the job read what it had
            log.floor = len(log.records)
            path.restart()
            fleet.forget()
            seen["resets"] += 1
            continue
        event = fleet.next(log)
        if event is None:
            continue
        rec = log.append(event, now)
        fleet.published(event, rec)
        full.at(now)
        before = full.tables()
        full.apply(rec)
        signal = path.look(rec)
        if signal:
            seen["signals"] += 1
            if without_times(full.tables()) != without_times(before):
                assert event.get("repeats") is not None and path.unseen, (
                    f"seed {seed}: the ledger called {json.dumps(event)[:200]} a liveness signal, and it changed "
                    "the route tables")
                seen["repeats_that_changed"] += 1
        else:
            seen["changes"] += 1
        if path.decide(now):
            batch(now)
        else:
            seen["deferred"] += 1
    path.restart()
    batch(now + 1)
    return seen


def test_the_liveness_path_leaves_the_tables_the_full_route_path_leaves() -> None:
    total: dict[str, int] = {}
    for seed in range(40):
        seen = run_log(seed, 150)
        assert seen["signals"] > 20 and seen["changes"] > 5 and seen["deferred"] > 10, (seed, seen)
        for k, v in seen.items():
            total[k] = total.get(k, 0) + v
    # the logs are not vacuous: across the seeds every kind of moment happens
    assert all(total[k] > 0 for k in ("restarts", "resets", "repeats_that_changed", "deferred")), total
