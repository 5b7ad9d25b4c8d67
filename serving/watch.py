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

An unknown topic is not an error: its watch streams the topic's absence (`"route": null`) and
then its route once one appears, as a client waiting for a topic to be created wants.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl

from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from schemas import tables as t
from schemas.fields import InvalidInput, validate_broker_topic
from serving.params import parse_int
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


def replay(store: SnapshotStore, key: WatchKey, after: int, upto: int) -> Replayed:
    """What a client that saw cut `after` missed up to cut `upto` (blocking: Delta reads).

    Only the cuts whose answer tables changed are loaded (`same_answers`): a fleet's cuts are
    mostly heartbeats. Raises ResumeRefused: 404 when no cut `after` was ever committed, 410 when
    it is beyond the retained history or more than MAX_REPLAY_CUTS back."""
    reader = store.reader_for_history()
    if reader.row_at(snapshot_id=after) is None:
        raise ResumeRefused(404, "SNAPSHOT_NOT_FOUND", f"no snapshot {after} to resume from; watch again without "
                                                       "Last-Event-ID")
    try:
        base = store.historic(snapshot_id=after)
    except LookupError as exc:
        raise ResumeRefused(410, "SNAPSHOT_GONE", f"{exc}; watch again without Last-Event-ID") from None
    rows: list[dict[str, Any]] = []
    if upto > after:
        listed, _ = reader.list_rows(limit=MAX_REPLAY_CUTS + 1, before=upto + 1)
        rows = sorted((r for r in listed if r["snapshotId"] > after), key=lambda r: int(r["snapshotId"]))
        if len(listed) > MAX_REPLAY_CUTS and len(rows) == len(listed):
            raise ResumeRefused(410, "SNAPSHOT_GONE", f"snapshot {after} is more than {MAX_REPLAY_CUTS:,} cuts back; "
                                                      "watch again without Last-Event-ID")
    previous, versions = key.answer(base), base.versions
    changes = []
    for row in rows:
        row_versions = {x.name: row[t.version_column(x)] for x in t.CUT_TABLES}
        if same_answers(versions, row_versions):
            continue
        versions = row_versions
        try:
            body = key.answer(store.historic(snapshot_id=row["snapshotId"]))
        except LookupError as exc:  # vacuumed under the replay
            raise ResumeRefused(410, "SNAPSHOT_GONE", f"{exc}; watch again without Last-Event-ID") from None
        if body != previous:
            changes.append(Change(row["snapshotId"], row["commitTime"], body))
            previous = body
    return Replayed(key.answer(base), tuple(changes))


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


class Watcher:
    """One open stream: the answer it last sent, the newest cut it has covered, and, while it
    replays the history, the live changes held back until the replay is written."""

    __slots__ = ("bucket", "ended", "floor", "key", "last", "pending", "send")

    def __init__(self, key: WatchKey, bucket: int, ended: asyncio.Future[None]) -> None:
        self.key, self.bucket, self.ended = key, bucket, ended
        self.send: Callable[[bytes], Any] | None = None
        self.last: object = _UNSENT
        self.floor = -1  # cuts up to this id are covered by what was sent (or by the resume point)
        self.pending: list[tuple[Change, bytes | None]] | None = []

    def offer(self, change: Change, event: bytes | None = None) -> None:
        """A served cut's answer: held back while replaying, else written if it is news."""
        if self.pending is not None:
            self.pending.append((change, event))
        else:
            self.emit(change, event)

    def emit(self, change: Change, event: bytes | None = None) -> None:
        """Write `change` unless this stream covered its cut already or holds the same answer."""
        if change.snapshot_id <= self.floor or (self.last is not _UNSENT and change.body == self.last):
            return
        self.last, self.floor = change.body, change.snapshot_id
        self.write(event if event is not None else self.key.event(change.snapshot_id, change.commit_time,
                                                                  change.body))

    def go_live(self) -> None:
        """Write what was held back during the replay; from now on, offers are written at once."""
        held, self.pending = self.pending or [], None
        for change, event in held:
            self.emit(change, event)

    def write(self, data: bytes) -> None:
        """Hand `data` to the server, not waiting: granian queues it for the connection at once
        (and, once the client has gone, hands back a failed awaitable, which ends nothing here: the
        stream ends when its disconnection resolves)."""
        if self.send is None or self.ended.done():
            return
        try:
            result = self.send(data)
        except Exception:  # the client has gone: granian refuses the write
            self.end()
            return
        if isinstance(result, asyncio.Future):  # a server whose write is a future: its failure ends the stream
            result.add_done_callback(self._written)

    def _written(self, result: asyncio.Future[Any]) -> None:
        if result.cancelled() or result.exception() is not None:
            self.end()

    def end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


