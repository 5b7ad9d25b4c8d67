"""Issue 39, item 1: watch streams (GET /topics/<t>/route/watch, GET /cluster/watch).

Against the real server process (`python -m serving`, granian) over the running system the
remoting tests share (`remoting_system`: job, in-process HTTP app, front; the server maps its cut
file): a watcher sees a broker's expiry and a new slave as the cuts that hold them are served; a
watcher resumed with Last-Event-ID after a restart of the server misses no cut that changed its
answer (checked against the history, cut by cut), and so does `namesrv-admin watch`; bad input is
a 4xx; one stream more than NAMESRV_HTTP_MAX_WATCHERS is a 503; the requests the server hands to
the Flask app answer as before. The hub's rules (what a cut sends to whom, a replay racing live
cuts, a client ahead of the server) are checked on their own, with cuts the pure core makes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import http.client
import json
import resource
import subprocess
import sys
import threading
import time
import types
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest
import requests
from deltalake import DeltaTable, write_deltalake
from granian.constants import Interfaces
from granian.server.embed import Server

from admin.cli import sse_events
from ops.net import free_port
from routeinfo.snapshot import Snapshot
from schemas import tables as t
from schemas.fields import InvalidInput
from serving.__main__ import BACKLOG, SPARE_FILES, watch_bound
from serving.asgi import RsgiResponder
from serving.watch import (
    KEEPALIVE,
    OPENING,
    StoreHistory,
    WatchHub,
    WatchKey,
    covered_marker,
    resume_point,
    same_answers,
    watch_key,
)
from tests.harness import ADMIN_TOKEN, Pipeline, ServerProcess
from tests.helpers import cut as pure_cut
from tests.helpers import hb, reg, topics, unreg

MAX_WATCHERS = 3  # the module's server: the bound test opens one stream more


# ---------------------------------------------------------------- the pure parts


def test_the_paths_and_the_resume_point_are_read_strictly():
    assert watch_key("/cluster/watch") == WatchKey(None)
    assert watch_key("/topics/Any-Topic%x/route/watch") == WatchKey("Any-Topic%x")
    assert watch_key("/topics/a/b/route/watch") is None  # no route takes a slash, as Flask routes none
    assert watch_key("/topics/T/route") is None
    for bad in ("/topics/ /route/watch", "/topics/a\x01b/route/watch", f"/topics/{'x' * 300}/route/watch"):
        with pytest.raises(InvalidInput):
            watch_key(bad)
    assert resume_point(None, "") is None
    assert resume_point("", "") is None  # EventSource sends no header before its first event
    assert resume_point("42", "lastEventId=7") == 42  # the header wins over the polyfills' parameter
    assert resume_point(None, "lastEventId=7&r=0.5") == 7
    for header, query in (("abc", ""), ("-1", ""), (None, "lastEventId=x"), ("1", "zone=z1"), (None, "asOf=0"),
                          (None, "snapshot=3")):
        with pytest.raises(InvalidInput):
            resume_point(header, query)


def test_the_streams_a_server_holds_leave_descriptors_for_its_ordinary_connections():
    assert watch_bound(3, 20_000) == 3
    assert watch_bound(20_000, 20_000) == 20_000 - BACKLOG - SPARE_FILES
    assert watch_bound(20_000, resource.RLIM_INFINITY) == 20_000
    assert watch_bound(100, 1_000) == 1


def test_an_event_is_one_sse_event_with_the_cut_its_time_and_the_answer():
    body = b'{"brokerDatas":[],"queueDatas":[{"brokerName":"b\xe2\x80\xa8"}]}'  # U+2028: no SSE line break
    wire = WatchKey("T\u00fc").event(7, 1_700_000_000_000, body) + KEEPALIVE + WatchKey(None).event(8, None, b"{}")
    lines = wire.split(b"\n")
    assert lines[:2] == [b"id: 7", b"event: route"]
    events = list(sse_events(line.decode() for line in lines))
    assert [(e["id"], e["event"]) for e in events] == [("7", "route"), ("8", "cluster")]
    assert json.loads(events[0]["data"]) == {"commitTime": 1_700_000_000_000, "snapshotId": 7, "topic": "T\u00fc",
                                             "route": json.loads(body)}
    assert json.loads(events[1]["data"]) == {"cluster": {}, "commitTime": None, "snapshotId": 8}
    # an id with no data (how the server ends a stream, naming where it left off): no event, but
    # namesrv-admin's follower (ids_only) sees it and resumes after it
    ended = ["id: 7", "data: {}", "", "id: 9", ""]
    assert [e["id"] for e in sse_events(ended)] == ["7"]
    assert [(e["id"], e["data"]) for e in sse_events(ended, ids_only=True)] == [("7", "{}"), ("9", None)]
    assert json.loads(WatchKey("Gone").event(9, 1, None).split(b"data: ")[1])["route"] is None  # no route


def served_cut(snapshot_id: int, *events: dict[str, Any], liveness_of: Snapshot | None = None) -> Snapshot:
    """A cut as the server serves it: the pure core's, with an id, a commit time and table
    versions; `liveness_of`: the same routes as that cut, only broker_live's version moved on."""
    if liveness_of is not None:
        versions = {**liveness_of.versions, t.BROKER_LIVE.name: liveness_of.versions[t.BROKER_LIVE.name] + 1}
        return dataclasses.replace(liveness_of, snapshot_id=snapshot_id, commit_time=1000 + snapshot_id,
                                   versions=versions, route_bodies={}, cut_bodies={})
    return dataclasses.replace(pure_cut(*events), snapshot_id=snapshot_id, commit_time=1000 + snapshot_id,
                               versions={x.name: snapshot_id for x in t.CUT_TABLES})


