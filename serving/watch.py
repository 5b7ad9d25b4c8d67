"""Watch streams: `GET /topics/<t>/route/watch` and `GET /cluster/watch` as Server-Sent Events.

A watcher gets the answer `GET /topics/<t>/route` (or `GET /cluster`) would give, again each time
a newly served cut changes it, and nothing while it does not (but a comment every
`KEEPALIVE_S`, so proxies keep the stream). Each event names the cut it was read from (the SSE
`id:`, its snapshot id) and that cut's commit time; a client that comes back with
`Last-Event-ID: N` (or `?lastEventId=N`, as EventSource polyfills send it) gets, before going
live, the answers of the cuts after N that changed it, read from the history
(`SnapshotStore.historic`), so a restart of this process costs the client no change.

Nothing here waits per watcher: the process's one notifier (`snapshots.served.ServedCuts`) hands
every newly served cut to the event loop, where `WatchHub.served` computes each watched answer
once per cut (nothing at all when the cut changed only liveness, which no answer shows) and
writes the event to the watchers of the answers that changed. A watcher costs an open connection
and a few objects while nothing changes. Protocol-free: the HTTP server (`serving.asgi`) gives
each stream a `Responder`.

A resume reads only the `snapshots` rows after the client's id (`StoreHistory`, a filtered
read), once per (after, upto) for every watch resuming alike, and loads each cut among them that
may have changed an answer once for all the keys waiting meanwhile (`replay`).

Bounds: granian queues a stream's bytes without a bound and tells the app nothing of the client's
reading, so a stream is handed at most STREAM_BUDGET_BYTES (and lives at most STREAM_MAX_LIFE_S);
then the server ends it, first sending an id without an event that names the newest cut it
covered, and the client resumes from there with Last-Event-ID, losing nothing.

A served cut older than the last one is a restored warehouse (`WatchHub.reset`): every stream is
sent its answer in it, as at a fresh subscribe, and the ids go on from there.

An unknown topic is not an error: its watch streams the topic's absence (`"route": null`) and
then its route once one appears, as a client waiting for a topic to be created wants.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl

from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from schemas import tables as t
from schemas.fields import InvalidInput, validate_broker_topic
from serving.fastpath import cut_headers
from serving.params import parse_int
from snapshots.reader import SnapshotsTable
from snapshots.store import SnapshotStore

log = logging.getLogger(__name__)

TOPIC_PREFIX, TOPIC_SUFFIX = "/topics/", "/route/watch"
CLUSTER_PATH = "/cluster/watch"
KEEPALIVE_S = 20  # a comment at least this often (proxies close a stream idle for 30-60 s)
KEEPALIVE = b": keep-alive\n\n"
# A stream's first bytes: EventSource reconnects after a second (its default is about 3 s), and
# the server sends the response head with them rather than with the first event, which may be
# far off for a resumed watch.
OPENING = b"retry: 1000\n\n"
RESUME_HEADER = "last-event-id"
RESUME_PARAM = "lastEventId"
# Query parameters of the plain reads that mean nothing on a watch: refused rather than ignored,
# so `?zone=` is not taken for a filtered stream.
UNSUPPORTED_PARAMS = ("zone", "asOf", "snapshot")
# A resume replays at most this many cuts (a day of cuts at one a second); further back is 410.
MAX_REPLAY_CUTS = 100_000
REPLAY_KEEP_S = 10.0  # a replay's result is shared this long by watchers resuming from the same cut
# What one stream is handed before the server ends it (its first event whatever its size): what
# granian may hold for a client that stopped reading. A route event is a few KiB (thousands of
# changes); the cluster info of 20,000 brokers a few MiB.
STREAM_BUDGET_BYTES = 16 << 20
# A stream's life, at most: its client resumes from the cut it covered. Spread over its last
# quarter (`stream_life`), so the streams opened together at a restart do not end together.
STREAM_MAX_LIFE_S = 3600.0
# Live changes held back while a stream replays the history; one more, and the stream ends once
# the replay is written (its client resumes from there).
MAX_HELD = 1_000
RETRY_FULL_S, RETRY_NOT_READY_S = 5, 1  # Retry-After of a 503
# The tables an answer is built from: a cut whose versions of these equal the previous cut's
# (one that changed only broker_live, as heartbeats do) cannot change any watched answer.
ANSWER_TABLES = tuple(x for x in t.STATE_TABLES if x is not t.BROKER_LIVE)


@dataclass(frozen=True)
class WatchKey:
    """What a stream watches: a topic's route, or (topic None) the cluster info."""

    topic: str | None

    @property
    def event_name(self) -> str:
        return "route" if self.topic is not None else "cluster"

    @property
    def endpoint(self) -> str:
        """The request counter's endpoint label (in the manner of the Flask rules' names)."""
        return "watch.topic_route" if self.topic is not None else "watch.cluster"

    def answer(self, cut: Snapshot) -> bytes | None:
        """The encoded answer of the plain read in `cut` (None: the topic has no route)."""
        if self.topic is None:
            return route_reads.cluster_info_body(cut)
        return route_reads.route_body(cut, self.topic)

    def event(self, snapshot_id: int, commit_time: int | None, body: bytes | None) -> bytes:
        """One SSE event: `id:` the cut, `event:` route or cluster, `data:` one line of JSON,
        {"commitTime", "route" (null: no route) and "topic"} or {"cluster", "commitTime"}, with
        "snapshotId". Compact JSON holds no line break, so the data is one `data:` line."""
        value = b"null" if body is None else body
        when = b"null" if commit_time is None else str(commit_time).encode()
        sid = str(snapshot_id).encode()
        if self.topic is None:
            data = b'{"cluster":' + value + b',"commitTime":' + when + b',"snapshotId":' + sid + b"}"
        else:
            name = json.dumps(self.topic, ensure_ascii=False).encode()
            data = (b'{"commitTime":' + when + b',"route":' + value + b',"snapshotId":' + sid
                    + b',"topic":' + name + b"}")
        return b"id: " + sid + b"\nevent: " + self.event_name.encode() + b"\ndata: " + data + b"\n\n"


