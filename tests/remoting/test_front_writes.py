"""The remoting front's write path over the in-memory log (no Kafka, Spark or Delta): writes that
wait for the served cut, and re-registrations that repeat an accepted request.

The served cut is held back by `HeldStore` so that waiting is observable: a write is answered
when the cut includes it, or at NAMESRV_REMOTING_WRITE_WAIT_MS.
"""

from __future__ import annotations

import gc
import select
import threading
import time
import tracemalloc
from typing import Any

import pytest

from conf import load_config
from remoting import codes, requests
from remoting.client import RemotingClient, registration_request
from remoting.front import Front
from remoting.protocol import V5_3_3, Command
from schemas import events as ev
from schemas import json_codec
from snapshots.freshness import LogMark
from tests.differential.in_memory import InMemoryLog
from tests.harness import FrontThread


class HeldStore:
    """The in-memory log's cut, served only up to `release(offset)`; counts the front's looks."""

    def __init__(self, log: InMemoryLog) -> None:
        self.log, self.upto, self.looks = log, 0, 0
        self._lock = threading.Lock()

    @property
    def current(self) -> Any:
        return self.log.current

    def release(self, upto: int) -> None:
        self.upto = upto

    def served_offsets(self) -> dict[str, int]:
        with self._lock:
            self.looks += 1
        return {"0": self.upto}

    def served_mark(self) -> LogMark:
        with self._lock:
            self.looks += 1
        return LogMark({"0": self.upto}, {})

    def mark(self) -> LogMark:
        return LogMark({}, {})  # one log, never reset

    def serves(self, coords: list[tuple[int, int]], mark: LogMark | None = None) -> bool:
        with self._lock:
            self.looks += 1
        return all(o < self.upto for _, o in coords)

    def poke(self) -> None:
        pass

    def stop(self) -> None:
        pass


class LaggingStore(HeldStore):
    """A HeldStore whose served cut is also held: the log's cut as it stood at the last `release`."""

    def __init__(self, log: InMemoryLog) -> None:
        super().__init__(log)
        self._cut = log.current

    @property
    def current(self) -> Any:
        return self._cut

    def release(self, upto: int) -> None:
        self.upto, self._cut = upto, self.log.current


class RecordingLog(InMemoryLog):
    """The in-memory log, keeping every event published."""

    def __init__(self, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.events: list[dict[str, Any]] = []

    def publish(self, events: list[dict[str, Any]]) -> list[tuple[int, int]]:
        self.events.extend(json_codec.loads(ev.record_of(e)[1]) for e in events)  # what Kafka gets
        return super().publish(events)


class ForgetfulLog(InMemoryLog):
    """The in-memory log's publisher side keeping nothing it is given (no step, no record): the
    cut stays empty, and what the front holds is all that is left of a write."""

    def publish(self, events: list[dict[str, Any]]) -> list[tuple[int, int]]:
        with self._lock:
            first = self._offset
            self._offset += len(events)
            return [(0, o) for o in range(first, self._offset)]


def _front(tmp_path, store_of, wait_ms: int = 3000, coalesce_ms: int = 1000,
           log_of: Any = RecordingLog) -> tuple[FrontThread, Any, Any]:
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0",
                       "NAMESRV_REMOTING_WRITE_WAIT_MS": str(wait_ms),
                       "NAMESRV_REMOTING_HEARTBEAT_COALESCE_MS": str(coalesce_ms)})
    log = log_of(cfg.broker_timeout_ms)
    store = store_of(log)
    return FrontThread(Front(cfg, store, lambda: log)), store, log  # type: ignore[arg-type]


def _registration(g: int, topics: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, str], bytes]:
    return registration_request(cluster="C", broker_name=f"b-{g}", broker_id=0, addr=f"10.0.{g // 250}.{g % 250}:10911",
                                topics={f"T-{g}": {}, f"U-{g}": {}} if topics is None else topics)