class FakeStream:
    """A watch request as the hub sees it: what was answered and what was written."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.code: str | None = None
        self.headers: dict[str, str] = {}
        self.written: list[bytes] = []
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def refuse(self, status, code, remark, headers=()):
        self.status, self.code, self.headers = status, code, dict(headers)

    def open(self):
        self.status = 200
        return self.written.append

    def disconnected(self):
        return self.gone

    def events(self) -> list[tuple[int, Any]]:
        """(cut, route or cluster) of each event written."""
        parsed = sse_events(line.decode() for line in b"".join(self.written).split(b"\n"))
        return [(int(e["id"]), (lambda d: d.get("route", d.get("cluster")))(json.loads(e["data"]))) for e in parsed]

    def last_id(self) -> int | None:
        """The client's last event id as the HTML standard keeps it: the last `id:` field read,
        an id without data (no event) included."""
        ids = [line for line in b"".join(self.written).split(b"\n") if line.startswith(b"id: ")]
        return int(ids[-1][4:]) if ids else None


class FakeStore:
    """What the hub reads of the snapshot store outside a resume: the staleness header's figure."""

    def __init__(self, current: Snapshot | None = None) -> None:
        self.current = current

    def staleness_ms(self) -> int:
        return 7


class FakeHistory:
    """The history a resume reads (`serving.watch.HistoryReads`) over cuts kept by id: the rows
    with each cut's table versions, as the `snapshots` table holds them; counting what is read.
    `release`: every read waits for it (a replay racing the served cuts)."""

    def __init__(self, cuts: dict[int, Snapshot], release: threading.Event | None = None) -> None:
        self.cuts, self.release = cuts, release
        self.row_reads: list[tuple[int, int]] = []
        self.cut_loads: list[int] = []
        self.gone: set[int] = set()  # cuts whose rows stay but which can no longer be loaded (retention, vacuum)

    def rows(self, first: int, last: int, limit: int) -> list[dict[str, Any]] | None:
        if self.release is not None:
            self.release.wait(10)
        self.row_reads.append((first, last))
        ids = sorted(i for i in self.cuts if first <= i <= last)
        if len(ids) > limit:
            return None
        return [{"snapshotId": i, "commitTime": self.cuts[i].commit_time,
                 **{t.version_column(x): self.cuts[i].versions[x.name] for x in t.CUT_TABLES}} for i in ids]

    def cut(self, snapshot_id: int) -> Snapshot:
        self.cut_loads.append(snapshot_id)
        if snapshot_id not in self.cuts or snapshot_id in self.gone:
            raise LookupError(f"snapshot {snapshot_id} is older than the history retention (48 h)")
        return self.cuts[snapshot_id]


def hub_of(history: dict[int, Snapshot] | FakeHistory | None = None, **kwargs: Any) -> WatchHub:
    """A hub over a fake store and history (`history`: its cuts by id)."""
    reads = history if isinstance(history, FakeHistory) else FakeHistory(history or {})
    return WatchHub(FakeStore(), history=ThreadPoolExecutor(1), reads=reads,  # type: ignore[arg-type]
                    **{"max_watchers": 10, **kwargs})