def watch_key(path: str) -> WatchKey | None:
    """The watch a request path asks for, None when it is not a watch path (a topic name holding
    a slash is not: no route takes one, as Flask routes none). Raises InvalidInput for a topic
    no broker could register (blank, too long, control characters)."""
    if path == CLUSTER_PATH:
        return WatchKey(None)
    if not (path.startswith(TOPIC_PREFIX) and path.endswith(TOPIC_SUFFIX)):
        return None
    topic = path[len(TOPIC_PREFIX):-len(TOPIC_SUFFIX)]
    if "/" in topic:
        return None
    return WatchKey(validate_broker_topic(topic))


def resume_point(header: str | None, query_string: str) -> int | None:
    """The cut a client resumes after: the Last-Event-ID header, else the lastEventId parameter
    (None: a new watch; an empty value is none, as EventSource sends it). InvalidInput for a
    value that is not a snapshot id, and for a parameter a watch does not take."""
    params = dict(parse_qsl(query_string, keep_blank_values=True))
    for name in UNSUPPORTED_PARAMS:
        if name in params:
            raise InvalidInput(f"a watch streams the served cuts and takes no {name!r}; resume with the "
                               f"Last-Event-ID header or the {RESUME_PARAM} parameter")
    given = header if header else params.get(RESUME_PARAM) or None
    if given is None:
        return None
    return parse_int(given.strip(), "Last-Event-ID")


def same_answers(before: dict[str, int], after: dict[str, int]) -> bool:
    """Whether two cuts' table versions guarantee every watched answer is the same in both."""
    return all(before.get(x.name) == after.get(x.name) for x in ANSWER_TABLES)


# ---------------------------------------------------------------- resuming from the history


class ResumeRefused(Exception):
    """A resume point this server cannot replay from; the answer's status, code and remark."""

    def __init__(self, status: int, code: str, remark: str) -> None:
        super().__init__(remark)
        self.status, self.code, self.remark = status, code, remark


def _gone(exc: LookupError) -> ResumeRefused:
    return ResumeRefused(410, "SNAPSHOT_GONE", f"{exc}; watch again without Last-Event-ID")