def test_writes_waiting_together_are_answered_once_served_by_one_watcher(tmp_path):
    """A starting fleet's first registrations wait for the cut together: all are answered once
    it includes them, none before, and the front looks at the store per tick, not per waiter."""
    front, store, log = _front(tmp_path, HeldStore)
    n = 300
    try:
        with RemotingClient(front.addr, timeout_s=30) as c:
            for g in range(n):
                c.send(codes.REGISTER_BROKER, *_registration(g))
            deadline = time.monotonic() + 10
            while len(log.events) < n and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(log.events) == n
            # each write looks once after its publish (is it served already?), and on a loaded host
            # some of those come after the log has them all: the watcher is measured after them
            while store.looks < n and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)
            looks = store.looks
            time.sleep(0.5)  # published, not served: nobody is answered
            looks_while_waiting = store.looks - looks
            released = time.monotonic()
            store.release(n)
            answers = [c.receive() for _ in range(n)]
            answered = time.monotonic()
        assert all(a.code == codes.SUCCESS for a in answers), answers[0].remark
        assert answered - released < 1.0
        # 0.5 s of waiting at a 20 ms tick is about 25 looks; a loop per waiter would be 300 × 25
        assert looks_while_waiting < 100, looks_while_waiting
    finally:
        front.stop()


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _registrations_of_100_topics(n: int) -> list[tuple[dict[str, str], bytes]]:
    return [_registration(g, {f"T-{g}-{i}": {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6} for i in range(100)})
            for g in range(n)]


def _decoded_size(regs: list[tuple[dict[str, str], bytes]]) -> tuple[float, float]:
    """What a decoded registration takes (its event and record, traced) and its record's length,
    on average (tracemalloc running)."""
    before = _traced()
    decoded = [requests.registration(Command(codes.REGISTER_BROKER, 1, ext=ext, body=body, version=V5_3_3), 1)
               for ext, body in regs]
    event_bytes = (_traced() - before) / len(decoded)
    return event_bytes, sum(len(e.record[1]) for e in decoded if e.record) / len(decoded)


def _held_while_waiting(tmp_path: Any, log_of: Any, waiting: Any, what: str) -> tuple[float, float, float]:
    """Sends 200 registrations of 100 topics; once `waiting(front, log, n)` holds, what the front
    holds for each of them (traced), before any is answered; then every one is published, served
    and answered. With what a decoded registration takes and its record's length (`_decoded_size`)."""
    n = 200
    regs = _registrations_of_100_topics(n)
    front, store, log = _front(tmp_path, HeldStore, wait_ms=30_000, log_of=log_of)
    tracemalloc.start()
    try:
        event_bytes, record_bytes = _decoded_size(regs[:20])
        with RemotingClient(front.addr, timeout_s=30) as c:
            before = _traced()
            for ext, body in regs:
                c.send(codes.REGISTER_BROKER, ext, body)
            _wait_for(lambda: waiting(front.front, log, n), what)
            time.sleep(0.3)
            held = _traced() - before
            assert not select.select([c.sock], [], [], 0)[0], "answered before its cut"
            if isinstance(log, StalledLog):
                log.go.set()
            _wait_for(lambda: log.served_mark().offsets["0"] == n, "every registration published")
            store.release(n)
            answers = [c.receive() for _ in range(n)]
        assert all(a.code == codes.SUCCESS for a in answers), answers[0].remark
        return held / n, event_bytes, record_bytes
    finally:
        tracemalloc.stop()
        front.stop()