async def wait_for(probe: Any, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        await asyncio.sleep(0.01)


def addrs(route: dict[str, Any] | None) -> dict[str, str] | None:
    return None if route is None else {k: v for b in route["brokerDatas"] for k, v in b["brokerAddrs"].items()}


MASTER = reg("wb", 0, "10.9.0.1:10911", tps=topics("WT", "Base"))
SLAVE = reg("wb", 1, "10.9.0.2:10911", tps=topics("WT", "Base"))


def test_a_cut_reaches_exactly_the_watchers_whose_answer_it_changed():
    async def scenario() -> None:
        hub = hub_of()
        first = served_cut(1, MASTER)
        hub.served(first)
        route, cluster, absent, late = FakeStream(), FakeStream(), FakeStream(), FakeStream()
        tasks = [asyncio.create_task(hub.serve(WatchKey(k), None, s))
                 for k, s in (("WT", route), (None, cluster), ("NotYet", absent))]
        await asyncio.sleep(0)
        assert hub.open_streams == 3 and all(s.written[0] == OPENING for s in (route, cluster, absent))
        assert same_answers(first.versions, served_cut(2, liveness_of=first).versions)
        assert not same_answers(first.versions, served_cut(3, MASTER, SLAVE).versions)
        hub.served(served_cut(2, liveness_of=first))  # heartbeats only: no answer can change
        hub.served(served_cut(3, MASTER, SLAVE))
        tasks.append(asyncio.create_task(hub.serve(WatchKey("WT"), None, late)))
        await asyncio.sleep(0)
        hub.served(served_cut(4, MASTER, SLAVE, reg("wc", 0, "10.9.0.3:10911", tps=topics("NotYet", "Other"))))
        hub.served(served_cut(4, MASTER))  # the same cut again (mapped anew): nothing
        assert [(i, addrs(r)) for i, r in route.events()] == [(1, {"0": "10.9.0.1:10911"}),
                                                               (3, {"0": "10.9.0.1:10911", "1": "10.9.0.2:10911"})]
        assert [i for i, _ in cluster.events()] == [1, 3, 4]
        assert [(i, addrs(r)) for i, r in absent.events()] == [(1, None), (4, {"0": "10.9.0.3:10911"})]
        assert [i for i, _ in late.events()] == [3]  # joined at cut 3: that answer, then nothing new at 4
        route.gone.set_result(None)
        await tasks[0]
        assert hub.open_streams == 3
        hub.close()
        await asyncio.gather(*tasks)
        assert hub.open_streams == 0

    asyncio.run(scenario())


def test_a_history_that_cannot_be_read_to_resume_from_is_a_503_with_retry_after():
    class Unreachable(FakeHistory):
        def rows(self, first, last, limit):
            raise OSError("the store is unreachable")

    async def scenario() -> None:
        hub = hub_of(Unreachable({}))
        hub.served(served_cut(6, MASTER))
        stream = FakeStream()
        assert await hub.serve(WatchKey("WT"), 5, stream) == 503
        assert stream.status == 503 and "Retry-After" in stream.headers and hub.open_streams == 0
        hub.close()

    asyncio.run(scenario())


def test_a_resumed_watcher_gets_the_replay_then_the_cuts_served_meanwhile_without_a_gap_or_a_repeat():
    release = threading.Event()
    at = {i: served_cut(i, *evs) for i, evs in ((5, (MASTER,)), (6, (MASTER, SLAVE)), (7, (SLAVE,)))}
    history = FakeHistory({**at, 8: served_cut(8, liveness_of=at[7]), 9: served_cut(9, MASTER)}, release)

    async def scenario() -> None:
        hub = hub_of(history)
        hub.served(at[6])
        stream = FakeStream()
        task = asyncio.create_task(hub.serve(WatchKey("WT"), 5, stream))
        await asyncio.sleep(0.05)
        hub.served(at[7])  # served while the replay reads the history: held back, written after it
        hub.served(history.cuts[8])
        assert stream.status is None
        release.set()
        await wait_for(lambda: stream.written[1:], "replay written")
        assert [(i, addrs(r)) for i, r in stream.events()] == [(6, {"0": "10.9.0.1:10911", "1": "10.9.0.2:10911"}),
                                                                (7, {"1": "10.9.0.2:10911"})]
        assert history.row_reads == [(5, 6)]  # the rows after the resume point only
        ahead = FakeStream()  # a client that saw cut 9 on another replica: nothing until this one passes it
        ahead_task = asyncio.create_task(hub.serve(WatchKey("WT"), 9, ahead))
        await wait_for(lambda: ahead.status is not None, "answer")  # its replay runs on the history thread
        assert ahead.status == 200
        hub.served(history.cuts[9])
        hub.served(served_cut(10, liveness_of=at[7]))
        assert [i for i, _ in ahead.events()] == [10]  # its answer as of cut 9 was the master's (the history's)
        hub.close()
        await asyncio.gather(task, ahead_task)

    asyncio.run(scenario())


def test_a_resume_reads_the_rows_after_its_id_once_and_each_changed_cut_once_for_every_watch_resuming_alike():
    """Forty watchers of four answers resume from one cut: one read of the rows after it, each cut
    that changed an answer table loaded once for all (a heartbeat's cut not at all); a watcher
    resuming from the served cut, or after only heartbeats, reads no cut."""
    release = threading.Event()
    cuts = {1: served_cut(1, MASTER)}
    cuts[2] = served_cut(2, liveness_of=cuts[1])
    cuts[3] = served_cut(3, MASTER, SLAVE)
    cuts[4] = served_cut(4, liveness_of=cuts[3])
    cuts[5] = served_cut(5, SLAVE, reg("wc", 0, "10.9.0.3:10911", tps=topics("Other", "Extra")))
    cuts[6] = served_cut(6, liveness_of=cuts[5])
    history = FakeHistory(cuts, release)

    async def scenario() -> None:
        hub = hub_of(history, max_watchers=100)
        hub.served(cuts[6])
        keys = [WatchKey("WT"), WatchKey("Base"), WatchKey("Other"), WatchKey(None)]
        streams = [(key, FakeStream()) for key in keys for _ in range(10)]
        tasks = [asyncio.create_task(hub.serve(key, 1, s)) for key, s in streams]
        await asyncio.sleep(0.05)
        release.set()
        await wait_for(lambda: all(s.status == 200 for _, s in streams), "streams")
        assert history.row_reads == [(1, 6)]
        assert sorted(history.cut_loads) == [1, 3, 5]  # 2, 4 and 6 moved broker_live alone
        for key, s in streams:
            expected = {"WT": [3, 5], "Base": [3, 5], "Other": [5], None: [3, 5]}[key.topic]
            assert [i for i, _ in s.events()] == expected, key
        history.row_reads.clear()
        history.cut_loads.clear()
        quiet, current = FakeStream(), FakeStream()
        tasks += [asyncio.create_task(hub.serve(WatchKey("WT"), 5, quiet)),  # only heartbeats since 5
                  asyncio.create_task(hub.serve(WatchKey("WT"), 6, current))]  # the served cut: nothing to read
        await wait_for(lambda: quiet.status == current.status == 200, "streams")
        assert history.row_reads == [(5, 6)] and history.cut_loads == []
        assert quiet.events() == current.events() == []  # their clients hold the served answer
        hub.close()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())


def test_a_resume_from_a_cut_never_committed_beyond_the_retention_or_too_far_back_is_refused():
    cuts = {i: served_cut(i, MASTER if i % 2 else SLAVE) for i in range(3, 9)}

    async def scenario() -> None:
        history = FakeHistory(dict(cuts))
        hub = hub_of(history)
        hub.served(cuts[8])
        del history.cuts[3]  # a resume point never committed (or a restored warehouse's lost cut)
        history.cut_loads.clear()
        for resume, status, code in ((3, 404, "SNAPSHOT_NOT_FOUND"), (2**62, 404, "SNAPSHOT_NOT_FOUND")):
            stream = FakeStream()
            assert await hub.serve(WatchKey("WT"), resume, stream) == status and stream.code == code
        history.gone.add(4)  # its row stays, its cut is beyond the retention
        stream = FakeStream()
        assert await hub.serve(WatchKey("WT"), 4, stream) == 410 and stream.code == "SNAPSHOT_GONE"
        hub.close()

    asyncio.run(scenario())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("serving.watch.MAX_REPLAY_CUTS", 3)

        async def too_far() -> None:
            hub = hub_of(dict(cuts))
            hub.served(cuts[8])
            far, near = FakeStream(), FakeStream()
            assert await hub.serve(WatchKey("WT"), 3, far) == 410 and far.code == "SNAPSHOT_GONE"  # 5 cuts back
            task = asyncio.create_task(hub.serve(WatchKey("WT"), 5, near))  # 3 cuts back
            await wait_for(lambda: near.status is not None, "answer")
            assert near.status == 200 and [i for i, _ in near.events()] == [6, 7, 8]
            hub.close()
            await asyncio.wait_for(task, 10)

        asyncio.run(too_far())