@dataclass(frozen=True)
class Change:
    """A cut that changed a watched answer."""

    snapshot_id: int
    commit_time: int | None
    body: bytes | None


@dataclass(frozen=True)
class Replayed:
    """The answer as of the resume point and, oldest first, the cuts after it up to the served
    one that changed it."""

    baseline: bytes | None
    changes: tuple[Change, ...]


class HistoryReads(Protocol):
    """What a resume reads of the history (blocking: Delta reads, on the hub's history thread)."""

    def rows(self, first: int, last: int, limit: int) -> list[dict[str, Any]] | None:
        """The `snapshots` rows with first <= snapshotId <= last, in id order; None when there
        are more than `limit` (then not read)."""

    def cut(self, snapshot_id: int) -> Snapshot:
        """The cut with that id; LookupError, with a remark, when the history no longer has it."""


# The columns of a `snapshots` row a resume reads: the cut, its time, and its tables' versions.
TIMELINE_COLUMNS = ("snapshotId", "commitTime", *(t.version_column(x) for x in t.CUT_TABLES))


class StoreHistory:
    """The served store's history (`SnapshotStore.historic` for cuts) and a filtered read of the
    `snapshots` table for rows (`SnapshotsTable.rows_between`: only the data files whose id range
    meets the asked one are opened, its handle kept and brought up to date per read)."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self._snapshots = SnapshotsTable(store.reader.warehouse)

    def rows(self, first: int, last: int, limit: int) -> list[dict[str, Any]] | None:
        return self._snapshots.rows_between(first, last, limit=limit, columns=TIMELINE_COLUMNS)

    def cut(self, snapshot_id: int) -> Snapshot:
        return self.store.historic(snapshot_id=snapshot_id)


@dataclass(frozen=True)
class Timeline:
    """What the history says of the cuts after a resume point up to the served one: those whose
    answer tables changed ((id, commit time), oldest first). Read once per (after, upto) and
    shared by every watch resuming alike, whatever it watches."""

    after: int
    upto: int
    changed: tuple[tuple[int, int | None], ...]


def _versions(row: Mapping[str, Any]) -> dict[str, int]:
    return {x.name: row[t.version_column(x)] for x in t.CUT_TABLES}


def read_timeline(history: HistoryReads, after: int, upto: int) -> Timeline:
    """The cuts after `after` up to `upto` that may have changed a watched answer (blocking).

    One filtered read of the `snapshots` rows from `after` on, their version columns compared
    (`same_answers`): a fleet's cuts are mostly heartbeats. Raises ResumeRefused: 404 when no
    cut `after` was ever committed, 410 when more than MAX_REPLAY_CUTS were committed since."""
    rows = history.rows(after, max(after, upto), MAX_REPLAY_CUTS + 1)
    if rows is None:
        raise ResumeRefused(410, "SNAPSHOT_GONE", f"snapshot {after} is more than {MAX_REPLAY_CUTS:,} cuts back; "
                                                  "watch again without Last-Event-ID")
    if not rows or rows[0]["snapshotId"] != after:
        raise ResumeRefused(404, "SNAPSHOT_NOT_FOUND", f"no snapshot {after} to resume from; watch again without "
                                                       "Last-Event-ID")
    versions, changed = _versions(rows[0]), []
    for row in rows[1:]:
        row_versions = _versions(row)
        if not same_answers(versions, row_versions):
            versions = row_versions
            changed.append((int(row["snapshotId"]), row["commitTime"]))
    return Timeline(after, upto, tuple(changed))


def replay(history: HistoryReads, keys: Iterable[WatchKey], timeline: Timeline) -> dict[WatchKey, Replayed]:
    """What clients of `keys` that saw cut `timeline.after` missed up to `timeline.upto`
    (blocking: cut loads). Each cut is loaded once for all the keys, so watchers of many topics
    resuming from one cut cost the loads of one. Raises ResumeRefused 410 when a cut is beyond
    the retained history (or vacuumed under the replay)."""
    try:
        base = history.cut(timeline.after)
        previous = {k: k.answer(base) for k in keys}
        baselines, changes = dict(previous), {k: list[Change]() for k in previous}
        for snapshot_id, commit_time in timeline.changed:
            cut = history.cut(snapshot_id)
            for k in previous:
                body = k.answer(cut)
                if body != previous[k]:
                    changes[k].append(Change(snapshot_id, commit_time, body))
                    previous[k] = body
    except LookupError as exc:
        raise _gone(exc) from None
    return {k: Replayed(baselines[k], tuple(changes[k])) for k in previous}


class _Batch:
    """The keys one replay computes: joined on the loop until the history thread takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[WatchKey] = set()
        self._taken = False
        self.result: asyncio.Future[dict[WatchKey, Replayed]] | None = None

    def join(self, key: WatchKey) -> bool:
        """Whether `key` will be in this batch's result (False: it has been taken already)."""
        with self._lock:
            if self._taken:
                return key in self._keys
            self._keys.add(key)
            return True

    def take(self) -> frozenset[WatchKey]:
        with self._lock:
            self._taken = True
            return frozenset(self._keys)