@dataclass
class WatchHub:
    """Every open watch of one serving process, on its event loop: the served cut as the loop
    last saw it, each watched answer in that cut, and the watchers of each."""

    store: SnapshotStore
    max_watchers: int
    history: Executor  # where replays read Delta (one thread: the history reader is serialized anyway)
    replayer: Callable[[SnapshotStore, WatchKey, int, int], Replayed] = replay
    cut: Snapshot | None = None
    closing: bool = False
    _watchers: dict[WatchKey, set[Watcher]] = field(default_factory=dict)
    _answers: dict[WatchKey, bytes | None] = field(default_factory=dict)  # in `cut`
    _ahead: set[Watcher] = field(default_factory=set)  # resumed from a cut newer than `cut`
    _buckets: list[set[Watcher]] = field(default_factory=lambda: [set() for _ in range(KEEPALIVE_S)])
    _replays: dict[tuple[WatchKey, int, int], asyncio.Future[Replayed]] = field(default_factory=dict)
    _opened: int = 0
    _keepalive: asyncio.Task[None] | None = None

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
        answer it changed goes to that answer's watchers, the event built once per answer."""
        if cut.snapshot_id is None or (self.cut is not None and self.cut.snapshot_id is not None
                                       and cut.snapshot_id <= self.cut.snapshot_id):
            return
        before, self.cut = self.cut, cut
        started = time.perf_counter()
        if before is None or before.snapshot_id is None or not same_answers(before.versions, cut.versions):
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
        for w in tuple(self._ahead):  # a client ahead of this server: its answer once the server has caught up
            if cut.snapshot_id >= w.floor:
                self._ahead.discard(w)
                if cut.snapshot_id > w.floor:
                    w.offer(Change(cut.snapshot_id, cut.commit_time, self._answer(w.key)))
        spent = time.perf_counter() - started
        if spent > 0.05:
            log.info("watch: cut %s reached %d stream(s) in %.0f ms", cut.snapshot_id, self.open_streams, spent * 1000)

    def _answer(self, key: WatchKey) -> bytes | None:
        """`key`'s answer in the loop's cut, built on its first watcher."""
        if key not in self._answers:
            assert self.cut is not None
            self._answers[key] = key.answer(self.cut)
        return self._answers[key]

    async def serve(self, key: WatchKey, resume: int | None, responder: Responder) -> int:
        """One watch request, to its end; returns the status answered (200: a stream was opened)."""
        if self.closing:
            responder.refuse(503, "SYSTEM_BUSY", "the server is stopping; watch another replica or come back",
                             [("Retry-After", str(RETRY_NOT_READY_S))])
            return 503
        if self.open_streams >= self.max_watchers:
            responder.refuse(503, "SYSTEM_BUSY", f"this server holds its most watch streams ({self.max_watchers}, "
                             "NAMESRV_HTTP_MAX_WATCHERS); come back later or watch another replica",
                             [("Retry-After", str(RETRY_FULL_S))])
            return 503
        served = self.cut
        if resume is not None and (served is None or served.snapshot_id is None):
            responder.refuse(503, "SYSTEM_BUSY", "no cut is served yet to resume from",
                             [("Retry-After", str(RETRY_NOT_READY_S))])
            return 503
        loop = asyncio.get_running_loop()
        self._opened += 1
        w = Watcher(key, self._opened % KEEPALIVE_S, loop.create_future())
        self._add(w)
        gone: asyncio.Future[Any] | None = None
        try:
            replayed = None
            if resume is not None:
                assert served is not None and served.snapshot_id is not None
                try:
                    replayed = await self._replay(key, resume, served.snapshot_id)
                except ResumeRefused as exc:
                    responder.refuse(exc.status, exc.code, exc.remark)
                    return exc.status
                except Exception as exc:  # the history unreadable now (a store outage): try again later
                    log.warning("watch: replaying %s after cut %d failed: %s", key, resume, exc)
                    responder.refuse(503, "SYSTEM_BUSY", f"the history could not be read to resume from: "
                                     f"{type(exc).__name__}", [("Retry-After", str(RETRY_FULL_S))])
                    return 503
            w.send = responder.open()
            w.write(OPENING)
            gone = asyncio.ensure_future(responder.disconnected())
            gone.add_done_callback(lambda _: w.end())
            if replayed is None:
                if self.cut is not None and self.cut.snapshot_id is not None:
                    w.emit(Change(self.cut.snapshot_id, self.cut.commit_time, self._answer(key)))
            else:
                assert resume is not None
                w.last, w.floor = replayed.baseline, resume
                for change in replayed.changes:
                    w.emit(change)
            w.go_live()
            if self.cut is not None and self.cut.snapshot_id is not None and w.floor > self.cut.snapshot_id:
                self._ahead.add(w)  # this client saw a cut this server has not served yet
            if self.closing:
                w.end()
            await w.ended
            return 200
        finally:
            self._remove(w)
            if gone is not None and not gone.done():
                gone.cancel()

    async def _replay(self, key: WatchKey, after: int, upto: int) -> Replayed:
        """`replay` on the history thread, shared by the watchers resuming alike meanwhile."""
        loop = asyncio.get_running_loop()
        job = (key, after, upto)
        running = self._replays.get(job)
        if running is None:
            running = loop.run_in_executor(self.history, self.replayer, self.store, key, after, upto)
            self._replays[job] = running
            running.add_done_callback(lambda _: loop.call_later(REPLAY_KEEP_S, self._replays.pop, job, None))
        return await asyncio.shield(running)

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

    async def _keep_alive(self) -> None:
        """A comment to every stream once per KEEPALIVE_S, a 1/KEEPALIVE_S share of them each
        second (never all at once); a write the server refuses ends that stream."""
        tick = 0
        while True:
            await asyncio.sleep(1.0)
            tick += 1
            for w in tuple(self._buckets[tick % KEEPALIVE_S]):
                if w.pending is None:
                    w.write(KEEPALIVE)

    def close(self) -> None:
        """End every stream (the server is stopping: an open stream would hold its shutdown) and
        refuse new ones."""
        self.closing = True
        for bucket in self._buckets:
            for w in tuple(bucket):
                w.end()
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