def test_the_store_history_reads_only_the_rows_after_the_resume_point(tmp_path):
    """`StoreHistory.rows` over a real `snapshots` table, a Delta file per cut: the rows in range
    in id order, None past the limit; the files before the range are not opened (deleted here,
    as a vacuum would, the read still answers, where reading the whole table fails)."""
    table = tmp_path / t.SNAPSHOTS.name
    for i in range(1, 13):
        row = {"snapshotId": i, "batchId": i, "commitTime": 1000 + i, "sourceOffsets": "{}", "eventCount": 1,
               **{t.version_column(x): i for x in t.CUT_TABLES}}
        write_deltalake(str(table), t.SNAPSHOTS.from_rows([row]), mode="append")
    store = types.SimpleNamespace(reader=types.SimpleNamespace(warehouse=tmp_path))
    history = StoreHistory(store)  # type: ignore[arg-type]
    assert [r["snapshotId"] for r in history.rows(9, 11, 5) or []] == [9, 10, 11]
    assert history.rows(3, 12, 5) is None  # ten cuts: more than five, none read
    assert history.rows(20, 30, 5) == []
    files = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pydict()
    for path, first in zip(files["path"], files["min.snapshotId"], strict=True):
        if first < 9:
            (table / path).unlink()
    assert [r["snapshotId"] for r in history.rows(9, 12, 5) or []] == [9, 10, 11, 12]
    with pytest.raises(OSError):
        DeltaTable(str(table)).to_pyarrow_dataset().to_table()  # what `SnapshotReader.list_rows` does
    write_deltalake(str(table), t.SNAPSHOTS.from_rows([{**row, "snapshotId": 13}]), mode="append")
    assert [r["snapshotId"] for r in history.rows(12, 13, 5) or []] == [12, 13]  # the handle brought up to date


def test_one_stream_more_than_the_bound_or_while_stopping_is_503_with_retry_after():
    async def scenario() -> None:
        hub = hub_of(max_watchers=2)
        hub.served(served_cut(1, MASTER))
        streams = [FakeStream() for _ in range(3)]
        tasks = [asyncio.create_task(hub.serve(WatchKey("WT"), None, s)) for s in streams]
        await asyncio.sleep(0)
        assert [s.status for s in streams] == [200, 200, 503] and streams[2].headers["Retry-After"] == "5"
        streams[0].gone.set_result(None)
        await tasks[0]
        again = FakeStream()
        tasks.append(asyncio.create_task(hub.serve(WatchKey("WT"), None, again)))
        await asyncio.sleep(0)
        assert again.status == 200
        hub.close()
        stopping = FakeStream()
        assert await hub.serve(WatchKey("WT"), None, stopping) == 503 and stopping.headers["Retry-After"] == "1"
        await asyncio.gather(*tasks)

    asyncio.run(scenario())


def test_every_refusal_of_a_watch_names_the_served_cut():
    """As every other answer: X-Namesrv-Snapshot (and the staleness) on 400, 404, 405, 410, 503."""
    async def scenario() -> None:
        history = FakeHistory({5: served_cut(5, MASTER), 9: served_cut(9, MASTER)})
        hub = hub_of(history, max_watchers=1)
        unserved = FakeStream()
        assert await hub.request(WatchKey("WT"), "GET", "5", "", unserved) == 503
        assert "X-Namesrv-Snapshot" not in unserved.headers  # no cut served yet: none to name
        hub.served(served_cut(9, MASTER))
        refused = {}
        for name, (method, header, query) in {"method": ("POST", None, ""), "id": ("GET", "x", ""),
                                               "param": ("GET", None, "zone=z1"), "never": ("GET", "7", "")}.items():
            refused[name] = FakeStream()
            await hub.request(WatchKey("WT"), method, header, query, refused[name])
        history.gone.add(5)
        refused["gone"] = FakeStream()
        await hub.request(WatchKey("WT"), "GET", "5", "", refused["gone"])
        holder = FakeStream()
        task = asyncio.create_task(hub.request(WatchKey("WT"), "GET", None, "", holder))
        await asyncio.sleep(0)
        refused["full"] = FakeStream()
        await hub.request(WatchKey("WT"), "GET", None, "", refused["full"])
        assert {k: s.status for k, s in refused.items()} == {"method": 405, "id": 400, "param": 400, "never": 404,
                                                            "gone": 410, "full": 503}
        for name, s in refused.items():
            assert s.headers["X-Namesrv-Snapshot"] == "9" and s.headers["X-Namesrv-Staleness-Ms"] == "7", name
        assert refused["method"].headers["allow"] == "GET" and refused["full"].headers["Retry-After"] == "5"
        hub.close()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())


