"""The remoting front: RocketMQ's TCP protocol in front of the served snapshot and the event log.

One asyncio loop holds every connection. Reads are answered inline from the served cut
(`remoting.replies`), but for large answers (cluster infos), which wait in a queue written a
megabyte per turn of the loop so that no storm of them holds a route lookup back. Writes are
published to Kafka in the order they arrived (`remoting.publish`) and answered once Kafka
acknowledged them (and, for admin writes and registrations that change what a lookup would see,
once the served cut has them, within a bound: `remoting.served`). Liveness signals are answered
at once and wait in the coalescing window (`liveness.coalescing`). This module is the
dispatcher: it frames requests, picks the handler by request code, keeps which connection
registered which broker, and answers.

The front also does what only the holder of a broker's TCP connection can do, as RocketMQ's
BrokerHousekeepingService does: when a connection that registered a broker closes, the broker is
unregistered (unless a newer registration of that address arrived on another connection), so a
crashed broker leaves routes within seconds instead of after its heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import functools
import itertools
import logging
import socket
import struct
import termios
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from conf import Config
from eventlog.publisher import EventPublisher
from liveness.coalescing import Coalescer
from remoting import acl, bodies, codes, replies, requests
from remoting.protocol import MAX_FRAME_BYTES, Asked, Command, FrameError, decode, encode_response_parts, next_frame
from remoting.publish import PublishFailed, PublishPipeline
from remoting.replies import Reply, error, ok
from remoting.served import ServedWaiter
from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from routeinfo.state import topic_keys_digest
from schemas import events as ev
from schemas.fields import MASTER_ID, InvalidInput
from schemas.metrics import RemotingMetrics, remoting_role, write_metrics_file
from snapshots.freshness import LogMark, includes, reset_since

log = logging.getLogger("namesrv.remoting")
NOT_READY = "name server not ready"
METRICS_WRITE_S = 1.0
# Writes started per turn of the event loop, at least. A write's decoding and checks run in its
# first step, so this bounds how long a read waits behind a storm of them (at about a millisecond
# each for a 100-topic registration, a few tens of milliseconds).
WRITES_PER_TURN = 32
# ... and more in a turn whose reads took long: the writes' first steps may take as long as the
# last turn's reads did (`WriteShare`). A fixed count per turn starved the writes whenever the
# reads made the turns long: 100,000 brokers on 15,000 connections, their refused registrations
# sent again together every 30 s and 3,333 lookups a second, made turns of about 1.5 s, and 32
# writes a turn published 22 registrations a second while the job idled (by hand, 2026-11-29).
WRITES_SHARE = 1.0
# Reads a turn of the loop runs, at most: past it, a connection's bytes wait (read, not yet
# served) for the next turn (`ReadTurns`). The loop serves every socket with bytes in one turn;
# 100,000 brokers' registrations refused and sent again together made turns of 3-13 s, in which no
# timer ran, no write was started and no cut's waiter answered (by hand, 2026-11-29).
READ_TURN_S = 0.02
# The writers' (brokers', admins') own share of a turn whose reads the clients spent: a quarter of
# READ_TURN_S (`ReadTurns._next_turn`).
WRITERS_SHARE = 0.25
# Bytes read past their turn and not yet served, at most about: past it every connection stops
# being read, its bytes waiting in the kernel's socket buffers as they did before turns were
# bounded, until the front has served half of them (`ReadTurns`). Unbounded, a front behind its
# fleet held a read of every connection: 500 MB at 100,000 brokers on 15,000 connections.
HELD_BYTES = 64 * 1024 * 1024
# A read this small (a route lookup, a heartbeat) is served when it arrives, past the turn's bound
# too, and its connection is never stalled: the bound is for the connections that send much
# (registrations, pipelines). Deferred and stalled alike, the clients' lookups in a 10,000 x 100
# registration wave waited behind 190 MB of registrations: p50 3.2 s, 403 of 1,500 unanswered,
# against 0.25 s before the bound (the bench at f499516).
SMALL_READ_BYTES = 4096
# A read of a socket takes at most this many bytes (what uvloop read of a socket at a time before
# the front chose its reads' size), and at most SMALL_READ_BYTES while the front is stalled or of a
# connection it paused (`Connection.get_buffer`).
READ_BYTES = 64 * 1024
# Writes taken and not yet answered, at most: RocketMQ's NameServer runs every request but route
# lookups on its defaultExecutor (NamesrvConfig: 16 threads, a queue of 10,000) and answers a
# request it cannot queue SYSTEM_BUSY at once, which a broker retries at its next period. Unbounded,
# a registration wave faster than the job (100,000 brokers: 3,333 a second against ~400) held every
# waiting registration's request and event in the front: 8 GiB within minutes.
WRITES_IN_FLIGHT = 16 + 10_000
BUSY = "[OVERLOAD]system busy, start flow control for a while"  # RocketMQ's remark, word for word
# A repeat names its full registration for at most this long (and a quarter of the events topic's
# retention time, if shorter); then the registration is published whole again, so the body a
# repeat names is always in the log when the job needs it.
REPEAT_HORIZON_S = 3600.0
# An answer body this long is written as its own object (`Connection.answer`): below it, one write
# of header and body together costs less than two.
SHARED_BODY_BYTES = 64 * 1024
# Large answers (cluster infos, topic lists) are written at most this many bytes per turn of the
# event loop, after the turn's reads: at 10,000 brokers a cluster info is 1.2 MB, and their 106
# every 5 s is 2.4 GB/s to write. Written as they were read, they filled every turn, and a route
# lookup waited in its socket for seconds (by hand at 10,000 x 100: p50 1.2 s, 3,960 of 14,300
# unanswered within 3 s, the front's loop at 97 %).
BULK_BYTES_PER_TURN = 1024 * 1024
# A large answer still waiting this long is answered SYSTEM_BUSY instead: its asker gave up at 3 s
# (a broker's getBrokerClusterInfo, a client's or mqadmin's default timeout) and would drop the
# body it waited for, so writing it is only cost.
BULK_WAIT_S = 3.0
# How a repeated registration goes out (`Front._repeat_form`).
SHOWN, UNSERVED, WHOLE = "shown", "unserved", "whole"


@dataclass
class Registered:
    broker_name: str
    broker_id: int
    generation: int
    coords: list[tuple[int, int]]  # where the (full) registration is in the event log
    fingerprint: bytes = b""  # of the request (requests.fingerprint): its repeats are published small
    repeat: dict[str, Any] = field(default_factory=dict)  # the small event naming it (without a timestamp)
    published_at: float = 0.0  # monotonic: repeats name it for the front's repeat horizon (REPEAT_HORIZON_S)
    mark: LogMark | None = None  # where the job stood when it was published: a log reset since voids it


@dataclass
class Connection(asyncio.BufferedProtocol):
    front: Front
    ident: int
    peer: str = ""
    transport: asyncio.Transport | None = None
    last_active: float = 0.0
    registered: dict[tuple[str, str], Registered] = field(default_factory=dict)  # (cluster, addr) -> what
    _buf: bytearray = field(default_factory=bytearray)
    _held: bool = False  # the client is not reading its answers: its next requests wait in _buf
    _bulk_queued: bool = False  # a large answer of its waits in the front's queue: so do its next requests
    writing: int = 0  # its writes taken and not yet answered: its repeats wait behind them, in order
    _deferred: bool = False  # read after its turn's reads were spent: its bytes wait in _buf for the next
    _stalled: bool = False  # not read while the front holds too many bytes unserved (`ReadTurns`)
    counted: int = 0  # while deferred: the bytes of _buf ReadTurns counts as held
    held_as_reader: bool = False  # ... in the clients' lane (`ReadTurns`)
    light: bool = False  # its last read was small (SMALL_READ_BYTES) and all served: it is never stalled
    # it sent a write or a liveness signal (a broker's, an admin's): a client's connection, which
    # only reads, is never stalled, and is served ahead of these when deferred (`ReadTurns`)
    writer: bool = False
    closed: bool = False  # connection_lost has run: a registration published after it is undone

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport (asyncio's or uvloop's)
        self.front.metrics.connections_opened.inc()
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else ""
        self.last_active = time.monotonic()
        self.front.connections[self.ident] = self

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read of its socket goes: the front's one read buffer, of which
        `buffer_updated` copies what was read. While the front is stalled, the connections it
        still reads (light ones) are read SMALL_READ_BYTES at a time, so that one sending much
        holds at most that much before it is stalled too (read whole, each light connection's
        next read added up to 1.0 MB held of a 64 KB bound); so is a connection the front paused,
        which asyncio's own loop reads once more in the turn it was paused in."""
        reads = self.front.reads
        return reads.buffer(small=reads.stalling or self._unserved or self._stalled)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        reads = self.front.reads
        self._buf += reads.buffer()[:nbytes]
        if self._deferred:  # read after its deferral in the same turn (asyncio's loop): held with the rest
            reads.held_more(self, nbytes)
            return
        small = len(self._buf) < SMALL_READ_BYTES
        if not small and reads.spent():
            self.light = False
            self._defer()
            return
        self._serve_frames()
        # light: what it sent was small and is all served (the first segment of a large pipeline
        # is not taken for a small request)
        self.light = small and not self._buf
        if not self.light:
            reads.sends_much(self)

    def undefer(self) -> None:
        """Its turn came (`ReadTurns`): the bytes it holds are served, and it is read again
        (unless stalled)."""
        self._deferred = False
        self._resume()

    @property
    def waits_for_front(self) -> bool:
        """Bytes of its client wait for the front: read and not yet served (`ReadTurns`), or
        in the kernel's socket buffer while the front does not read it (behind, or its client not
        reading the answers). Netty reads those and counts them as activity; here they are
        activity too."""
        return self._deferred or _unread_bytes(self.transport) > 0

    @property
    def is_stalled(self) -> bool:
        return self._stalled

    @property
    def buffered(self) -> int:
        """Bytes read of it and not yet served."""
        return len(self._buf)

    def stall(self) -> None:
        self._stalled = True
        self._pause()

    def unstall(self) -> None:
        self._stalled = False
        self._resume()

    def _defer(self) -> None:
        self._deferred = True
        self._pause()
        self.front.reads.defer(self)

    def _serve_frames(self) -> None:
        """Dispatch the whole requests in the buffer, until the client stops reading answers or
        the turn's reads are spent (the rest waits for a later turn, `ReadTurns`)."""
        used, spent = 0, False
        reads = self.front.reads
        started = time.perf_counter()
        try:
            while not self._unserved:
                found = next_frame(self._buf, self.front.max_frame_bytes, used)
                if found is None:
                    break
                frame, size = found
                used += size
                cmd = decode(frame)
                if not cmd.is_response:  # a stray response has nobody waiting for it: ignored, as in Java
                    self.front.dispatch(self, cmd)
                if reads.spent(time.perf_counter() - started) and len(self._buf) - used >= SMALL_READ_BYTES:
                    spent = True
                    break
        except FrameError as exc:
            log.warning("closing %s: bad frame (%s)", self.peer, exc)
            self.close()
            return
        finally:
            reads.took(time.perf_counter() - started)
        if used:
            del self._buf[:used]
        if spent:
            self._defer()

    def answer(self, cmd: Command | Asked, reply: Reply) -> None:
        if cmd.oneway or self.transport is None or self.transport.is_closing():
            return
        self.last_active = time.monotonic()  # idle is neither read nor written, as Netty's IdleStateHandler(0, 0, 120)
        head, body = encode_response_parts(cmd.opaque, reply.code, remark=reply.remark, ext=reply.ext, body=reply.body)
        if len(body) < SHARED_BODY_BYTES:
            self.transport.write(head + body)
            return
        # A large body is the cut's, shared by every answer until the next cut: written as itself
        # (bytes, or a view of the shared cut file's mapping), the event loop holds a reference to
        # it while the client reads, not a copy per connection (10,000 brokers each waiting on a
        # 1.5 MB cluster info took the front to 12 GiB).
        self.transport.write(head)
        self.transport.write(body)

    def pause_writing(self) -> None:
        """A client that does not read its answers is not read, and the requests it already sent
        wait: answered all at once, a pipeline of large answers (10,000 cluster infos of 100,000
        brokers) was buffered whole, and the front's memory grew by gigabytes."""
        self._held = True
        self._pause()

    def resume_writing(self) -> None:
        self._held = False
        self._resume()

    def bulk_queued(self) -> None:
        """A large answer of this connection's is queued (`Front._write_bulk`): the requests it
        pipelined behind it wait, as they do while the client does not read, or a pipeline of
        cluster infos would all be queued and then buffered at once."""
        self._bulk_queued = True
        self._pause()

    def bulk_written(self) -> None:
        self._bulk_queued = False
        self._resume()

    def _pause(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    @property
    def _unserved(self) -> bool:
        """A reason its requests wait unserved: its client not reading, a large answer of its
        queued, or its turn deferred."""
        return self._held or self._bulk_queued or self._deferred

    def _resume(self) -> None:
        """Serve what it holds, then read it again, unless a reason to wait remains."""
        if self._unserved or self.transport is None or self.transport.is_closing():
            return
        self._serve_frames()
        if not (self._unserved or self._stalled or self.transport.is_closing()):
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.front.connections.pop(self.ident, None)
        self.front.channel_closed(self)


# the codes answered once their events are published (and, but for broker codes, served)
WRITE_CODES = frozenset({
    codes.REGISTER_BROKER, codes.UNREGISTER_BROKER, codes.PUT_KV_CONFIG, codes.DELETE_KV_CONFIG,
    codes.WIPE_WRITE_PERM_OF_BROKER, codes.ADD_WRITE_PERM_OF_BROKER, codes.DELETE_TOPIC_IN_NAMESRV,
    codes.REGISTER_TOPIC_IN_NAMESRV, codes.UPDATE_NAMESRV_CONFIG})
# liveness signals: answered at once, forwarded once per coalescing window
LIVENESS_CODES = frozenset({codes.BROKER_HEARTBEAT, codes.QUERY_DATA_VERSION})


class Front:
    """Connections, dispatch and the broker connection table; `store` is the served-snapshot
    holder (snapshots.store.SnapshotStore), `publisher_factory` builds an EventPublisher."""

    def __init__(self, cfg: Config, store: Any, publisher_factory: Callable[[], EventPublisher],
                 *, max_frame_bytes: int = MAX_FRAME_BYTES, metrics: RemotingMetrics | None = None,
                 writes_in_flight: int = WRITES_IN_FLIGHT, metrics_role: str | None = None) -> None:
        """`metrics_role`: the metrics file this front writes (`schemas.metrics.metrics_file`); by
        default its port's, which the HTTP server of the same replica reads. One of several front
        processes on a port writes its own, summed by their supervisor (`remoting.processes`)."""
        self.cfg = cfg
        self.metrics = metrics or RemotingMetrics(codes.REQUEST_CODES)
        self.metrics_role = metrics_role or remoting_role(cfg.remoting_port)
        self.store = store
        self.max_frame_bytes = max_frame_bytes
        self.connections: dict[int, Connection] = {}
        self._ids = itertools.count(1)
        self._generations = itertools.count(1)
        self._owner: dict[tuple[str, str], tuple[int, int]] = {}  # (cluster, addr) -> (connection, generation)
        self._signals = Coalescer()  # liveness signals waiting for the next window
        self._networks = acl.parse_networks(cfg.remoting_broker_networks)
        self._keys = (cfg.remoting_access_key, cfg.remoting_secret_key) \
            if cfg.remoting_access_key and cfg.remoting_secret_key else None
        self._unsigned_brokers = cfg.remoting_unsigned_brokers
        self._closing = False
        self.idle_timeout_s = cfg.remoting_idle_timeout_ms / 1000
        self._repeat_horizon_s = min(REPEAT_HORIZON_S, cfg.kafka_retention_ms / 4000)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._arrived: collections.deque[tuple[Connection, Command, WriteHandler, float]] = collections.deque()
        self.write_share = WriteShare()
        self.reads = ReadTurns(self.write_share, self.connections)
        self._max_in_flight = writes_in_flight
        self.in_flight = 0  # writes taken and not yet answered (arrived, published, waiting for their cut)
        self._starting = False
        self._bulk: collections.deque[tuple[Connection, Asked, Reply, float]] = collections.deque()
        self._bulk_writing = False
        self._waiter = ServedWaiter(store, cfg.remoting_write_wait_ms / 1000, self._spawn)
        self._pipeline = PublishPipeline(cfg.bootstrap, publisher_factory, self.metrics.heartbeats_forwarded)
        self.read_only = {"listenPort": str(cfg.remoting_port), **{k: str(v).lower() if isinstance(v, bool) else str(v)
                                                                     for k, v in cfg.read_only_facts.items()}}
        self._writes: dict[int, WriteHandler] = {
            codes.REGISTER_BROKER: self._register, codes.UNREGISTER_BROKER: self._unregister,
            codes.PUT_KV_CONFIG: lambda c, cmd: self._admin([requests.put_kv(cmd.ext)]),
            codes.DELETE_KV_CONFIG: lambda c, cmd: self._admin(requests.delete_kv(cmd.ext)),
            codes.WIPE_WRITE_PERM_OF_BROKER: lambda c, cmd: self._write_perm(cmd, wipe=True),
            codes.ADD_WRITE_PERM_OF_BROKER: lambda c, cmd: self._write_perm(cmd, wipe=False),
            codes.DELETE_TOPIC_IN_NAMESRV: lambda c, cmd: self._with_snapshot(lambda s: requests.delete_topic(s, cmd.ext)),
            codes.REGISTER_TOPIC_IN_NAMESRV: lambda c, cmd: self._with_snapshot(
                lambda s: requests.register_topic(s, cmd.ext, cmd.body)),
            codes.UPDATE_NAMESRV_CONFIG: lambda c, cmd: self._admin(requests.update_config(cmd.body)),
        }
        assert set(self._writes) == WRITE_CODES

    # ------------------------------------------------------------ connections

    def protocol(self) -> Connection:
        return Connection(self, next(self._ids))

    async def serve(self, host: str, port: int, *, reuse_port: bool = False) -> asyncio.Server:
        """Listen on host:port; `reuse_port`: beside the other front processes of this port
        (SO_REUSEPORT: the kernel spreads new connections over their sockets, `remoting.processes`)."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(self.protocol, host, port, backlog=1024, reuse_address=True,
                                          reuse_port=reuse_port, start_serving=False)
        if self.cfg.remoting_socket_rcvbuf:
            # on the listening socket, before it accepts: an accepted connection takes its buffer
            # sizes (and the window it offers in its handshake) from it
            for sock in server.sockets:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.cfg.remoting_socket_rcvbuf)
                _check_rcvbuf(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), self.cfg.remoting_socket_rcvbuf)
        await server.start_serving()
        self._pipeline.start()  # connects on the publishing thread, first
        self._spawn(self._sweep())
        self._spawn(self._pipeline.forward_every(self.cfg.remoting_heartbeat_coalesce_ms / 1000, self._signals))
        self._spawn(self._write_metrics())
        return server

    async def _write_metrics(self) -> None:
        """Every second, the front's counters to `<data dir>/metrics/<metrics_role>.prom`
        (schemas.metrics), off the event loop."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(METRICS_WRITE_S)
            m, snap = self.metrics, self.store.current
            m.connections.set(len(self.connections))
            m.snapshot_id.set(-1 if snap.snapshot_id is None else snap.snapshot_id)
            try:
                await loop.run_in_executor(None, write_metrics_file, self.cfg.data_dir, self.metrics_role, m.registry)
            except OSError as exc:
                log.warning("remoting metrics not written: %s", exc)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep(self) -> None:
        """Close connections idle longer than NAMESRV_REMOTING_IDLE_TIMEOUT_MS (Java: 120 s). One
        whose client's bytes wait for the front (`Connection.waits_for_front`) is not idle: swept
        so, 12,193 of a 100,000-broker fleet's 15,000 connections were closed as the front fell
        behind, their brokers unregistered (the bench, 2026-11-29)."""
        while True:
            idle_s = self.idle_timeout_s
            await asyncio.sleep(min(1.0, idle_s / 4))
            cutoff = time.monotonic() - idle_s
            for conn in [c for c in self.connections.values() if c.last_active < cutoff and not c.waits_for_front]:
                log.info("closing %s: idle for %.0f s", conn.peer, idle_s)
                conn.close()

    async def shutdown(self) -> None:
        """Stop without unregistering anyone: brokers reconnect to the next instance."""
        self._closing = True
        await self._pipeline.forward(self._signals)
        for conn in list(self.connections.values()):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        self._pipeline.close()

    def channel_closed(self, conn: Connection) -> None:
        """RocketMQ's onChannelDestroy (§5.2): unregister what this connection registered, unless
        a newer registration of the same address came over another connection. As in RocketMQ the
        address is looked up in the route data (a BrokerData of its cluster holding it); one that
        has left its group (another address took its id) is not unregistered, its live entry
        expires. A registration the served cut does not show yet is unregistered as registered."""
        if self._closing:
            return
        for key, reg in list(conn.registered.items()):
            self._unregister_closed(key, conn, reg)

    def _unregister_closed(self, key: tuple[str, str], conn: Connection, reg: Registered) -> None:
        cluster, addr = key
        if self._owner.get(key) != (conn.ident, reg.generation):
            return
        del self._owner[key]
        self._signals.forget(key)
        holder = route_reads.holder_of(self.store.current, cluster, addr) if self.store.serves(reg.coords) \
            else (reg.broker_name, reg.broker_id)
        if holder is None:
            log.info("connection of %s (%s) closed: no group holds the address any more", addr, cluster)
            return
        # undoes this connection's registration only: a newer one (another front) stays
        event = ev.unregister_broker_event(cluster=cluster, broker_name=holder[0], broker_id=holder[1],
                                           addr=addr, timestamp=_now_ms(),
                                           registration_offset=max((o for _, o in reg.coords), default=None))
        log.info("connection of broker %s (%s, %s) closed: unregistering it", holder[0], cluster, addr,
                 extra={"brokerName": holder[0], "clusterName": cluster, "brokerAddr": addr})
        self._spawn(self._pipeline.publish_logged([event], "unregistering a closed connection's broker",
                                                  signals=self._signals.take({event["brokerName"]})))

    # ------------------------------------------------------------ dispatch

    def dispatch(self, conn: Connection, cmd: Command) -> None:
        started = time.perf_counter()
        code = cmd.code
        refused = self._refused(conn, cmd)
        if refused is not None:
            log.warning("refused code %d from %s: %s", code, conn.peer, refused)
            self.metrics.refused.labels(self.metrics.code_label(code)).inc()
            self._answer(conn, cmd, error(codes.NO_PERMISSION, refused), started)
            return
        read = replies.READS.get(code)
        if read is not None:
            snap = self.store.current
            reply = error(codes.SYSTEM_ERROR, NOT_READY) if snap.snapshot_id is None \
                else replies.stamped(read(snap, cmd.ext), snap)
            if len(reply.body) >= SHARED_BODY_BYTES and not cmd.oneway:
                self._bulk.append((conn, cmd.asked, reply, started))
                conn.bulk_queued()
                if not self._bulk_writing:
                    self._bulk_writing = True
                    self._spawn(self._write_bulk())
                return
        elif code == codes.GET_NAMESRV_CONFIG:
            snap = self.store.current
            reply = replies.stamped(replies.namesrv_config(snap, self.read_only), snap)
        elif code in LIVENESS_CODES:
            conn.writer = True
            reply = self._heartbeat(cmd)
        elif code in self._writes:
            conn.writer = True
            handler = self._writes[code]
            if code == codes.REGISTER_BROKER:
                repeat, handler = self._shown_repeat(conn, cmd)
                if repeat is not None:
                    self._answer(conn, cmd, repeat, started)
                    return
            if self.in_flight >= self._max_in_flight:
                self._answer(conn, cmd, error(codes.SYSTEM_BUSY, BUSY), started)
                return
            self.in_flight += 1
            conn.writing += 1
            self._arrived.append((conn, cmd, handler, started))
            if not self._starting:
                self._starting = True
                self._spawn(self._start_writes())
            return
        else:
            reply = error(codes.REQUEST_CODE_NOT_SUPPORTED, codes.not_supported(code))
        self._answer(conn, cmd, reply, started)

    async def _start_writes(self) -> None:
        """Start the writes that arrived, in arrival order, as many per turn of the loop as
        `write_share` allows. Reads are answered inline as their bytes arrive; started all at
        once, a storm of writes (100,000 brokers registering) would run every decoding before the
        loop looked at its sockets again, and a route lookup asked meanwhile went unanswered past
        its timeout."""
        share = self.write_share
        try:
            while self._arrived:
                count = min(share.turn(), len(self._arrived))
                for _ in range(count):
                    conn, cmd, handler, started = self._arrived.popleft()
                    self._spawn(self._write(conn, cmd, handler, started))
                del cmd, handler  # the last one started is its write's: not held over the turn
                share.started(count)
                await asyncio.sleep(0)
        finally:
            share.idle()
            self._starting = False

    async def _write_bulk(self) -> None:
        """Write the large answers read, in arrival order, BULK_BYTES_PER_TURN per turn of the
        loop, so every turn reads its sockets and answers the lookups in them first. One that
        waited past BULK_WAIT_S is answered SYSTEM_BUSY (RocketMQ's answer to a request its
        executor cannot take), which costs a header, not the body its asker no longer waits for."""
        try:
            while self._bulk:
                budget = BULK_BYTES_PER_TURN
                while self._bulk and budget > 0:
                    conn, asked, reply, started = self._bulk.popleft()
                    if time.perf_counter() - started > BULK_WAIT_S:
                        reply = error(codes.SYSTEM_BUSY, BUSY)  # counted: namesrv_remoting_requests{106, 2}
                    budget -= len(reply.body)
                    self._answer(conn, asked, reply, started)
                    conn.bulk_written()
                del conn, reply  # not held over the turn
                await asyncio.sleep(0)
        finally:
            self._bulk_writing = False

    def _answer(self, conn: Connection, cmd: Command | Asked, reply: Reply, started: float) -> None:
        conn.answer(cmd, reply)
        self.metrics.answered(cmd.code, reply.code, time.perf_counter() - started)

    def _refused(self, conn: Connection, cmd: Command) -> str | None:
        if cmd.code in codes.BROKER_CODES:
            return acl.broker_refusal(cmd.ext, cmd.body, conn.peer, self._networks, self._keys,
                                      unsigned_ok=self._unsigned_brokers)
        if cmd.code in codes.ADMIN_WRITES:
            if self._keys is None:
                return ("admin writes over remoting are disabled: set NAMESRV_REMOTING_ACCESS_KEY and "
                        "NAMESRV_REMOTING_SECRET_KEY and sign with them (mqadmin: conf/tools.yml)")
            return acl.check(cmd.ext, cmd.body, *self._keys)
        return None

    async def _write(self, conn: Connection, cmd: Command,
                     handler: Callable[[Connection, Command], Awaitable[Reply]], started: float) -> None:
        """Run a write and answer it. Only `asked` stays here while the write waits (for Kafka,
        for its cut): the request itself is the handler's, which lets go of its body once decoded
        (`_register`)."""
        asked = cmd.asked
        try:
            work = handler(conn, cmd)
            del cmd
            reply = await work
        except (InvalidInput, bodies.BodyError, PublishFailed) as exc:
            reply = error(codes.SYSTEM_ERROR, str(exc))
        except requests.NotAllowed as exc:
            reply = error(codes.NO_PERMISSION, str(exc))
        except Exception as exc:  # answered like Java's exceptionSimpleDesc; the front keeps serving
            log.exception("code %d from %s failed", asked.code, conn.peer)
            reply = error(codes.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self.in_flight -= 1
            conn.writing -= 1
        self._answer(conn, asked, reply, started)

    # ------------------------------------------------------------ broker requests

    def _heartbeat(self, cmd: Command) -> Reply:
        """904 and 322 (one-way or not) refresh liveness: the newest per broker is forwarded once per window."""
        try:
            # 322's body is decoded before the header's names are looked up, as in RocketMQ
            asked = bodies.data_version_or_none(cmd.body) if cmd.code == codes.QUERY_DATA_VERSION else None
            event = requests.heartbeat(cmd, _now_ms(), self.store.current)
        except (InvalidInput, bodies.BodyError) as exc:
            return error(codes.SYSTEM_ERROR, str(exc))
        if event is not None:  # lenient names (requests.LENIENT_SIGNALS) may find nothing to refresh
            self._signals.signal(event)
        if cmd.code == codes.BROKER_HEARTBEAT:
            return ok()
        return replies.data_version(self.store.current, cmd.ext, asked)

    def _shown_repeat(self, conn: Connection, cmd: Command) -> tuple[Reply | None, WriteHandler]:
        """A REGISTER_BROKER that repeats what this connection registered, which the served cut
        shows, is a liveness signal: answered here, as a heartbeat is, never queued behind the
        writes nor refused SYSTEM_BUSY for want of a write slot (refused, a fleet whose first
        registrations filled the slots lost the liveness of the brokers already served, and they
        expired). Only while the connection has no write of its own in flight, so its requests
        keep their order. Otherwise: None, and the write's handler, given the fingerprint it
        computed."""
        mine = conn.registered.get(_address(cmd))
        if mine is None:
            return None, self._register
        fingerprint = requests.fingerprint(cmd)
        if not conn.writing and mine.fingerprint == fingerprint and self._repeat_form(mine) == SHOWN:
            return self._repeat(mine), self._register
        return None, functools.partial(self._register, fingerprint=fingerprint)

    async def _register(self, conn: Connection, cmd: Command, fingerprint: bytes | None = None) -> Reply:
        """REGISTER_BROKER. A registration that waits for its cut holds only what its answer needs
        (names, id, coordinates): the request (its body) is let go once decoded, the decoded event
        once published; a repeat waiting for the registration it names (`_repeat_unserved`) holds
        its request, whose body is published whole should the named one not show. `fingerprint`:
        the request's, if `_shown_repeat` computed it."""
        if fingerprint is None:
            fingerprint = requests.fingerprint(cmd)
        mine = conn.registered.get(_address(cmd))
        repeat = mine is not None and mine.fingerprint == fingerprint
        if repeat and mine is not None:
            form = self._repeat_form(mine)
            if form == SHOWN:
                return self._repeat(mine)
            if form == UNSERVED:
                answer = await self._repeat_unserved(mine)
                if answer is not None:
                    return answer
        event = requests.registration(cmd, _now_ms(), validate=not repeat, fingerprinted=fingerprint)
        del cmd  # decoded: its body (tens of KB at 100 topics) is not held while this waits
        key = (event["clusterName"], event["brokerAddr"])
        # §3.2.7, answered as RocketMQ does; judged on the served cut unless this connection has just
        # registered the same id (a full registration the cut may not show yet)
        just_registered = mine is not None and (mine.broker_name, mine.broker_id) == (event["brokerName"],
                                                                                     event["brokerId"])
        if not just_registered and requests.single_topic_of_unknown(self.store.current, event):
            # still published: the job applies what RocketMQ does before it refuses (flags, zone, an
            # address leaving its other id) and records the refusal
            await self._publish([event])
            return error(codes.SYSTEM_ERROR, "register broker failed")
        # Answered once served unless the served cut already shows all it would change: a new
        # slave, address, flag, data version or topic is visible to the next lookup, as RocketMQ's
        # answer promises. A repeat of a registration already served is a liveness
        # signal: answered without looking its topics up in the cut (at 100 topics a broker, the
        # first look of each topic in a million-row cut was most of the front's CPU under a
        # re-registering fleet).
        changes = not (repeat and mine is not None and self.store.serves(mine.coords)) \
            and not requests.shown_by(self.store.current, event, prune=self.cfg.delete_topic_with_broker_registration)
        mark = self.store.mark()
        topic_keys = topic_keys_digest(event["topicConfigTable"])
        event = requests.to_publish(event, self.cfg.max_message_bytes)  # its topic table is not queued
        coords = await self._publish([event])
        generation = next(self._generations)
        self._owner[key] = (conn.ident, generation)
        conn.registered[key] = Registered(
            event["brokerName"], event["brokerId"], generation, coords, fingerprint,
            ev.repeated_registration_event(event, [o for _, o in coords], topic_keys), time.monotonic(), mark)
        stale = requests.stale_epoch(self.store.current, event)
        if stale:  # RocketMQ removes the refused address's live entry: its channel no longer unregisters it
            self._owner.pop(key, None)
            conn.registered.pop(key, None)
        elif conn.closed and not self._closing:
            # the connection closed while its registration was being published (a one-way one, or a
            # broker gone at once): RocketMQ, which registers before it sees the close, unregisters it
            self._unregister_closed(key, conn, conn.registered[key])
            return Reply(codes.SUCCESS)
        # a refused epoch gets an empty result, as in RocketMQ
        name, cluster, broker_id = event["brokerName"], event["clusterName"], None if stale else event["brokerId"]
        del event  # published (Kafka has it): its topic table is not held while this waits for its cut
        snap = (await self._waiter.served(coords, mark)) if changes and not stale else self.store.current
        return _registered(snap, name, cluster, broker_id)

    def _repeat_form(self, mine: Registered) -> str:
        """How a repeat of `mine` goes out (`mine` being recent enough that the events topic's
        retention cannot have removed it, the repeat horizon, and in a log not reset since):
        SHOWN, small and answered at once, when the served cut includes `mine` and shows all it
        would make visible (the job takes it as a liveness signal, and the answer promises nothing
        the cut does not show); UNSERVED, small and answered once `mine` is served, when the job
        has not served `mine` yet (`_repeat_unserved`); WHOLE otherwise: the registration is
        published again, waits to be served if it changes something, and becomes what later
        repeats name."""
        if time.monotonic() - mine.published_at > self._repeat_horizon_s or len({p for p, _ in mine.coords}) != 1:
            return WHOLE
        served = self.store.served_mark()
        if reset_since(mine.mark, served, mine.coords[0][0]):
            return WHOLE  # the log it was published in is gone: its offsets name other records now
        if not includes(served, mine.coords, mine.mark):
            return WHOLE if mine.mark is None else UNSERVED
        shown = requests.repeat_shown_by(self.store.current, mine.repeat,
                                         prune=self.cfg.delete_topic_with_broker_registration)
        return SHOWN if shown else WHOLE

    async def _repeat_unserved(self, mine: Registered) -> Reply | None:
        """A repeat of a registration the job has not served yet (it lags behind the log: a
        registration wave, a restart). Published whole, every repeat would be a body for the
        lagging job to decode and become the registration the next repeat waits for, so a job
        that lags by more than a broker's period would never see a small repeat again and, paying
        a body per signal, never catch up (10,000 brokers × 100 topics after their first wave,
        2026-11-27: 5,000-record batches of bodies for good). Small, it names `mine`, which the
        log holds before it; the answer is the current cut's if that shows all the repeat makes
        visible, else it waits until the cut includes `mine`, or the write's bound, as the whole
        repeat's would have. None: the cut that includes `mine` does not show what
        the repeat would make visible (`mine` was undone since, say), and the caller publishes it
        whole as well, to be answered when that is served."""
        assert mine.mark is not None  # `_repeat_form` says UNSERVED only with it
        self._signals.repeat(mine.repeat, _now_ms())
        self.metrics.repeats_published_small.inc()
        prune = self.cfg.delete_topic_with_broker_registration
        if requests.repeat_shown_by(self.store.current, mine.repeat, prune=prune):
            # the cut shows all the repeat makes visible (an earlier registration of the same
            # content): answered at once, as a whole registration the cut shows is
            return _registered(self.store.current, mine.broker_name, mine.repeat["clusterName"], mine.broker_id)
        snap = await self._waiter.served(mine.coords, mine.mark)
        served = self.store.serves(mine.coords, mine.mark)  # False: the wait's bound passed first
        if served and not requests.repeat_shown_by(snap, mine.repeat, prune=prune):
            return None
        # past the bound the answer is the current cut's, as a whole registration's is at its bound
        return _registered(snap, mine.broker_name, mine.repeat["clusterName"], mine.broker_id)

    def _repeat(self, mine: Registered) -> Reply:
        """A repeat published small, coalesced with the address's liveness signals and answered at
        once from the served cut, as a repeat of a served registration was before."""
        small = mine.repeat
        self._signals.repeat(small, _now_ms())
        self.metrics.repeats_published_small.inc()
        return _registered(self.store.current, mine.broker_name, small["clusterName"], mine.broker_id)

    async def _unregister(self, conn: Connection, cmd: Command) -> Reply:
        event = requests.unregistration(cmd, _now_ms())
        await self._publish([event])
        key = (event["clusterName"], event["brokerAddr"])
        conn.registered.pop(key, None)
        if self._owner.get(key, (None,))[0] == conn.ident:
            del self._owner[key]
        return ok()

    # ------------------------------------------------------------ admin requests

    async def _admin(self, events: list[dict[str, Any]]) -> Reply:
        if events:
            await self._publish_served(events)
        return ok()

    async def _publish_served(self, events: list[dict[str, Any]]) -> Snapshot:
        """Publish `events` and wait for the served cut to include them (within the waiter's bound)."""
        mark = self.store.mark()
        return await self._waiter.served(await self._publish(events), mark)

    def _publish(self, events: list[dict[str, Any]]) -> Awaitable[list[tuple[int, int]]]:
        """Publish a write behind the liveness signals of its groups that wait in the coalescing
        window (taken now, queued with it): the log keeps the order the requests arrived in."""
        names = {e["brokerName"] for e in events if e.get("brokerName")}
        return self._pipeline.publish(events, signals=self._signals.take(names) if names else None)

    async def _with_snapshot(self, build: Callable[[Snapshot], list[dict[str, Any]]]) -> Reply:
        snap = self.store.current
        if snap.snapshot_id is None:
            return error(codes.SYSTEM_ERROR, NOT_READY)
        return await self._admin(build(snap))

    async def _write_perm(self, cmd: Command, *, wipe: bool) -> Reply:
        event = requests.write_perm(cmd.ext, wipe=wipe)
        snap = await self._publish_served([event])
        count = route_reads.topics_hosted_by(snap, event["brokerName"])
        return ok(ext={"wipeTopicCount" if wipe else "addTopicCount": str(count)})


class ReadTurns:
    """The event loop's reads, bounded between its yields (READ_TURN_S): once the reads counted
    since the last yield reach the bound, a connection read keeps its bytes unserved, unless they
    are few (SMALL_READ_BYTES: a lookup, a heartbeat), and is not read (`Connection.buffer_updated`)
    until the next turn of the loop, which serves the deferred ones first, in the order they were
    deferred, within the bound again, and starts a new count. So a turn ends after about
    READ_TURN_S of reads, and the loop's timers, the writes it starts (`WriteShare`, told the
    reads' time) and the answers of writes whose cut came run at least that often, however many
    sockets have bytes. A front that stays behind would hold a read of every connection so: past
    HELD_BYTES of them, with the writers' (`Connection.writer`) over half of it, every writer but
    those whose last read was small is stalled (not read, its bytes left in the kernel) until the
    writers' are served down to half of it; past HELD_BYTES, the connections still read are read
    SMALL_READ_BYTES at a time. A client's
    connection (it only reads) is never stalled, and deferred it is served ahead of the writers:
    stalled with them, a client's lookups piled up unread, its next read was large, and it waited
    behind the wave's registrations again (the bench at 100,000 brokers, 2026-11-29: lookups after
    the wave p50 220 s). When the clients spent the turn, the writers have WRITERS_SHARE of it
    of their own."""

    def __init__(self, write_share: WriteShare, connections: dict[int, Connection],
                 budget_s: float = READ_TURN_S, held_max: int = HELD_BYTES) -> None:
        self._write_share = write_share
        self._connections = connections
        self._budget_s = budget_s
        self._limit_s = budget_s  # what `spent` compares with: the writers' share, while they are served after the clients
        self._held_max = held_max
        self._spent_s = 0.0  # reads since the last turn that served the deferred ones
        self._deferred: collections.deque[Connection] = collections.deque()  # writers' (`Connection.writer`)
        self._readers: collections.deque[Connection] = collections.deque()  # clients', served first
        self.held = 0  # bytes the deferred connections hold
        self._readers_held = 0  # of which the clients' (never stalled: they do not keep a stall on)
        self._stalled: list[Connection] | None = None  # while stalled: the connections to read again after
        self._next_scheduled = False
        # every read goes here first (`Connection.get_buffer`): the loop runs one read at a time
        self._view = memoryview(bytearray(READ_BYTES))

    def buffer(self, *, small: bool = False) -> memoryview:
        return self._view[:SMALL_READ_BYTES] if small else self._view

    @property
    def stalling(self) -> bool:
        """Reads are small (SMALL_READ_BYTES): the writers are stalled, or what the clients'
        connections hold took the held bytes past the bound (they are never stalled)."""
        return self._stalled is not None or self.held > self._held_max

    @property
    def _writers_held(self) -> int:
        """The held bytes of the writers' lane: what a stall bounds."""
        return self.held - self._readers_held

    def spent(self, more_s: float = 0.0) -> bool:
        """Whether this turn's reads, and `more_s` not yet told (`took`), reached the bound."""
        return self._spent_s + more_s >= self._limit_s

    def took(self, seconds: float) -> None:
        """Reads are counted from the last deferred ones' turn, not reset every turn: a callback
        scheduled for every turn cost each quiet turn a second pass of the loop."""
        self._spent_s += seconds
        self._write_share.read(seconds)

    def defer(self, conn: Connection) -> None:
        conn.counted = conn.buffered
        (self._deferred if conn.writer else self._readers).append(conn)
        self.held += conn.counted
        if not conn.writer:
            self._readers_held += conn.counted
            conn.held_as_reader = True
        if self._stalled is not None:
            self.sends_much(conn)
        elif self.held > self._held_max and self._writers_held > self._held_max // 2:
            # the writers' bytes are what a stall bounds: stalled for the clients' (which are read on,
            # and which kept the count up), the writers were read again and stalled at once, unserved
            self._stalled = [c for c in self._connections.values() if c.writer and not c.light]
            for c in self._stalled:
                c.stall()
            log.info("remoting: %d bytes read and not yet served (%d of them clients'); reading no connection "
                     "that sends much until the rest are half the bound", self.held, self._readers_held)
        self._schedule()

    def held_more(self, conn: Connection, nbytes: int) -> None:
        """A deferred connection read again in its turn (asyncio's loop reads a socket paused in
        the same turn once more): its bytes are held with the rest."""
        conn.counted += nbytes
        self.held += nbytes
        if conn.held_as_reader:
            self._readers_held += nbytes

    def sends_much(self, conn: Connection) -> None:
        """A writer light until the stall began sent much: stalled with the rest now."""
        if self._stalled is not None and conn.writer and not conn.is_stalled:
            conn.stall()
            self._stalled.append(conn)

    def _schedule(self) -> None:
        """The next turn serves the deferred connections and starts a new count."""
        if not self._next_scheduled:
            self._next_scheduled = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._next_scheduled = False
        self._spent_s = 0.0
        # the clients' first (lookups: cheap, and waited for), within the bound; then the writers,
        # within the bound's WRITERS_SHARE of their own while clients wait too, so that neither a
        # lookup storm nor a registration wave holds the other back. With no share of their own,
        # a writer served after the clients had spent the bound was deferred again after one
        # request: a request a turn. With half the bound each, the clients' lookups at 100,000
        # brokers fell behind (p99 389 s, by hand, 2026-11-30): registrations beyond what the job
        # takes are refused SYSTEM_BUSY anyway, and reading them is all their share buys.
        self._serve(self._readers)
        if self._deferred and self.spent():
            readers_s, self._spent_s = self._spent_s, 0.0
            self._limit_s = self._budget_s * WRITERS_SHARE
            self._serve(self._deferred, at_least=1)
            self._spent_s += readers_s
            self._limit_s = self._budget_s
        else:
            self._serve(self._deferred, at_least=1)
        # the writers' held bytes, not the clients': clients are read on during a stall, and
        # their lookups kept the count above half, the writers stalled for as long as they asked
        if self._stalled is not None and self._writers_held <= self._held_max // 2:
            # read again the least recently active first, so that the ones the last stalls left
            # unread are read before the bound fills again (the loop reads the ready sockets in
            # about the order they are read again in)
            stalled, self._stalled = sorted(self._stalled, key=lambda c: c.last_active), None
            for conn in stalled:
                conn.unstall()
        if self._readers or self._deferred:
            self._schedule()

    def _serve(self, deferred: collections.deque[Connection], at_least: int = 0) -> None:
        served = 0
        while deferred and (served < at_least or not self.spent()):
            conn = deferred.popleft()
            self.held -= conn.counted
            if conn.held_as_reader:
                self._readers_held -= conn.counted
                conn.held_as_reader = False
            conn.counted = 0
            conn.undefer()
            served += 1


class WriteShare:
    """How many writes the next turn of the loop starts: at least WRITES_PER_TURN, and as many
    more as take, at the last turns' cost per write, WRITES_SHARE of the time the turn's reads
    took (`ReadTurns.took` adds it). A read then waits behind at most about as much
    writing as reading, however long the turns grow."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._read_s = 0.0  # reads since the last turn started writes
        self._last = 0.0  # perf_counter when the last turn started writes (0: none started since idle)
        self._count = 0  # writes the last turn started
        self._cost_s = 0.0  # per write, the last turn's (its time but the reads, over its writes)

    def read(self, seconds: float) -> None:
        self._read_s += seconds

    def turn(self) -> int:
        """The writes this turn may start."""
        now, allowed = self._clock(), WRITES_PER_TURN
        if self._last:  # the first turn after an idle spell: its reads were not the writes' wait
            if self._count:
                self._cost_s = max(0.0, now - self._last - self._read_s) / self._count
            if self._cost_s > 0:
                allowed = max(allowed, int(WRITES_SHARE * self._read_s / self._cost_s))
        self._read_s, self._last = 0.0, now
        return allowed

    def started(self, count: int) -> None:
        self._count = count

    def idle(self) -> None:
        self._last, self._count = 0.0, 0


WriteHandler = Callable[[Connection, Command], Awaitable[Reply]]


def _address(cmd: Command) -> tuple[str, str]:
    """(clusterName, brokerAddr) of a broker request: what a connection's registrations are kept by."""
    return cmd.ext.get("clusterName") or "", cmd.ext.get("brokerAddr") or ""


def _check_rcvbuf(effective: int, asked: int) -> None:
    """Log what the kernel made of NAMESRV_REMOTING_SOCKET_RCVBUF: Linux doubles it, and caps it
    at net.core.rmem_max without a word, which would leave a larger bound than the one asked for
    unsaid (and a smaller one than the operator tuned for)."""
    if effective < 2 * asked:
        log.warning("NAMESRV_REMOTING_SOCKET_RCVBUF=%d: the kernel gave the remoting connections %d bytes of receive "
                    "buffer (net.core.rmem_max caps it; raise it, or this setting)", asked, effective)
    else:
        log.info("remoting connections' receive buffers: %d bytes each (NAMESRV_REMOTING_SOCKET_RCVBUF=%d)",
                 effective, asked)


def _unread_bytes(transport: asyncio.Transport | None) -> int:
    """Bytes waiting in the socket's receive buffer (FIONREAD), 0 for a closed one."""
    sock = None if transport is None or transport.is_closing() else transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]  # type: ignore[no-any-return]
    except OSError:
        return 0


def _registered(snap: Snapshot, broker_name: str, cluster: str, broker_id: int | None) -> Reply:
    """REGISTER_BROKER's answer from `snap`: a slave learns its master (`broker_id` None: a refused
    registration, which learns nothing), and every broker the ORDER_TOPIC_CONFIG table."""
    ext: dict[str, str] = {}
    if broker_id is not None and broker_id != MASTER_ID:
        master = route_reads.master_of(snap, broker_name, cluster)
        ext.update({k: v for k, v in master.items() if v is not None})
    return Reply(codes.SUCCESS, ext=ext, body=replies.order_topic_config(snap))


def _now_ms() -> int:
    return int(time.time() * 1000)