# ---------------------------------------------------------------- watchers and the hub


class Responder(Protocol):
    """One watch request as the HTTP server hands it over."""

    def refuse(self, status: int, code: str, remark: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Answer with a JSON error instead of a stream."""

    def open(self) -> Callable[[bytes], Any]:
        """Start the 200 event stream; returns the function that writes bytes to it (its result
        need not be awaited: it raises, or fails, once the client has gone)."""

    def disconnected(self) -> Awaitable[Any]:
        """Resolves when the client has gone."""


_UNSENT = object()  # a watcher's last answer before its first event


def covered_marker(snapshot_id: int) -> bytes:
    """An SSE message with an id and no data: it dispatches no event, but sets the client's last
    event id (the HTML standard's "dispatch the event", step 1), so it resumes from there."""
    return b"id: " + str(snapshot_id).encode() + b"\n\n"


class Watcher:
    """One open stream: the answer it last sent, the newest cut it has covered, and, while it
    replays the history, the live changes held back until the replay is written. What is written
    to it is counted against its budget (STREAM_BUDGET_BYTES): granian queues a stream's bytes
    without a bound and says nothing of the client's reading, so the budget is what bounds the
    bytes held for a client that stopped reading."""

    __slots__ = ("bucket", "budget", "by_server", "deadline", "dropped", "ended", "events", "floor", "held", "key",
                 "last", "overrun", "pending", "send", "sent")

    def __init__(self, key: WatchKey, bucket: int, ended: asyncio.Future[None], *, budget: int = 1 << 62,
                 deadline: float = float("inf"), held: int = 1 << 62) -> None:
        self.key, self.bucket, self.ended = key, bucket, ended
        self.budget, self.deadline, self.held = budget, deadline, held
        self.send: Callable[[bytes], Any] | None = None
        self.last: object = _UNSENT
        self.floor = -1  # cuts up to this id are covered by what was sent (or by the resume point)
        self.pending: list[tuple[Change, bytes | None, bool]] | None = []
        self.sent = self.events = 0  # bytes and events handed to the server
        self.dropped = False  # an event was not written (past the budget): the stream ends, nothing after is sent
        self.overrun = False  # a change was not held back (too many while replaying): the stream ends once live
        self.by_server = False  # ended by the server (budget, life, stop), not by the client going

    def offer(self, change: Change, event: bytes | None = None) -> None:
        """A served cut's answer: held back while replaying (at most `held` of them: one more
        and the stream ends once its replay is written), else written if it is news."""
        if self.pending is None:
            self.emit(change, event)
        elif len(self.pending) < self.held:
            self.pending.append((change, event, False))
        else:
            self.overrun = True

    def reset(self, change: Change, event: bytes | None = None) -> None:
        """The served cut went back (a restored warehouse): `change` is written whatever this
        stream sent before, its id the new high-water mark; what was held back is moot."""
        if self.pending is None:
            self.emit(change, event, force=True)
        else:
            self.pending, self.overrun = [(change, event, True)], False

    def emit(self, change: Change, event: bytes | None = None, force: bool = False) -> None:
        """Write `change` unless this stream covered its cut already or holds the same answer
        (`force`: whatever it holds)."""
        if self.dropped or (not force and (change.snapshot_id <= self.floor or
                                           (self.last is not _UNSENT and change.body == self.last))):
            return
        data = event if event is not None else self.key.event(change.snapshot_id, change.commit_time, change.body)
        if self.write(data, event=True):
            self.last, self.floor = change.body, change.snapshot_id
        else:
            self.dropped = True

    @property
    def was_reset(self) -> bool:
        """Whether the served cut went back while this stream replayed (`reset`)."""
        return self.pending is not None and bool(self.pending) and self.pending[0][2]

    def go_live(self) -> None:
        """Write what was held back during the replay; from now on, offers are written at once."""
        held, self.pending = self.pending or [], None
        for change, event, force in held:
            self.emit(change, event, force)
        if self.overrun:  # what came after the held changes was not kept: its client resumes from them
            self.dropped = True
            self.end(by_server=True)

    def write(self, data: bytes, event: bool = False) -> bool:
        """Hand `data` to the server, not waiting: granian queues it for the connection at once
        (and, once the client has gone, hands back a failed awaitable, which ends nothing here: the
        stream ends when its disconnection resolves). Past the budget the stream is ended instead
        (an event is always written to a stream that has had none, whatever its size). Whether
        it was handed over."""
        if self.send is None or self.ended.done():
            return False
        if self.sent + len(data) > self.budget and (self.events or not event):
            self.end(by_server=True)
            return False
        try:
            result = self.send(data)
        except Exception:  # the client has gone: granian refuses the write
            self.end()
            return False
        self.sent += len(data)
        self.events += event
        if isinstance(result, asyncio.Future):  # a server whose write is a future: its failure ends the stream
            result.add_done_callback(self._written)
        return True

    def _written(self, result: asyncio.Future[Any]) -> None:
        if result.cancelled() or result.exception() is not None:
            self.end()

    def end(self, by_server: bool = False) -> None:
        if not self.ended.done():
            self.by_server = by_server
            self.ended.set_result(None)


def stream_life(opened: int, longest: float) -> float:
    """How long stream number `opened` may stay open: between 3/4 of `longest` and `longest`,
    spread (golden-ratio steps), so streams opened together (a restart) do not end together."""
    return longest * (0.75 + 0.25 * ((opened * 0.6180339887) % 1.0))


@dataclass
class WatchHub:
    """Every open watch of one serving process, on its event loop: the served cut as the loop
    last saw it, each watched answer in that cut, and the watchers of each."""

    store: SnapshotStore
    max_watchers: int
    history: Executor  # where replays read Delta (one thread: the history reader is serialized anyway)
    reads: HistoryReads | None = None  # the history a resume reads: StoreHistory(store) unless given
    budget_bytes: int = STREAM_BUDGET_BYTES
    max_life_s: float = STREAM_MAX_LIFE_S
    max_held: int = MAX_HELD
    cut: Snapshot | None = None
    closing: bool = False
    _watchers: dict[WatchKey, set[Watcher]] = field(default_factory=dict)
    _answers: dict[WatchKey, bytes | None] = field(default_factory=dict)  # in `cut`
    _ahead: set[Watcher] = field(default_factory=set)  # resumed from a cut newer than `cut`
    _buckets: list[set[Watcher]] = field(default_factory=lambda: [set() for _ in range(KEEPALIVE_S)])
    _timelines: dict[tuple[int, int], asyncio.Future[Timeline]] = field(default_factory=dict)
    _batches: dict[tuple[int, int], _Batch] = field(default_factory=dict)  # the newest of each (after, upto)
    _replays: dict[tuple[WatchKey, int, int], asyncio.Future[Replayed]] = field(default_factory=dict)
    _opened: int = 0
    _keepalive: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        if self.reads is None:
            self.reads = StoreHistory(self.store)

    @property
    def open_streams(self) -> int:
        return sum(len(b) for b in self._buckets)

    def start(self) -> None:
        """On the loop: take the served cut, and send the keep-alive comments from now on."""
        self.served(self.store.current)
        if self._keepalive is None:
            self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())

    def served(self, cut: Snapshot) -> None:
        """A newly served cut (on the loop, from `snapshots.served.ServedCuts`): each watched
        answer it changed goes to that answer's watchers, the event built once per answer. A cut
        older than the last one is a restored warehouse: `reset`."""
        if cut.snapshot_id is None:
            return
        if self.cut is not None and self.cut.snapshot_id is not None:
            if cut.snapshot_id == self.cut.snapshot_id:
                return
            if cut.snapshot_id < self.cut.snapshot_id:
                self.reset(cut)
                return
        before, self.cut = self.cut, cut
        started = time.perf_counter()
        if before is None or before.snapshot_id is None or not same_answers(before.versions, cut.versions):
            self._send_changes(cut)
        for w in tuple(self._ahead):  # a client ahead of this server: its answer once the server has caught up
            if cut.snapshot_id >= w.floor:
                self._ahead.discard(w)
                if cut.snapshot_id > w.floor:
                    w.offer(Change(cut.snapshot_id, cut.commit_time, self._answer(w.key)))
        spent = time.perf_counter() - started
        if spent > 0.05:
            log.info("watch: cut %s reached %d stream(s) in %.0f ms", cut.snapshot_id, self.open_streams, spent * 1000)

    def _send_changes(self, cut: Snapshot) -> None:
        """Each watched answer `cut` changed, to that answer's watchers."""
        assert cut.snapshot_id is not None
        for key, watchers in self._watchers.items():
            try:
                body = key.answer(cut)
            except Exception:  # one answer that cannot be built leaves the others' streams alone
                log.exception("watch: the answer of %s in cut %s", key, cut.snapshot_id)
                continue
            if key in self._answers and self._answers[key] == body:
                continue
            self._answers[key] = body
            change = Change(cut.snapshot_id, cut.commit_time, body)
            event = key.event(cut.snapshot_id, cut.commit_time, body)
            for w in tuple(watchers):
                w.offer(change, event)

    def reset(self, cut: Snapshot) -> None:
        """The served cut's id went back (a warehouse restored to an earlier version): the ids
        this hub saw are no longer the history's, and newer cuts will take them again. The new cut
        becomes the high-water mark and every stream is sent its answer in it, as at a fresh
        subscribe, whatever it sent before (its client resumes from that id from now on); the
        replays read before are dropped."""
        assert self.cut is not None and cut.snapshot_id is not None
        log.warning("watch: served cut %s is older than cut %s (a restored warehouse): every stream is sent its "
                    "answer in it again", cut.snapshot_id, self.cut.snapshot_id)
        self.cut = cut
        self._answers.clear()
        self._timelines.clear()
        self._batches.clear()
        self._replays.clear()
        self._ahead.clear()
        for key, watchers in self._watchers.items():
            try:
                body = self._answer(key)
            except Exception:
                log.exception("watch: the answer of %s in cut %s", key, cut.snapshot_id)
                continue
            change = Change(cut.snapshot_id, cut.commit_time, body)
            event = key.event(cut.snapshot_id, cut.commit_time, body)
            for w in tuple(watchers):
                w.reset(change, event)

    def _answer(self, key: WatchKey) -> bytes | None:
        """`key`'s answer in the loop's cut, built on its first watcher."""
        if key not in self._answers:
            assert self.cut is not None
            self._answers[key] = key.answer(self.cut)
        return self._answers[key]

    def cut_headers(self) -> list[tuple[str, str]]:
        """The headers every answer carries (`serving.fastpath.cut_headers`), of the loop's cut."""
        return [] if self.cut is None else cut_headers(self.cut, self.store)

    def refuse(self, responder: Responder, status: int, code: str, remark: str,
               headers: Iterable[tuple[str, str]] = ()) -> int:
        """Answer `status` instead of a stream, with the served cut's headers as every answer."""
        responder.refuse(status, code, remark, [*self.cut_headers(), *headers])
        return status

    async def request(self, key: WatchKey, method: str, last_event_id: str | None, query_string: str,
                      responder: Responder) -> int:
        """One watch request as it came (its method, Last-Event-ID header and query string), to
        its end: a refusal of the request itself carries the served cut's headers too."""
        if method != "GET":
            return self.refuse(responder, 405, "REQUEST_CODE_NOT_SUPPORTED", f"a watch is read with GET, not {method}",
                               [("allow", "GET")])
        try:
            resume = resume_point(last_event_id, query_string)
        except InvalidInput as exc:
            return self.refuse(responder, 400, "INVALID_PARAMETER", str(exc))
        return await self.serve(key, resume, responder)

    def _refused(self, resume: int | None, responder: Responder) -> int | None:
        """The 503 a new stream gets now, if any (answered)."""
        if self.closing:
            return self.refuse(responder, 503, "SYSTEM_BUSY", "the server is stopping; watch another replica or come "
                               "back", [("Retry-After", str(RETRY_NOT_READY_S))])
        if self.open_streams >= self.max_watchers:
            return self.refuse(responder, 503, "SYSTEM_BUSY", f"this server holds its most watch streams "
                               f"({self.max_watchers}, NAMESRV_HTTP_MAX_WATCHERS); come back later or watch another "
                               "replica", [("Retry-After", str(RETRY_FULL_S))])
        if resume is not None and (self.cut is None or self.cut.snapshot_id is None):
            return self.refuse(responder, 503, "SYSTEM_BUSY", "no cut is served yet to resume from",
                               [("Retry-After", str(RETRY_NOT_READY_S))])
        return None

    async def serve(self, key: WatchKey, resume: int | None, responder: Responder) -> int:
        """One watch request, to its end; returns the status answered (200: a stream was opened)."""
        refused = self._refused(resume, responder)
        if refused is not None:
            return refused
        served = self.cut
        loop = asyncio.get_running_loop()
        self._opened += 1
        w = Watcher(key, self._opened % KEEPALIVE_S, loop.create_future(), budget=self.budget_bytes,
                    deadline=time.monotonic() + stream_life(self._opened, self.max_life_s), held=self.max_held)
        self._add(w)
        gone: asyncio.Future[Any] | None = None
        try:
            replayed = None
            if resume is not None:
                assert served is not None
                try:
                    replayed = await self._replay(key, resume, served)
                except ResumeRefused as exc:
                    return self.refuse(responder, exc.status, exc.code, exc.remark)
                except Exception as exc:  # the history unreadable now (a store outage): try again later
                    log.warning("watch: replaying %s after cut %d failed: %s", key, resume, exc)
                    return self.refuse(responder, 503, "SYSTEM_BUSY", f"the history could not be read to resume "
                                       f"from: {type(exc).__name__}", [("Retry-After", str(RETRY_FULL_S))])
            w.send = responder.open()
            w.write(OPENING)
            gone = asyncio.ensure_future(responder.disconnected())
            gone.add_done_callback(lambda _: w.end())
            self._first_events(w, resume, replayed)
            await w.ended
            if w.by_server:
                self._mark_covered(w)
            return 200
        finally:
            self._remove(w)
            if gone is not None and not gone.done():
                gone.cancel()

    def _first_events(self, w: Watcher, resume: int | None, replayed: Replayed | None) -> None:
        """What an opened stream is sent before it goes live: the served answer (a new watch), or
        the replay (a resume), then what was held back meanwhile."""
        if replayed is None:
            if self.cut is not None and self.cut.snapshot_id is not None:
                w.emit(Change(self.cut.snapshot_id, self.cut.commit_time, self._answer(w.key)))
        elif not w.was_reset:  # else the served cut went back during the replay: what it read is moot
            assert resume is not None
            w.last, w.floor = replayed.baseline, resume
            for change in replayed.changes:
                w.emit(change)
        w.go_live()
        if self.cut is not None and self.cut.snapshot_id is not None and w.floor > self.cut.snapshot_id:
            self._ahead.add(w)  # this client saw a cut this server has not served yet
        if self.closing:
            w.end(by_server=True)

    def _mark_covered(self, w: Watcher) -> None:
        """Before the server ends a stream: the newest cut it covered, as an id without an event,
        so its client resumes from there (and the resume has next to nothing to read)."""
        covered = w.floor
        if not w.dropped and w.pending is None and self.cut is not None and self.cut.snapshot_id is not None:
            covered = max(covered, self.cut.snapshot_id)  # a live stream was offered every cut up to the loop's
        if covered > w.floor and w.send is not None:
            try:
                w.send(covered_marker(covered))
            except Exception:  # the client has gone meanwhile
                pass

    async def _replay(self, key: WatchKey, after: int, served: Snapshot) -> Replayed:
        """What a client of `key` that saw cut `after` missed up to the `served` cut: the cuts
        that may have changed an answer are read once per (after, upto) for every key; the cuts
        among them loaded once per batch of keys waiting meanwhile; each key's result kept
        REPLAY_KEEP_S for the watchers resuming alike."""
        upto = served.snapshot_id
        assert upto is not None
        if after == upto:  # nothing to read: the client holds the served cut's answer
            return Replayed(self._answer(key) if served is self.cut else key.answer(served), ())
        job = (key, after, upto)
        running = self._replays.get(job)
        if running is None:
            running = self._keep(self._replays, job, asyncio.ensure_future(self._replay_new(key, after, served)))
        return await asyncio.shield(running)

    async def _replay_new(self, key: WatchKey, after: int, served: Snapshot) -> Replayed:
        loop = asyncio.get_running_loop()
        upto = served.snapshot_id
        assert upto is not None and self.reads is not None
        reads = self.reads
        span = (after, upto)
        timeline = self._timelines.get(span)
        if timeline is None:
            timeline = self._keep(self._timelines, span,
                                  loop.run_in_executor(self.history, read_timeline, reads, after, upto))
        line = await asyncio.shield(timeline)
        if not line.changed and after <= upto:  # no answer table moved since: the client holds the served answer
            return Replayed(self._answer(key) if served is self.cut else key.answer(served), ())
        batch = self._batches.get(span)
        if batch is None or not batch.join(key):
            batch = self._batches[span] = _Batch()
            batch.join(key)
        if batch.result is None:
            job = batch  # the batch's keys are taken when the history thread starts on it
            batch.result = loop.run_in_executor(self.history, lambda: replay(reads, job.take(), line))
            batch.result.add_done_callback(lambda _: self._batches.pop(span, None) if self._batches.get(span) is job
                                           else None)
        return (await asyncio.shield(batch.result))[key]

    def _keep(self, cache: dict[Any, Any], job: Any, running: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """`running` shared under `job` in `cache`: for REPLAY_KEEP_S once done, dropped at once if
        it failed (so a retry reads again)."""
        cache[job] = running
        loop = asyncio.get_running_loop()

        def drop(_: Any = None) -> None:
            if cache.get(job) is running:
                del cache[job]

        def done(_: asyncio.Future[Any]) -> None:
            if running.cancelled() or running.exception() is not None:
                drop()
            else:
                loop.call_later(REPLAY_KEEP_S, drop)
        running.add_done_callback(done)
        return running

    def _add(self, w: Watcher) -> None:
        self._watchers.setdefault(w.key, set()).add(w)
        self._buckets[w.bucket].add(w)

    def _remove(self, w: Watcher) -> None:
        self._buckets[w.bucket].discard(w)
        self._ahead.discard(w)
        watchers = self._watchers.get(w.key)
        if watchers is not None:
            watchers.discard(w)
            if not watchers:
                del self._watchers[w.key]
                self._answers.pop(w.key, None)

    def tick(self, tick: int, now: float) -> None:
        """One second's share of the streams (bucket `tick`): a keep-alive comment to each live
        one, and the end of those past their life (their clients resume from the cut they saw)."""
        for w in tuple(self._buckets[tick % KEEPALIVE_S]):
            if w.pending is not None:
                continue
            if now >= w.deadline:
                w.end(by_server=True)
            else:
                w.write(KEEPALIVE)

    async def _keep_alive(self) -> None:
        """A comment to every stream once per KEEPALIVE_S, a 1/KEEPALIVE_S share of them each
        second (never all at once); a write the server refuses ends that stream."""
        tick = 0
        while True:
            await asyncio.sleep(1.0)
            tick += 1
            self.tick(tick, time.monotonic())

    def close(self) -> None:
        """End every stream (the server is stopping: an open stream would hold its shutdown) and
        refuse new ones."""
        self.closing = True
        for bucket in self._buckets:
            for w in tuple(bucket):
                w.end(by_server=True)
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