class StalledLog(ForgetfulLog):
    """A ForgetfulLog whose publishing stalls until `go` is set: what arrives meanwhile waits in
    the front's publishing queue, as in a wave that arrives faster than Kafka takes it."""

    def __init__(self, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.go = threading.Event()

    def publish(self, events: list[dict[str, Any]]) -> list[tuple[int, int]]:
        self.go.wait(30)
        return super().publish(events)


def test_registrations_waiting_for_their_cut_hold_neither_their_bodies_nor_their_events(tmp_path):
    """A registration waiting for the served cut holds what its answer needs, not its request's
    body nor its decoded event: 10,000 brokers of 100 topics waiting together kept ~190 MiB of
    them in the front (a heap profile, 2026-11-27). Measured with tracemalloc: the front's memory
    while 200 such registrations wait is a small part of what their decoded events alone take."""
    held, event_bytes, _ = _held_while_waiting(tmp_path, ForgetfulLog, lambda front, log, n: log.served_mark().offsets["0"] == n,
                                               "every registration published")
    # held with their bodies (19 KB each) and decoded events (42 KB): 64 KB a registration;
    # what an answer needs, with its Registered record, task and frames: about 4 KB
    assert event_bytes > 30_000, event_bytes
    assert held < event_bytes / 5, (held, event_bytes)


def test_registrations_waiting_to_be_published_hold_their_records_not_their_topic_tables(tmp_path):
    """A registration queued for the publisher holds its record (what Kafka gets) and its header,
    not its decoded topic table: with the tables queued, the front's PSS peaked at 471 MiB in a
    10,000 x 100 wave (2026-11-29), 187 MiB when decoding was slower than publishing."""
    held, event_bytes, record_bytes = _held_while_waiting(tmp_path, StalledLog,
                                                          lambda front, log, n: front.in_flight == n,
                                                          "every registration taken")
    # a decoded registration (event and record) about 4x its record; queued, about its record
    assert event_bytes > 3 * record_bytes, (event_bytes, record_bytes)
    assert held < record_bytes + (event_bytes - record_bytes) / 3, (held, event_bytes, record_bytes)


def test_only_a_registration_that_fits_one_message_is_queued_without_its_topic_table():
    event = ev.register_broker_event(cluster="C", broker_name="b", broker_id=0, addr="10.0.0.1:10911",
                                     topics={f"T{i}": {} for i in range(50)},
                                     data_version={"timestamp": 1, "counter": 1, "stateVersion": 0}, timestamp=5)
    full = ev.Fingerprinted(event, b"f" * 16, ev.encode(event))
    slim = requests.to_publish(full, max_message_bytes=1 << 20)
    assert "topicConfigTable" not in slim and slim.record == full.record and slim.fingerprint == full.fingerprint
    assert {k: v for k, v in full.items() if k != "topicConfigTable"} == dict(slim)
    assert requests.to_publish(full, max_message_bytes=len(full.record[1]) - 1) is full  # chunked from its table
    unencoded = ev.Fingerprinted(event, b"f" * 16)
    assert requests.to_publish(unencoded, max_message_bytes=1 << 20) is unencoded


def test_a_write_not_served_within_the_bound_is_answered_at_the_bound(tmp_path):
    front, _, _ = _front(tmp_path, HeldStore, wait_ms=400)
    try:
        with RemotingClient(front.addr) as c:
            t0 = time.monotonic()
            answer = c.call(codes.REGISTER_BROKER, *_registration(1))
            waited = time.monotonic() - t0
        assert answer.code == codes.SUCCESS
        assert 0.4 <= waited < 2.0, waited
    finally:
        front.stop()


@pytest.mark.parametrize("other_connection", [False, True])
def test_a_repeated_registration_is_published_small_and_a_changed_one_is_checked_again(tmp_path, other_connection):
    """The same REGISTER_BROKER re-sent (a default broker's every 30 s) is accepted and published
    with its own receive time as a small event naming the served registration it repeats, not
    its body again; a request that differs in any byte is checked by the contract again, on this
    connection or another."""
    front, _, log = _front(tmp_path, lambda log: log, coalesce_ms=50)
    good = _registration(7, {"T-7": {"readQueueNums": 4, "writeQueueNums": 4}, "U-7": {}})
    bad = _registration(7, {"T-7": {"readQueueNums": -1, "writeQueueNums": 4}, "U-7": {}})
    try:
        with RemotingClient(front.addr) as c, RemotingClient(front.addr) as c2:
            assert c.call(codes.REGISTER_BROKER, *good).code == codes.SUCCESS
            time.sleep(0.01)
            assert c.call(codes.REGISTER_BROKER, *good).code == codes.SUCCESS
            time.sleep(0.2)  # past the coalescing window: published
            refused = (c2 if other_connection else c).call(codes.REGISTER_BROKER, *bad)
            assert c.call(codes.REGISTER_BROKER, *good).code == codes.SUCCESS
            time.sleep(0.2)
            # read while connected: a closed connection's broker is unregistered (as by RocketMQ)
            live = log.current.live_by_addr.get(("C", "10.0.0.7:10911"))
        assert refused.code == codes.SYSTEM_ERROR
        assert "readQueueNums=-1 is outside" in (refused.remark or "")
        regs = [e for e in log.events if e["type"] == ev.REGISTER_BROKER]
        assert len(regs) == 3, regs
        full, small = regs[0], regs[1:]
        assert set(full["topicConfigTable"]) == {"T-7", "U-7"}
        assert all("topicConfigTable" not in e and e["repeats"]["offsets"] == [0] for e in small), small
        assert full["timestamp"] < small[0]["timestamp"] < small[1]["timestamp"]
        header = {k: v for k, v in full.items() if k not in ("timestamp", "topicConfigTable")}
        assert all({k: v for k, v in e.items() if k not in ("timestamp", "repeats")} == header for e in small)
        assert live is not None and live["lastUpdateTimestamp"] >= small[1]["timestamp"] - 5
    finally:
        front.stop()


def test_a_repeat_of_a_registration_not_served_yet_is_published_small_and_answered_once_served(tmp_path):
    """A job lagging behind the log (after a registration wave) has not served a broker's
    registration when the broker repeats it: the repeat still goes out small, naming the
    registration the log holds before it, and is answered once the cut includes that one. Whole,
    each repeat was a body for the lagging job and the registration the next repeat waited for,
    so the job never caught up (10,000 brokers × 100 topics, 2026-11-27)."""
    front, store, log = _front(tmp_path, LaggingStore, wait_ms=3000, coalesce_ms=50)
    reg = _registration(9)
    try:
        with RemotingClient(front.addr, timeout_s=30) as c:
            # the job has served nothing yet: the first registration is answered at the bound
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS
            assert len(log.events) == 1 and "b-9" not in store.current.brokers
            t0 = time.monotonic()
            c.send(codes.REGISTER_BROKER, *reg)
            _wait_for(lambda: len(log.events) == 2, "the repeat published")
            time.sleep(0.3)
            assert not select.select([c.sock], [], [], 0)[0], "answered before its registration was served"
            store.release(2)
            answer = c.receive()
            waited = time.monotonic() - t0
        assert answer.code == codes.SUCCESS
        assert waited < 2.5, waited  # answered when served, not at the 3 s bound
        assert "b-9" in store.current.brokers
        full, repeat = [e for e in log.events if e["type"] == ev.REGISTER_BROKER]  # (a close unregisters)
        assert "repeats" not in full and set(full["topicConfigTable"]) == {"T-9", "U-9"}
        assert "topicConfigTable" not in repeat and repeat["repeats"]["offsets"] == [0], repeat
    finally:
        front.stop()


def _wait_for(done: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_repeat_after_its_broker_expired_is_published_whole(tmp_path):
    """A broker silent past its timeout is gone from the served cut: its next repeat is published
    with its body again (and registers it), and later repeats name that one."""
    front, _, log = _front(tmp_path, lambda log: log, coalesce_ms=50)
    reg = registration_request(cluster="C", broker_name="b-8", broker_id=0, addr="10.0.0.8:10911",
                               topics={"T-8": {}, "U-8": {}}, ext={"heartbeatTimeoutMillis": "300"})
    try:
        with RemotingClient(front.addr) as c:
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS
            time.sleep(0.5)
            log.publish([])  # a batch at the wall clock: the silent broker expires
            assert "b-8" not in log.current.brokers
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS
            assert "b-8" in log.current.brokers
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS
            time.sleep(0.2)
        regs = [e for e in log.events if e["type"] == ev.REGISTER_BROKER]
        assert ["repeats" in e for e in regs] == [False, False, True], regs
        assert regs[2]["repeats"]["offsets"] == [1]  # the second full one
    finally:
        front.stop()


CHANGES: dict[str, dict[str, Any]] = {
    "unchanged": {},
    "a new slave": {"broker_id": 1, "addr": "10.0.0.2:10911"},
    "a new data version": {"data_version": {"timestamp": 2, "counter": 2, "stateVersion": 0}},
    "a new HA address": {"ha_addr": "10.0.0.1:10912"},
    "a new topic": {"topics": {"T-1": {}, "U-1": {}, "V-1": {}}},
    "acting master turned on": {"acting": True},
    "filter servers": {"filter_servers": ["10.0.0.9:30000"]},
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_registration_is_answered_once_what_it_changes_is_served(tmp_path, change):
    """RocketMQ's answer to REGISTER_BROKER means the next lookup sees the registration: a new
    slave, address, flag, data version, HA address, filter server or topic waits for the served
    cut (here released 0.6 s after it was sent); a registration the cut already shows, from a
    broker whose connection is new (a front restart, a reconnect), is answered at once."""
    front, store, _ = _front(tmp_path, HeldStore)
    base: dict[str, Any] = {"cluster": "C", "broker_name": "b-1", "broker_id": 0, "addr": "10.0.0.1:10911",
                            "topics": {"T-1": {}, "U-1": {}}}
    try:
        # the first connection stays open: closing it would unregister the broker
        with RemotingClient(front.addr) as c, RemotingClient(front.addr, timeout_s=10) as c2:
            c.send(codes.REGISTER_BROKER, *registration_request(**base))
            store.release(1)
            assert c.receive().code == codes.SUCCESS
            release = threading.Timer(0.6, store.release, (2,))
            t0 = time.monotonic()
            release.start()
            answer = c2.call(codes.REGISTER_BROKER, *registration_request(**{**base, **CHANGES[change]}))
            waited = time.monotonic() - t0
            release.join()
        assert answer.code == codes.SUCCESS, answer.remark
        if change == "unchanged":
            assert waited < 0.5, waited
        else:
            assert 0.6 <= waited < 3.0, waited
    finally:
        front.stop()


def test_a_storm_of_registrations_does_not_hold_back_reads(tmp_path):
    """A starting fleet's registrations arrive on many connections at once; each costs the front
    its decoding and checks. Reads asked meanwhile on another connection are answered between
    them, not after all of them."""
    import socket

    from remoting.protocol import encode_request

    front, _, log = _front(tmp_path, HeldStore)
    conns, per_conn, topics = 16, 500, {f"T{i}": {} for i in range(20)}
    storms = []
    for k in range(conns):
        storms.append(b"".join(
            encode_request(codes.REGISTER_BROKER, g, ext=ext, body=body)
            for g in range(per_conn)
            for ext, body in [_registration(k * per_conn + g, {f"{t}-{k}-{g}": {} for t in topics})]))
    host, port = front.addr.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port))) for _ in range(conns)]
    try:
        with RemotingClient(front.addr, timeout_s=30) as reader:
            reader.call(codes.GET_BROKER_CLUSTER_INFO)  # connected and answered before the storm
            t0 = time.monotonic()
            senders = [threading.Thread(target=s.sendall, args=(b,)) for s, b in zip(socks, storms, strict=True)]
            for t in senders:
                t.start()
            waits = []
            while len(log.events) < conns * per_conn and time.monotonic() - t0 < 60:
                asked = time.monotonic()
                reader.call(codes.GET_BROKER_CLUSTER_INFO)
                waits.append(time.monotonic() - asked)
            storm_s = time.monotonic() - t0
            for t in senders:
                t.join()
        assert len(log.events) == conns * per_conn
        assert storm_s > 2.0, f"the storm took {storm_s:.2f} s: too short to show anything"
        # relative to the storm, which a loaded host stretches (2.7 s alone, 7.6 s in the full suite):
        # the old front held a read for 0.30 of the storm, this one under 0.12; the 90th percentile,
        # because one read's wait is at the mercy of the host's scheduler, and none held to the end
        waits.sort()
        assert len(waits) >= 5 and waits[len(waits) * 9 // 10] < storm_s / 5 and waits[-1] < storm_s / 2, (
            storm_s, len(waits), waits[len(waits) * 9 // 10], waits[-1])
    finally:
        for s in socks:
            s.close()
        front.stop()


class ResetStore(HeldStore):
    """HeldStore whose job counts `resets` log resets of partition 0 (a wiped or recreated log)."""

    def __init__(self, log: InMemoryLog) -> None:
        super().__init__(log)
        self.resets = 0
        self.upto = 10**9  # everything published is served

    def mark(self) -> LogMark:
        return LogMark({}, {"0": self.resets})

    def served_mark(self) -> LogMark:
        return LogMark({"0": self.upto}, {"0": self.resets})


def test_a_repeat_after_a_log_reset_is_published_whole(tmp_path):
    """The registration a repeat would name was published into a log that went back since (the
    job counted a reset): its offsets name other records now, so the repeat goes out whole."""
    front, store, log = _front(tmp_path, ResetStore, coalesce_ms=50)
    reg = _registration(9)
    try:
        with RemotingClient(front.addr) as c:
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS  # small
            time.sleep(0.2)
            store.resets = 1
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS  # whole
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS  # small, naming the new one
            time.sleep(0.2)
        regs = [e for e in log.events if e["type"] == ev.REGISTER_BROKER]
        assert ["repeats" in e for e in regs] == [False, True, False, True], regs
        assert regs[3]["repeats"]["offsets"] == [2]  # the whole one after the reset (the first small is at 1)
    finally:
        front.stop()


def test_a_repeat_older_than_the_events_topics_retention_allows_is_published_whole(tmp_path):
    """A small repeat names its full registration by offset; once that registration may have
    been removed by the events topic's retention (a quarter of NAMESRV_KAFKA_RETENTION_MS, here
    0.3 s), the repeat carries its body again and later repeats name the new one: the job never
    gets a repeat whose registration the log no longer holds."""
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0",
                       "NAMESRV_REMOTING_HEARTBEAT_COALESCE_MS": "50", "NAMESRV_KAFKA_RETENTION_MS": "1200"})
    log = RecordingLog(cfg.broker_timeout_ms)
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    reg = _registration(11)
    try:
        with RemotingClient(front.addr) as c:
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS  # small: within the horizon
            time.sleep(0.5)  # past the horizon of the first
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS  # whole again
            assert c.call(codes.REGISTER_BROKER, *reg).code == codes.SUCCESS  # small, naming the new one
            time.sleep(0.2)
        regs = [e for e in log.events if e["type"] == ev.REGISTER_BROKER]
        assert ["repeats" in e for e in regs] == [False, True, False, True], regs
        assert "topicConfigTable" in regs[2]
        assert regs[3]["repeats"]["offsets"] == [2]
    finally:
        front.stop()