def test_a_served_cut_with_a_lower_id_resets_the_streams_to_it():
    """A warehouse restored to an earlier version: the server serves a cut with a lower id. Every
    stream is sent its answer in that cut, as at a fresh subscribe (an equal answer too: its
    client's last id is the new one from now on), and the next cuts go on from there; a stream
    replaying the history meanwhile drops what it read before the restore."""
    release = threading.Event()
    old = {i: served_cut(i, MASTER, SLAVE) for i in (1, 2)}

    async def scenario() -> None:
        hub = hub_of(FakeHistory(dict(old), release))
        hub.served(served_cut(10, MASTER, SLAVE))
        route, cluster, replaying = FakeStream(), FakeStream(), FakeStream()
        tasks = [asyncio.create_task(hub.serve(WatchKey("WT"), None, route)),
                 asyncio.create_task(hub.serve(WatchKey(None), None, cluster)),
                 asyncio.create_task(hub.serve(WatchKey("WT"), 1, replaying))]
        await asyncio.sleep(0.05)
        hub.served(served_cut(4, MASTER, SLAVE))  # the restored warehouse's cut: the same routes, a lower id
        hub.served(served_cut(5, MASTER))  # its next cut: the slave gone
        hub.served(served_cut(6, liveness_of=served_cut(5, MASTER)))
        release.set()
        await wait_for(lambda: replaying.written[1:], "replay written")
        both, master = {"0": "10.9.0.1:10911", "1": "10.9.0.2:10911"}, {"0": "10.9.0.1:10911"}
        assert [(i, addrs(r)) for i, r in route.events()] == [(10, both), (4, both), (5, master)]
        assert [i for i, _ in cluster.events()] == [10, 4, 5]
        assert [(i, addrs(r)) for i, r in replaying.events()] == [(4, both), (5, master)]
        assert hub.cut is not None and hub.cut.snapshot_id == 6
        later = FakeStream()
        tasks.append(asyncio.create_task(hub.serve(WatchKey("WT"), None, later)))
        await asyncio.sleep(0)
        hub.served(served_cut(7, SLAVE))
        assert [i for i, _ in later.events()] == [6, 7] and [i for i, _ in route.events()][-1] == 7
        hub.close()
        await asyncio.gather(*tasks)

    asyncio.run(scenario())


@functools.cache
def growing_cluster() -> dict[int, Snapshot]:
    """Cuts 1 to 60, each with one broker more than the one before: each changes the cluster
    info, which grows from 0.2 to 8 KB."""
    cuts, brokers = {}, []
    for i in range(1, 61):
        brokers.append(reg(f"slow{i}", 0, f"10.8.0.{i}:10911", tps=topics("Slow", "SlowB")))
        cuts[i] = served_cut(i, *brokers)
    return cuts


def test_a_reader_that_falls_behind_is_ended_at_its_budget_and_resumes_without_a_gap():
    """A client that stops reading: what the hub hands its stream (what granian would queue for
    it) stops at the budget, the stream ends; the client resumes from its last event and, stream
    after stream, gets every change once, in order. Its first event is written whatever its size."""
    cuts = growing_cluster()
    budget = 24_000

    async def scenario() -> None:
        hub = hub_of(dict(cuts), budget_bytes=budget)
        hub.served(cuts[1])
        stalled = FakeStream()
        task = asyncio.create_task(hub.serve(WatchKey(None), None, stalled))
        await asyncio.sleep(0)
        for i in range(2, 61):
            hub.served(cuts[i])
        await asyncio.wait_for(task, 10)
        handed = sum(map(len, stalled.written))
        assert handed <= budget and hub.open_streams == 0, handed
        got = [i for i, _ in stalled.events()]
        assert got == list(range(1, len(got) + 1)) and 3 < len(got) < 60
        last, resumed = stalled.last_id(), 0
        while got[-1] < 60:  # the client comes back with Last-Event-ID: the rest, a budget at a time
            stream = FakeStream()
            task = asyncio.create_task(hub.serve(WatchKey(None), last, stream))
            await wait_for(lambda s=stream: s.status is not None, "answer")
            if not task.done():
                await asyncio.sleep(0)
            if not task.done():
                stream.gone.set_result(None)  # caught up: a live stream stays open until its client goes
            await asyncio.wait_for(task, 10)
            assert sum(map(len, stream.written)) <= budget
            got += [i for i, _ in stream.events()]
            last, resumed = stream.last_id(), resumed + 1
        assert got == list(range(1, 61)) and resumed > 1
        big = hub_of(dict(cuts), budget_bytes=100)  # an event larger than the budget still reaches a new stream
        big.served(cuts[60])
        first = FakeStream()
        task = asyncio.create_task(big.serve(WatchKey(None), None, first))
        await asyncio.sleep(0)
        big.served(served_cut(61, MASTER))
        await asyncio.wait_for(task, 10)
        assert [i for i, _ in first.events()] == [60]
        hub.close()
        big.close()

    asyncio.run(scenario())


def test_a_stream_past_its_life_or_stopped_is_ended_naming_the_cut_it_covered():
    """The server ends a stream at its life's end (or its own stop) with an id and no event: the
    newest cut the stream covered, from which its client resumes with nothing to read. A stream
    replaying the history when too many cuts were held back is ended once its replay is written."""
    release = threading.Event()
    cuts = {1: served_cut(1, MASTER), 2: served_cut(2, MASTER, SLAVE)}
    cuts[3] = served_cut(3, liveness_of=cuts[2])

    async def scenario() -> None:
        history = FakeHistory(dict(cuts), release)
        hub = hub_of(history, max_life_s=60.0, max_held=2)
        hub.served(cuts[2])
        aging = FakeStream()
        task = asyncio.create_task(hub.serve(WatchKey("WT"), None, aging))
        await asyncio.sleep(0)
        hub.served(cuts[3])  # heartbeats: no event, but the stream covers cut 3
        now = time.monotonic()
        for tick in range(20):
            hub.tick(tick, now + 30)  # younger than 45 s: a keep-alive each
        assert not task.done() and aging.written[-1] == KEEPALIVE
        for tick in range(20):
            hub.tick(tick, now + 61)
        assert await asyncio.wait_for(task, 10) == 200
        assert [i for i, _ in aging.events()] == [2] and aging.written[-1] == covered_marker(3)
        assert aging.last_id() == 3
        history.row_reads.clear()
        release.set()
        back = FakeStream()
        task = asyncio.create_task(hub.serve(WatchKey("WT"), aging.last_id(), back))
        await wait_for(lambda: back.status is not None, "answer")
        assert back.status == 200 and back.events() == [] and history.row_reads == []
        hub.close()
        await asyncio.wait_for(task, 10)
        assert back.written[-1] == OPENING  # stopped: it covered cut 3, as its resume point said already

        release.clear()
        hub = hub_of(FakeHistory(dict(cuts), release), max_held=2)
        hub.served(cuts[3])
        behind = FakeStream()
        task = asyncio.create_task(hub.serve(WatchKey("WT"), 1, behind))
        await asyncio.sleep(0.05)
        for i in range(4, 8):  # four changes while it replays: two held back, then one too many
            hub.served(served_cut(i, SLAVE) if i % 2 else served_cut(i, MASTER))
        release.set()
        assert await asyncio.wait_for(task, 10) == 200
        assert [i for i, _ in behind.events()] == [2, 4, 5] and behind.last_id() == 5  # resumes from 5: no gap
        hub.close()

    asyncio.run(scenario())


