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
import http.client
import json
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from admin.cli import sse_events
from routeinfo.snapshot import Snapshot
from schemas import tables as t
from schemas.fields import InvalidInput
from serving.__main__ import BACKLOG, SPARE_FILES, watch_bound
from serving.watch import (
    KEEPALIVE,
    OPENING,
    Change,
    Replayed,
    WatchHub,
    WatchKey,
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
        self.headers: dict[str, str] = {}
        self.written: list[bytes] = []
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def refuse(self, status, code, remark, headers=()):
        self.status, self.headers = status, dict(headers)

    def open(self):
        self.status = 200
        return self.written.append

    def disconnected(self):
        return self.gone

    def events(self) -> list[tuple[int, Any]]:
        """(cut, route or cluster) of each event written."""
        parsed = sse_events(line.decode() for line in b"".join(self.written).split(b"\n"))
        return [(int(e["id"]), (lambda d: d.get("route", d.get("cluster")))(json.loads(e["data"]))) for e in parsed]


def addrs(route: dict[str, Any] | None) -> dict[str, str] | None:
    return None if route is None else {k: v for b in route["brokerDatas"] for k, v in b["brokerAddrs"].items()}


MASTER = reg("wb", 0, "10.9.0.1:10911", tps=topics("WT", "Base"))
SLAVE = reg("wb", 1, "10.9.0.2:10911", tps=topics("WT", "Base"))


def test_a_cut_reaches_exactly_the_watchers_whose_answer_it_changed():
    async def scenario() -> None:
        hub = WatchHub(None, max_watchers=10, history=ThreadPoolExecutor(1))  # type: ignore[arg-type]
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
        hub.served(served_cut(3, MASTER))  # an older cut (a replica behind): ignored
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
    def replayer(store, key, after, upto):
        raise OSError("the store is unreachable")

    async def scenario() -> None:
        hub = WatchHub(None, max_watchers=10, history=ThreadPoolExecutor(1), replayer=replayer)  # type: ignore[arg-type]
        hub.served(served_cut(6, MASTER))
        stream = FakeStream()
        assert await hub.serve(WatchKey("WT"), 5, stream) == 503
        assert stream.status == 503 and "Retry-After" in stream.headers and hub.open_streams == 0
        hub.close()

    asyncio.run(scenario())


def test_a_resumed_watcher_gets_the_replay_then_the_cuts_served_meanwhile_without_a_gap_or_a_repeat():
    release = threading.Event()
    at = {i: served_cut(i, *evs) for i, evs in ((5, (MASTER,)), (6, (MASTER, SLAVE)), (7, (SLAVE,)))}

    history = {**at, 9: served_cut(9, MASTER)}  # 9: served on another replica first

    def replayer(store, key, after, upto):  # `serving.watch.replay` over `history`, once `release` is set
        release.wait(10)
        changes, before = [], key.answer(history[after])
        for i in sorted(i for i in history if after < i <= upto):
            if key.answer(history[i]) != before:
                before = key.answer(history[i])
                changes.append(Change(i, 1000 + i, before))
        return Replayed(key.answer(history[after]), tuple(changes))

    async def scenario() -> None:
        hub = WatchHub(None, max_watchers=10, history=ThreadPoolExecutor(1), replayer=replayer)  # type: ignore[arg-type]
        hub.served(at[6])
        stream = FakeStream()
        task = asyncio.create_task(hub.serve(WatchKey("WT"), 5, stream))
        await asyncio.sleep(0.05)
        hub.served(at[7])  # served while the replay reads the history: held back, written after it
        hub.served(served_cut(8, liveness_of=at[7]))
        assert stream.status is None
        release.set()
        while not stream.written[1:]:
            await asyncio.sleep(0.01)
        assert [(i, addrs(r)) for i, r in stream.events()] == [(6, {"0": "10.9.0.1:10911", "1": "10.9.0.2:10911"}),
                                                                (7, {"1": "10.9.0.2:10911"})]
        ahead = FakeStream()  # a client that saw cut 9 on another replica: nothing until this one passes it
        ahead_task = asyncio.create_task(hub.serve(WatchKey("WT"), 9, ahead))
        waited = 0
        while ahead.status is None and waited < 1000:  # its replay runs on the history thread; 10 s at most
            await asyncio.sleep(0.01)
            waited += 1
        assert ahead.status == 200
        hub.served(history[9])
        hub.served(served_cut(10, liveness_of=at[7]))
        assert [i for i, _ in ahead.events()] == [10]  # its answer as of cut 9 was the master's (the replayer's)
        hub.close()
        await asyncio.gather(task, ahead_task)

    asyncio.run(scenario())


def test_one_stream_more_than_the_bound_or_while_stopping_is_503_with_retry_after():
    async def scenario() -> None:
        hub = WatchHub(None, max_watchers=2, history=ThreadPoolExecutor(1))  # type: ignore[arg-type]
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
    assert requests.get(server.url + path, timeout=10).json() == requests.get(system.url + path, timeout=10).json() \
        == {"value": "v1"}
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