def sse_connect(port: int, last: int | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A cluster watch opened on 127.0.0.1:`port`, resumed after `last`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/cluster/watch", headers={} if last is None else {"Last-Event-ID": str(last)})
    return conn, conn.getresponse()


def read_sse_until(response: http.client.HTTPResponse, newest: int) -> tuple[list[int], int, bool]:
    """The event ids read until the response ends or carries event `newest`; the bytes read;
    whether the response ended."""
    size, ended = 0, False

    def lines() -> Iterator[str]:
        nonlocal size, ended
        while line := response.readline():
            size += len(line)
            yield line.decode().rstrip("\n")
        ended = True
    ids = []
    for e in sse_events(lines()):
        ids.append(int(e["id"]))
        if ids[-1] == newest:
            break
    return ids, size, ended


class RsgiWatchApp:
    """The cluster watch as `serving.asgi.Front` serves it, over `hub`."""

    def __init__(self, hub: WatchHub) -> None:
        self.hub = hub

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        await self.hub.request(WatchKey(None), scope.method, scope.headers.get("last-event-id"),
                               scope.query_string, RsgiResponder(proto, lambda status: None))


def test_over_granian_a_client_that_stops_reading_is_held_at_most_its_budget_then_resumes_without_a_gap():
    """Granian itself (embedded in the test's loop, the hub and the request handling
    `python -m serving` runs) and a client over TCP that reads nothing: granian queues a stream's
    bytes without a bound, so the server ends the stream at its budget though its client read
    none of it; the client then reads every event queued (no more than the budget) and the end of
    the response, and resumes, stream after stream, with every change once, in order."""
    cuts = growing_cluster()
    budget = 32_000

    async def scenario() -> None:
        hub = hub_of(dict(cuts), budget_bytes=budget)
        hub.served(cuts[1])
        port = free_port()
        server = Server(RsgiWatchApp(hub), address="127.0.0.1", port=port, interface=Interfaces.RSGI, websockets=False,
                        log_enabled=False)
        serving = asyncio.create_task(server.serve())
        deadline = time.monotonic() + 10
        while True:
            try:
                conn, response = await asyncio.to_thread(sse_connect, port, None)
                break
            except OSError:
                assert time.monotonic() < deadline, "granian did not listen"
                await asyncio.sleep(0.05)
        try:
            assert response.status == 200
            await wait_for(lambda: hub.open_streams == 1, "the stream")
            for i in range(2, 61):
                hub.served(cuts[i])
                await asyncio.sleep(0)
            await wait_for(lambda: hub.open_streams == 0, "the end of a stream whose client reads nothing")
            got, size, ended = await asyncio.to_thread(read_sse_until, response, 60)
            assert ended and size <= budget and got == list(range(1, len(got) + 1)) and len(got) < 60, (size, got)
            conn.close()
            streams = 1
            while got[-1] < 60:
                conn, response = await asyncio.to_thread(sse_connect, port, got[-1])
                assert response.status == 200
                more, size, ended = await asyncio.to_thread(read_sse_until, response, 60)
                conn.close()
                assert size <= budget and (ended or more[-1] == 60)
                got += more
                streams += 1
            assert got == list(range(1, 61)) and streams > 2
        finally:
            hub.close()
            server.stop()
            await serving

    asyncio.run(scenario())


# ---------------------------------------------------------------- the real server


class EventStream:
    """One watch stream over a real connection, read in the test's thread."""

    def __init__(self, url: str, path: str, last_event_id: int | None = None) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=10)
        headers = {"Accept": "text/event-stream"} | ({} if last_event_id is None else
                                                     {"Last-Event-ID": str(last_event_id)})
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()
        self.eof = False
        assert self.response.status == 200, (self.response.status, self.response.read())
        assert self.response.getheader("content-type").startswith("text/event-stream")

    def lines(self, deadline: float) -> Iterator[str]:
        """Its lines until `deadline` or its end (`eof`)."""
        while not self.eof:
            if self.conn.sock is None:  # http.client let go of a stream it read to the end
                self.eof = True
                return
            self.conn.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                line = self.response.readline()
            except TimeoutError:
                return
            if not line:  # the server ended the stream
                self.eof = True
                return
            yield line.decode().rstrip("\n")

    def next(self, timeout: float = 30) -> dict[str, Any] | None:
        """The next event ({"id", "event", **its data}), or None at the timeout or the stream's end."""
        for e in sse_events(self.lines(time.monotonic() + timeout)):
            return {"id": int(e["id"]), "event": e["event"], **json.loads(e["data"])}
        return None

    def until(self, done: Any, timeout: float = 40, what: str = "an event") -> list[dict[str, Any]]:
        """Events until one for which `done(event)` holds (all of them, that one last)."""
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            e = self.next(deadline - time.monotonic())
            if e is None:
                break
            seen.append(e)
            if done(e):
                return seen
        raise AssertionError(f"no {what} within {timeout:.0f} s; events: {[(x['id'], x.get('route')) for x in seen]}")

    def ended(self, timeout: float = 10) -> bool:
        """Whether the server ends the stream within `timeout` (whatever it writes before)."""
        for _ in self.lines(time.monotonic() + timeout):
            pass
        return self.eof

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(scope="module")
def system(remoting_system) -> Pipeline:
    return remoting_system  # the running system the remoting tests share: no pipeline of this module's own


@pytest.fixture(scope="module")
def server(system) -> Iterator[ServerProcess]:
    srv = ServerProcess(system.cfg, NAMESRV_HTTP_MAX_WATCHERS=str(MAX_WATCHERS)).start()
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.stop()


def open_stream(url: str, path: str, timeout: float = 10) -> EventStream:
    """A stream, once the server has noticed that an earlier test's streams closed (a 503 until then)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return EventStream(url, path)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Heartbeats:
    """Brokers heartbeating every 0.5 s from a thread, as long as they are in `beating`."""

    def __init__(self, p: Pipeline) -> None:
        self.p, self.beating, self.stop = p, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            if self.beating:
                self.p.publish([hb(name, bid, addr) for (name, bid), addr in list(self.beating.items())])


def route_at(srv: ServerProcess, topic: str, snapshot_id: int) -> dict[str, Any] | None:
    r = requests.get(f"{srv.url}/topics/{topic}/route?snapshot={snapshot_id}", timeout=30)
    assert r.status_code in (200, 404), r.text
    return r.json() if r.status_code == 200 else None


@pytest.mark.integration
def test_a_watcher_sees_a_new_slave_and_a_brokers_expiry_as_their_cuts_are_served(system, server, figures):
    suffix = uuid.uuid4().hex[:6]
    group, topic = f"watch-{suffix}", f"Watch{suffix}"
    master, slave = ("10.39.0.1:10911", 0), ("10.39.0.2:10911", 1)
    beats = Heartbeats(system)
    try:
        system.wait_served(system.publish([reg(group, 0, master[0], tps=topics(topic, f"{topic}B"), timeout_ms=4000)]))
        beats.beating[(group, 0)] = master[0]
        route_stream = open_stream(server.url, f"/topics/{topic}/route/watch")
        cluster_stream = open_stream(server.url, "/cluster/watch")
        try:
            first = route_stream.until(lambda e: addrs(e["route"]) == {"0": master[0]}, what="the master's route")
            assert first[-1]["topic"] == topic and first[-1]["commitTime"] > 0
            system.publish([reg(group, 1, slave[0], tps=topics(topic, f"{topic}B"), timeout_ms=4000)])
            beats.beating[(group, 1)] = slave[0]
            both = route_stream.until(lambda e: addrs(e["route"]) == {"0": master[0], "1": slave[0]},
                                      what="the new slave")[-1]
            del beats.beating[(group, 0)]  # the master falls silent: it expires 4 s after its last heartbeat
            silenced = time.monotonic()
            expired = route_stream.until(lambda e: addrs(e["route"]) == {"1": slave[0]}, what="the master's expiry")[-1]
            figures(f"watch: a master's expiry reached its watcher {time.monotonic() - silenced:.1f} s after its last "
                    "heartbeat (4 s timeout)")
            assert first[-1]["id"] < both["id"] < expired["id"]
            for e in (first[-1], both, expired):  # each event is the answer of the cut it names
                assert route_at(server, topic, e["id"]) == e["route"]
            def members(e: dict[str, Any]) -> dict[str, str] | None:
                return (e["cluster"]["brokerAddrTable"].get(group) or {}).get("brokerAddrs")
            seen = [members(e) for e in cluster_stream.until(lambda e: members(e) == {"1": slave[0]},
                                                              what="the cluster info without the master")]
            assert {"0": master[0], "1": slave[0]} in seen
        finally:
            route_stream.close()
            cluster_stream.close()
    finally:
        beats.stop.set()
        system.publish([unreg(group, bid, a) for a, bid in (master, slave)])  # the shared system's other users


@pytest.mark.integration
def test_a_resumed_watcher_misses_no_change_across_a_restart_of_the_server(system, server, figures):
    suffix = uuid.uuid4().hex[:6]
    group, topic = f"resume-{suffix}", f"Resume{suffix}"
    system.wait_served(system.publish([reg(group, 0, "10.40.0.1:10911", tps=topics(topic, f"{topic}B"))]))
    stream = open_stream(server.url, f"/topics/{topic}/route/watch")
    seen = stream.until(lambda e: e["route"] is not None, what="the route")[-1]
    try:
        took = server.stop()  # with the stream open: it ends the stream rather than hold the stop
        assert stream.ended(), "the stream was not ended by the server's stop"
        stream.close()
        assert took < 15, f"python -m serving took {took:.1f} s to stop with a watch stream open"
        # while it is down: a slave joins, then leaves; each served (by the system's own HTTP app)
        system.wait_served(system.publish([reg(group, 1, "10.40.0.2:10911", tps=topics(topic, f"{topic}B"))]))
        system.wait_served(system.publish([unreg(group, 1, "10.40.0.2:10911")]))
    finally:
        server.start()
    resumed = EventStream(server.url, f"/topics/{topic}/route/watch", last_event_id=seen["id"])
    joined = []

    def slave_left(e: dict[str, Any]) -> bool:
        joined.append("1" in (addrs(e["route"]) or {}))
        return any(joined) and not joined[-1]
    try:
        got = resumed.until(slave_left, what="the slave joining, then leaving")
    finally:
        resumed.close()
    # what the history says the client missed: every cut after the one it saw, up to the last event
    cuts = sorted(s["snapshotId"] for s in system.get(f"/history/snapshots?limit=1000&before={got[-1]['id'] + 1}")[1]
                  ["snapshots"] if s["snapshotId"] > seen["id"])
    expected, before = [], seen["route"]
    for cut_id in cuts:
        answer = route_at(server, topic, cut_id)
        if answer != before:
            expected.append((cut_id, answer))
            before = answer
    assert [(e["id"], e["route"]) for e in got] == expected
    assert [sorted(addrs(r)) for _, r in expected] == [["0", "1"], ["0"]]  # the slave came, then left
    cli = subprocess.run([sys.executable, "-m", "admin", "--url", server.url, "-o", "json", "watch", "-t", topic,
                          "--last-event-id", str(seen["id"]), "--max-events", str(len(expected))],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert [(e["snapshotId"], e["route"]) for e in map(json.loads, cli.stdout.splitlines())] == expected
    figures(f"watch: resumed after a restart of the server, {len(cuts)} cuts replayed from the history, "
            f"{len(expected)} of them changes, the same through namesrv-admin watch")
    system.publish([unreg(group, 0, "10.40.0.1:10911")])


@pytest.mark.integration
def test_bad_input_is_a_4xx_and_an_unknown_topic_streams_its_absence(server):
    def status(path: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, Any]]:
        r = requests.request(method, server.url + path, headers=headers, timeout=10, stream=True)
        return r.status_code, r.json()

    assert status("/cluster/watch", **{"Last-Event-ID": "abc"}) == (400, {
        "code": "INVALID_PARAMETER", "remark": "Last-Event-ID must be an integer, not 'abc'"})
    assert status("/cluster/watch?lastEventId=-1")[0] == 400
    assert status("/topics/T/route/watch?zone=z1")[0] == 400
    assert status("/topics/a%01b/route/watch")[0] == 400
    assert status("/cluster/watch", **{"Last-Event-ID": str(2**62)})[1]["code"] == "SNAPSHOT_NOT_FOUND"
    assert status("/cluster/watch", "POST")[0] == 405
    never = requests.get(server.url + "/cluster/watch", headers={"Last-Event-ID": str(2**62)}, timeout=10)
    served = requests.get(server.url + "/cluster", timeout=10).headers["X-Namesrv-Snapshot"]
    assert int(never.headers["X-Namesrv-Snapshot"]) <= int(served)  # the served cut's, as every answer names it
    for refused in (requests.post(server.url + "/cluster/watch", timeout=10),  # 405
                    requests.get(server.url + "/cluster/watch?lastEventId=-1", timeout=10),  # 400, the request's
                    requests.get(server.url + "/topics/a%01b/route/watch", timeout=10)):  # 400, the topic's
        assert refused.status_code in (400, 405)
        assert int(refused.headers["X-Namesrv-Snapshot"]) <= int(served), refused.headers
    absent = open_stream(server.url, f"/topics/NoSuchTopic{uuid.uuid4().hex[:6]}/route/watch")
    try:
        assert absent.next(10)["route"] is None
    finally:
        absent.close()


@pytest.mark.integration
def test_one_stream_more_than_the_bound_is_a_503_with_retry_after(server):
    streams = [open_stream(server.url, "/cluster/watch") for _ in range(MAX_WATCHERS)]
    try:
        r = requests.get(server.url + "/cluster/watch", timeout=10, stream=True)
        assert r.status_code == 503 and r.headers["Retry-After"] == "5" and r.json()["code"] == "SYSTEM_BUSY"
        streams.pop().close()  # a closed stream frees its place
        deadline = time.monotonic() + 10
        while (r := requests.get(server.url + "/cluster/watch", timeout=10, stream=True)).status_code == 503:
            assert time.monotonic() < deadline, "a closed stream's place was not freed"
            time.sleep(0.1)
        r.close()
    finally:
        for s in streams:
            s.close()


@pytest.mark.integration
def test_requests_the_server_hands_to_the_flask_app_answer_as_before(system, server):
    """The event loop takes route lookups and watches; the rest goes to the Flask app on threads."""
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    key = f"k/{uuid.uuid4().hex[:6]} ü"  # a slash and a non-ASCII character, percent-encoded in the path
    path = f"/kv/watchns/{requests.utils.quote(key, safe='')}"
    put = requests.put(server.url + path, json={"value": "v1"}, headers=auth, timeout=60)
    assert put.status_code == 200, put.text
    assert requests.get(server.url + path, timeout=10).json() == {"value": "v1"}  # the server that took it
    # the system's own HTTP server reads the same tables on its own refresh: equal once it served the write
    deadline = time.monotonic() + 10
    while (theirs := requests.get(system.url + path, timeout=10)).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert theirs.json() == {"value": "v1"}
    too_big = {"data": b'{"value": "' + b"x" * (2 << 20) + b'"}', "headers": {**auth, "Content-Type": "application/json"}}
    assert requests.put(server.url + path, timeout=60, **too_big).status_code == 413  # MAX_CONTENT_LENGTH: 1 MiB
    assert requests.put(server.url + path, json={"value": "v2"}, timeout=10).status_code == 401
    for ask in ("/cluster", "/topics/NoSuch/route", "/topics/TopicTest/route?zone=nowhere", "/nope"):
        ours, flask = requests.get(server.url + ask, timeout=10), requests.get(system.url + ask, timeout=10)
        assert (ours.status_code, ours.headers["content-type"]) == (flask.status_code, flask.headers["content-type"])
    head = requests.head(server.url + "/cluster", timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert requests.delete(server.url + path, headers=auth, timeout=60).status_code == 200
    assert requests.get(server.url + path, timeout=10).status_code == 404
