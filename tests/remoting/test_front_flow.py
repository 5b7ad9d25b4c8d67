"""The remoting front's flow control over the in-memory log (no Kafka, Spark or Delta): a client
that pipelines requests and does not read the answers is not answered faster than it reads."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time

from conf import load_config
from remoting import codes
from remoting.front import Front
from remoting.protocol import decode, encode_request
from schemas import events as ev
from tests.differential.in_memory import InMemoryLog
from tests.harness import FrontThread


def _buffered(front: FrontThread) -> int:
    """Bytes of answers the front holds for its connections, read on its loop."""
    async def size() -> int:
        return sum(c.transport.get_write_buffer_size() for c in front.front.connections.values()
                   if c.transport is not None)
    return asyncio.run_coroutine_threadsafe(size(), front._loop).result(10)


def _read_answer(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the front closed the connection"
            out += chunk
        return bytes(out)
    (length,) = struct.unpack(">i", exactly(4))
    return exactly(length)


def test_pipelined_large_answers_are_held_back_until_the_client_reads(tmp_path):
    """100 cluster-info requests of a 2,000-broker cut (each answer about 300 KB), sent at once and
    not read: the front buffers about one answer, not all of them; once the client reads, every
    request is answered, in order."""
    cfg, log = _fleet_log(tmp_path)
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    n = 100
    host, port = front.addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"".join(encode_request(codes.GET_BROKER_CLUSTER_INFO, i) for i in range(n)))
            first = decode(_read_answer(sock))
            body = len(first.body)
            assert first.code == codes.SUCCESS and body > 200_000, body
            time.sleep(1.0)  # the client reads nothing more for a second
            held = _buffered(front)
            answers = [first] + [decode(_read_answer(sock)) for _ in range(n - 1)]
        assert held < 3 * body, f"{held:,} bytes of answers buffered for one client (an answer is {body:,})"
        assert [a.opaque for a in answers] == list(range(n))
        assert all(a.code == codes.SUCCESS and len(a.body) == body for a in answers)
    finally:
        front.stop()


def _fleet_log(tmp_path, brokers: int = 2000):  # type: ignore[no-untyped-def]
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    log = InMemoryLog(cfg.broker_timeout_ms)
    log.publish([ev.register_broker_event(cluster="C", broker_name=f"broker-with-a-long-name-{g}", broker_id=0,
                                          addr=f"10.0.{g // 250}.{g % 250}:10911", topics={f"T{g}": {}, f"U{g}": {}},
                                          timestamp=int(time.time() * 1000))
                 for g in range(brokers)])
    return cfg, log


def test_a_route_lookup_is_answered_before_a_storm_of_cluster_infos_asked_before_it(tmp_path):
    """300 brokers each ask for the cluster info of a 2,000-broker cut (about 300 KB each, 90 MB in
    all), then a client asks for a route. The lookup is answered within a turn or two of the
    front's loop, before most of the cluster infos are written: large answers go out a megabyte
    per turn, after the turn's reads (at 10,000 brokers asking 106 every 5 s, written as they were
    read, they held lookups in their sockets for seconds)."""
    import select
    cfg, log = _fleet_log(tmp_path)
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    host, port = front.addr.rsplit(":", 1)
    brokers = [socket.create_connection((host, int(port)), timeout=30) for _ in range(300)]
    try:
        with socket.create_connection((host, int(port)), timeout=30) as client:
            for i, sock in enumerate(brokers):
                sock.sendall(encode_request(codes.GET_BROKER_CLUSTER_INFO, i))
            client.sendall(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, 1, ext={"topic": "T7"}))
            route = decode(_read_answer(client))
            started = [s for s in brokers if select.select([s], [], [], 0)[0]]
        assert route.code == codes.SUCCESS and route.opaque == 1
        assert len(started) < len(brokers) // 2, f"{len(started)} of {len(brokers)} cluster infos written first"
        answers = [decode(_read_answer(s)) for s in brokers]  # and every one of them is answered
        assert all(a.code == codes.SUCCESS and len(a.body) > 200_000 for a in answers)
        assert [a.opaque for a in answers] == list(range(len(brokers)))
    finally:
        for sock in brokers:
            sock.close()
        front.stop()


def test_a_large_answer_that_waited_past_its_askers_timeout_is_answered_busy(tmp_path, monkeypatch):
    """A cluster info still queued after BULK_WAIT_S (3 s: every asker's default timeout) is
    answered SYSTEM_BUSY with RocketMQ's overload remark, not with a body its asker gave up on; a
    small answer is never queued."""
    from remoting import front as front_module
    cfg, log = _fleet_log(tmp_path)
    monkeypatch.setattr(front_module, "BULK_WAIT_S", 0.0)  # every large answer has waited too long
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    try:
        from remoting.client import RemotingClient
        with RemotingClient(front.addr) as c:
            info = c.call(codes.GET_BROKER_CLUSTER_INFO)
            assert info.code == codes.SYSTEM_BUSY and info.remark == front_module.BUSY and not info.body
            route = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": "T7"})
            assert route.code == codes.SUCCESS and json.loads(route.body)["brokerDatas"]
    finally:
        front.stop()


class _SlowLog(InMemoryLog):
    """Each publish takes `delay_s`: a registration is still being published when its connection closes."""

    def __init__(self, timeout_ms: int, delay_s: float) -> None:
        super().__init__(timeout_ms)
        self.delay_s = delay_s

    def publish(self, events):  # type: ignore[no-untyped-def]
        time.sleep(self.delay_s)
        return super().publish(events)


def test_a_registration_whose_connection_closes_while_it_is_published_is_undone(tmp_path):
    """A one-way REGISTER_BROKER, then the connection closes before the registration is in the log:
    RocketMQ, which registers before it handles the close, unregisters the broker; so does the front,
    once the registration is published, and the broker is gone from the cut."""
    from remoting.client import registration_request
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    log = _SlowLog(cfg.broker_timeout_ms, 0.3)
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    host, port = front.addr.rsplit(":", 1)
    ext, body = registration_request(cluster="C", broker_name="b0", broker_id=0, addr="10.0.0.1:10911",
                                     topics={t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                                 "topicSysFlag": 0, "order": False} for t in ("T", "U")})
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(encode_request(codes.REGISTER_BROKER, 1, ext=ext, body=body, oneway=True))
            time.sleep(0.05)  # read by the front, not yet published
        deadline = time.monotonic() + 5
        seen_registered = False
        while time.monotonic() < deadline:
            registered = "b0" in log.current.brokers
            seen_registered |= registered
            if seen_registered and not registered:
                break
            time.sleep(0.02)
        assert seen_registered, "the one-way registration was never published"
        assert not registered, "the broker stayed registered after its connection closed"
    finally:
        front.stop()


class _Recording:
    """A transport that keeps what it is given (unit test of what the front writes)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def test_a_large_shared_body_is_written_as_itself_not_copied_into_each_answer():
    """A cut's cluster info is encoded once and shared by every answer: the front hands the event
    loop that very object (uvloop keeps a reference while the client reads), so 10,000 waiting
    clients hold one body, not 10,000 copies. A small answer stays one write."""
    from remoting.front import SHARED_BODY_BYTES, Connection
    from remoting.protocol import Command
    from remoting.replies import Reply

    big, small = b"x" * SHARED_BODY_BYTES, b"{}"
    for body, writes in ((big, 2), (small, 1)):
        conn = Connection(front=None, ident=1)  # type: ignore[arg-type]  # answer() uses only the transport
        conn.transport = _Recording()  # type: ignore[assignment]
        cmd = Command(code=codes.GET_BROKER_CLUSTER_INFO, opaque=7, flag=0, ext={}, body=b"")
        conn.answer(cmd, Reply(code=codes.SUCCESS, body=body))
        sent = conn.transport.writes  # type: ignore[attr-defined]
        assert len(sent) == writes
        assert decode(b"".join(sent)[4:]).body == body and decode(b"".join(sent)[4:]).opaque == 7
        if writes == 2:
            assert sent[1] is big


def test_a_repeat_waiting_in_the_window_is_logged_before_a_later_write_of_its_group(tmp_path):
    """RocketMQ applies requests in the order they arrive. A re-registration answered at once waits
    in the coalescing window as a small repeat; a later registration of another address of the same
    group (here with another acting-master flag and zone, which every registration writes) must not
    overtake it in the log, or the older flags would win. Found by the differential test."""
    from remoting.client import RemotingClient, registration_request
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0",
                       "NAMESRV_REMOTING_HEARTBEAT_COALESCE_MS": "1000"})
    log = InMemoryLog(cfg.broker_timeout_ms)
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    topics = {"T1": {}, "T2": {}}

    def flags(c: RemotingClient) -> tuple[bool, str | None]:
        group = json.loads(c.call(codes.GET_BROKER_CLUSTER_INFO).body)["brokerAddrTable"]["g"]
        return group["enableActingMaster"], group.get("zoneName")

    try:
        with RemotingClient(front.addr) as a, RemotingClient(front.addr) as b:
            first = registration_request(cluster="C", broker_name="g", broker_id=1, addr="10.0.0.1:10911",
                                         topics=topics, acting=False)
            assert a.call(codes.REGISTER_BROKER, *first).code == codes.SUCCESS
            assert a.call(codes.REGISTER_BROKER, *first).code == codes.SUCCESS  # a repeat: waits in the window
            later = registration_request(cluster="C", broker_name="g", broker_id=2, addr="10.0.0.2:10911",
                                         topics=topics, acting=True, ext={"__ZONE_NAME": "az1"})
            assert b.call(codes.REGISTER_BROKER, *later).code == codes.SUCCESS
            assert flags(a) == (True, "az1")
            time.sleep(1.5)  # the window has been published since
            assert flags(a) == (True, "az1")
            # a repeat, then the broker's own UNREGISTER: the repeat must not bring it back
            assert a.call(codes.REGISTER_BROKER, *first).code == codes.SUCCESS
            gone = {"clusterName": "C", "brokerName": "g", "brokerId": "1", "brokerAddr": "10.0.0.1:10911"}
            assert a.call(codes.UNREGISTER_BROKER, gone).code == codes.SUCCESS
            time.sleep(1.5)
            addrs = json.loads(a.call(codes.GET_BROKER_CLUSTER_INFO).body)["brokerAddrTable"]["g"]["brokerAddrs"]
            assert addrs == {"2": "10.0.0.2:10911"}
    finally:
        front.stop()


def test_writes_past_the_bound_in_flight_are_answered_system_busy_at_once(tmp_path):
    """RocketMQ answers a request its executor cannot queue SYSTEM_BUSY, with its remark, and the
    broker retries at its next period; so does the front past its bound of writes in flight (3
    here), while the writes it took are answered once published, and a write after them is taken."""
    from remoting.client import registration_request
    from remoting.front import BUSY
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    log = _SlowLog(cfg.broker_timeout_ms, 0.5)
    front = FrontThread(Front(cfg, log, lambda: log, writes_in_flight=3))  # type: ignore[arg-type]
    host, port = front.addr.rsplit(":", 1)

    def register(g: int, opaque: int, oneway: bool = False) -> bytes:
        ext, body = registration_request(cluster="C", broker_name=f"b{g}", broker_id=0, addr=f"10.0.0.{g}:10911",
                                         topics={t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4,
                                                     "perm": 6, "topicSysFlag": 0, "order": False}
                                                 for t in (f"T{g}", f"U{g}")})
        return encode_request(codes.REGISTER_BROKER, opaque, ext=ext, body=body, oneway=oneway)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sent = time.monotonic()
            # 10 two-way registrations and a one-way one, all at once: a one-way write refused is not answered
            sock.sendall(b"".join(register(g, g) for g in range(1, 11)) + register(11, 11, oneway=True))
            answers = {}
            for _ in range(10):
                cmd = decode(_read_answer(sock))
                answers[cmd.opaque] = (cmd.code, cmd.remark, time.monotonic() - sent)
            busy = sorted(o for o, (code, _, _) in answers.items() if code == codes.SYSTEM_BUSY)
            taken = sorted(o for o, (code, _, _) in answers.items() if code == codes.SUCCESS)
            assert taken == [1, 2, 3] and busy == list(range(4, 11)), answers
            assert all(answers[o][1] == BUSY and answers[o][2] < 0.4 for o in busy), answers  # before any publish ended
            assert front.front.in_flight == 0
            sock.sendall(register(12, 12))  # the bound freed: taken again
            again = decode(_read_answer(sock))
            assert (again.opaque, again.code) == (12, codes.SUCCESS), (again.opaque, again.code, again.remark)
        assert {f"b{g}" for g in (1, 2, 3, 12)} <= set(log.current.brokers)
        assert not {f"b{g}" for g in range(4, 12)} & set(log.current.brokers)
    finally:
        front.stop()


def _registration(g: int, opaque: int) -> bytes:
    from remoting.client import registration_request
    ext, body = registration_request(cluster="C", broker_name=f"b{g}", broker_id=0, addr=f"10.0.0.{g}:10911",
                                     topics={t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4,
                                                 "perm": 6, "topicSysFlag": 0, "order": False}
                                             for t in (f"T{g}", f"U{g}")})
    return encode_request(codes.REGISTER_BROKER, opaque, ext=ext, body=body)


def test_a_repeat_of_a_served_registration_is_taken_while_the_writes_in_flight_are_full(tmp_path):
    """A broker's repeat of a registration the cut shows is a liveness signal: answered at once
    SUCCESS while the front's writes in flight are full (2 here, each publish taking 0.5 s), where
    a new registration is refused SYSTEM_BUSY, and its signal reaches the log. Queued with the
    writes, as it was, a fleet whose first registrations filled the slots was refused the
    re-registrations of the brokers already served, and they expired."""
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    log = _SlowLog(cfg.broker_timeout_ms, 0.5)
    front = FrontThread(Front(cfg, log, lambda: log, writes_in_flight=2))  # type: ignore[arg-type]
    host, port = front.addr.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=10) as a, \
                socket.create_connection((host, int(port)), timeout=10) as b:
            a.sendall(_registration(1, 1))
            assert decode(_read_answer(a)).code == codes.SUCCESS
            key = ("C", "10.0.0.1:10911")
            first = log.current.live_by_addr[key]["lastUpdateTimestamp"]
            time.sleep(0.01)  # the repeat is stamped later than the registration
            b.sendall(_registration(2, 2) + _registration(3, 3) + _registration(4, 4))  # two taken, one refused
            time.sleep(0.2)
            sent = time.monotonic()
            a.sendall(_registration(1, 5))
            repeat = decode(_read_answer(a))
            took = time.monotonic() - sent
            assert (repeat.opaque, repeat.code) == (5, codes.SUCCESS) and took < 0.3, (repeat.code, repeat.remark, took)
            codes_b = sorted(decode(_read_answer(b)).code for _ in range(3))
            assert codes_b == [codes.SUCCESS, codes.SUCCESS, codes.SYSTEM_BUSY]
            # the repeat's signal reaches the log (the coalescing window, then a publish)
            deadline = time.monotonic() + 10
            while log.current.live_by_addr[key]["lastUpdateTimestamp"] == first and time.monotonic() < deadline:
                time.sleep(0.1)
            assert log.current.live_by_addr[key]["lastUpdateTimestamp"] > first, "the repeat's signal never reached the log"
    finally:
        front.stop()


def test_the_writes_a_turn_starts_grow_with_the_time_its_reads_took():
    """`WriteShare`: a turn whose reads were short starts WRITES_PER_TURN writes; one whose reads
    took long starts as many as fit, at the last turn's cost per write, in as much time as the
    reads took; the first turn after an idle spell does not count the reads of the spell."""
    from remoting.front import WRITES_PER_TURN, WriteShare
    now = [100.0]
    share = WriteShare(clock=lambda: now[0])
    assert share.turn() == WRITES_PER_TURN  # the first: nothing known
    share.started(32)
    now[0] += 0.010 + 0.032  # 10 ms of reads, 32 writes of 1 ms
    share.read(0.010)
    assert share.turn() == WRITES_PER_TURN  # 10 ms of reads: 10 writes' worth, below the floor
    share.started(32)
    now[0] += 1.5 + 0.032  # a turn of 1.5 s of reads
    share.read(1.5)
    assert share.turn() == 1500  # 1.5 s at 1 ms a write
    share.started(1500)
    now[0] += 0.2 + 3.0  # those 1,500 writes cost 2 ms each
    share.read(0.2)
    assert share.turn() in (99, 100)  # 0.2 s of reads at 2 ms a write (less a rounding)
    share.idle()
    now[0] += 600
    share.read(30.0)  # reads while no write waited
    assert share.turn() == WRITES_PER_TURN


STORM = 500  # route lookups each storming connection pipelines at once (about 50 KB)


def _send_storm(socks: list[socket.socket], storm: bytes | None = None) -> None:
    """`storm` (by default STORM lookups of absent topics) sent on each connection at once."""
    if storm is None:
        storm = b"".join(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, i, ext={"topic": f"absent-{i}"})
                         for i in range(STORM))
    for sock in socks:
        sock.sendall(storm)


def _storm_answered(socks: list[socket.socket], sent: float, count: int = STORM,
                    code: int = codes.TOPIC_NOT_EXIST) -> float:
    """Seconds from `sent` until every storming connection had its `count` answers, each `code`.
    Each connection is read on a thread of its own, as its own client reads it: read one after
    another, the others' answers filled their sockets and the front held their requests back by
    flow control, a wait of another kind."""
    from concurrent.futures import ThreadPoolExecutor

    def answers(sock: socket.socket) -> list[int]:
        return [decode(_read_answer(sock)).code for _ in range(count)]
    with ThreadPoolExecutor(len(socks)) as pool:
        codes_read = [c for got in pool.map(answers, socks) for c in got]
    assert codes_read == [code] * (count * len(socks))
    return time.monotonic() - sent


def test_a_registration_is_answered_while_a_storm_of_lookups_is_served(tmp_path):
    """A broker registers, then 50 clients each send 500 route lookups at once (seconds of the
    front's loop). The loop serves at most READ_TURN_S of reads a turn, and a connection read past
    it waits for a later turn, so the loop keeps turning: the registration is started, published
    and answered within a few turns, long before the storm is. Served whole in one turn, as every
    socket with bytes was, the storm held the registration's next step (and the loop's timers)
    until its last lookup was answered."""
    cfg, log = _fleet_log(tmp_path, brokers=10)
    front = FrontThread(Front(cfg, log, lambda: log))  # type: ignore[arg-type]
    host, port = front.addr.rsplit(":", 1)
    clients = [socket.create_connection((host, int(port)), timeout=60) for _ in range(50)]
    try:
        with socket.create_connection((host, int(port)), timeout=60) as broker:
            sent = time.monotonic()
            broker.sendall(_registration(77, 1))
            _send_storm(clients)
            registered = decode(_read_answer(broker))
            registered_s = time.monotonic() - sent
            storm_s = _storm_answered(clients, sent)
        assert registered.code == codes.SUCCESS, registered.remark
        assert registered_s < storm_s / 4, f"registered after {registered_s:.2f} s, the storm answered in {storm_s:.2f} s"
    finally:
        for sock in clients:
            sock.close()
        front.stop()


def _bounded_front(tmp_path, bound: int) -> tuple[FrontThread, str, str]:  # type: ignore[no-untyped-def]
    """A front over a 10-broker log whose bound of bytes read and not yet served is `bound`."""
    from remoting.front import ReadTurns
    cfg, log = _fleet_log(tmp_path, brokers=10)
    f = Front(cfg, log, lambda: log)  # type: ignore[arg-type]
    f.reads = ReadTurns(f.write_share, f.connections, held_max=bound)
    front = FrontThread(f)
    host, port = front.addr.rsplit(":", 1)
    return front, host, port


def test_a_front_behind_its_clients_holds_at_most_its_bound_of_unserved_bytes(tmp_path):
    """50 clients each send 500 route lookups at once (50 KB each, 2.5 MB in all), to a front
    whose bound of bytes read and not yet served is 64 KB: past it every connection is read 4 KB
    at a time, and a deferred one not at all until its turn (clients' connections are never
    stalled; a stall is for writers). What the front holds so stays near the bound (the bound,
    the read that crossed it, and a small read of each connection), not the storm's 2.5 MB, and
    every lookup is answered. Read whole, each light connection's next read added up to
    1.0 MB held. (The bytes of a connection whose client does not read its answers wait too, by
    flow control: one read each, as before turns were bounded.)"""
    from remoting.front import READ_BYTES, SMALL_READ_BYTES
    bound = 64 * 1024
    front, host, port = _bounded_front(tmp_path, bound)
    reads = front.front.reads
    clients = [socket.create_connection((host, int(port)), timeout=60) for _ in range(50)]
    held: list[int] = []

    async def sample() -> None:
        while True:
            held.append(reads.held)  # read past their turn and not yet served
            await asyncio.sleep(0.005)
    sampler = asyncio.run_coroutine_threadsafe(sample(), front._loop)
    try:
        _send_storm(clients)
        _storm_answered(clients, time.monotonic())
        most = bound + READ_BYTES + len(clients) * SMALL_READ_BYTES
        assert max(held) > bound // 2, "the storm never filled the front's bound: it tests nothing"
        assert max(held) <= most, f"the front held {max(held):,} bytes unserved (bound {bound:,}, at most {most:,})"
    finally:
        sampler.cancel()
        for sock in clients:
            sock.close()
        front.stop()


def test_a_connection_the_front_is_not_reading_is_not_closed_as_idle_and_holds_its_receive_buffer_at_most(tmp_path):
    """The idle sweep closes a connection neither read nor written for the idle timeout (0.5 s
    here), but not one whose client's bytes wait in the kernel while the front does not read it
    (stalled here, as when the front is behind): Netty would have read them. Swept as idle,
    12,193 of a 100,000-broker fleet's 15,000 connections were closed and their brokers
    unregistered.

    Meanwhile the kernel holds at most NAMESRV_REMOTING_SOCKET_RCVBUF (doubled, for its
    bookkeeping) of what the stalled client sent; the rest waits on the client's side, and once
    the connection is read again every request is answered. Autotuned, it held 128 KB of this
    test's 200 KB (net.ipv4.tcp_rmem's default, growing up to its maximum), and 13,636 stalled
    broker connections filled the host's TCP memory ('TCP: out of memory'): a reset of Spark's
    local socket restarted the job."""
    from remoting.front import _unread_bytes
    cfg, log = _fleet_log(tmp_path, brokers=10)
    f = Front(cfg, log, lambda: log)  # type: ignore[arg-type]
    f.idle_timeout_s = 0.5
    front = FrontThread(f)
    host, port = front.addr.rsplit(":", 1)

    async def on_loop(fn):  # type: ignore[no-untyped-def]
        return fn()

    def run(fn):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(on_loop(fn), front._loop).result(10)
    lookups = 2000
    storm = b"".join(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, i, ext={"topic": f"absent-{i}"})
                     for i in range(lookups))
    assert len(storm) > 6 * cfg.remoting_socket_rcvbuf
    try:
        with socket.create_connection((host, int(port)), timeout=30) as waiting, \
                socket.create_connection((host, int(port)), timeout=30) as idle:
            time.sleep(0.1)
            conns = run(lambda: sorted(f.connections.values(), key=lambda c: c.ident))
            assert len(conns) == 2
            run(conns[0].stall)  # the front behind: it reads this one no more for now
            waiting.sendall(storm)  # into the client's send buffer (autotuned: megabytes)
            time.sleep(1.5)  # three idle timeouts
            assert idle.recv(1) == b"", "the idle connection was not closed"
            unread = run(lambda: _unread_bytes(conns[0].transport))
            assert 0 < unread <= 2 * cfg.remoting_socket_rcvbuf, \
                f"{unread:,} bytes unread in the kernel (NAMESRV_REMOTING_SOCKET_RCVBUF={cfg.remoting_socket_rcvbuf:,})"
            run(conns[0].unstall)
            _storm_answered([waiting], time.monotonic(), lookups)
    finally:
        front.stop()


def test_a_lookup_on_a_quiet_connection_is_answered_while_connections_that_send_much_wait(tmp_path):
    """A client that sends one lookup at a time is read as its bytes arrive, past the turn's bound
    too, and is never stalled: the bound is for connections that send much. While 50 connections
    each pipeline 500 lookups (50 KB) into a front whose bound of unserved bytes is 64 KB, the
    quiet client's lookup is answered long before the storm is. Stalled with the rest, the
    clients' lookups in a 10,000 x 100 registration wave waited seconds (p50 3.2 s)."""
    front, host, port = _bounded_front(tmp_path, 64 * 1024)
    heavy = [socket.create_connection((host, int(port)), timeout=60) for _ in range(50)]
    try:
        with socket.create_connection((host, int(port)), timeout=60) as quiet:
            quiet.sendall(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, 1, ext={"topic": "T1"}))
            assert decode(_read_answer(quiet)).code == codes.SUCCESS
            sent = time.monotonic()
            _send_storm(heavy)
            quiet.sendall(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, 2, ext={"topic": "T2"}))
            answer = decode(_read_answer(quiet))
            quiet_s = time.monotonic() - sent
            storm_s = _storm_answered(heavy, sent)
        assert (answer.opaque, answer.code) == (2, codes.SUCCESS)
        assert quiet_s < storm_s / 4, f"the quiet lookup answered after {quiet_s:.2f} s, the storm in {storm_s:.2f} s"
    finally:
        for sock in heavy:
            sock.close()
        front.stop()


def test_a_clients_piled_up_lookups_are_served_ahead_of_brokers_that_send_much(tmp_path):
    """20 broker connections each pipeline 1,000 heartbeats (writers, about 150 KB each) into a
    front whose bound of unserved bytes is 64 KB, while a client sends 60 lookups at once (6 KB, not
    a small read) every 20 ms. Each of the client's batches is answered long before the storm is:
    a client's connection (it only reads) is never stalled, and deferred it is served ahead of the
    writers. Stalled and queued with them, a client's lookups piled up unread in the kernel, its
    next read was large, and it waited behind them again."""
    import threading

    front, host, port = _bounded_front(tmp_path, 64 * 1024)
    brokers = [socket.create_connection((host, int(port)), timeout=60) for _ in range(20)]
    beats = 1000
    storm = b"".join(encode_request(codes.BROKER_HEARTBEAT, i, ext={
        "clusterName": "C", "brokerName": "broker-with-a-long-name-1", "brokerAddr": "10.0.0.1:10911"})
        for i in range(beats))
    batch = b"".join(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, i, ext={"topic": "T1"}) for i in range(60))
    assert len(batch) > 4096
    waits: list[tuple[float, float]] = []  # (asked, waited)
    done = threading.Event()

    def client(sock: socket.socket) -> None:
        while not done.is_set():
            asked = time.monotonic()
            sock.sendall(batch)
            for _ in range(60):
                assert decode(_read_answer(sock)).code == codes.SUCCESS
            waits.append((asked, time.monotonic() - asked))
            time.sleep(0.02)
    try:
        with socket.create_connection((host, int(port)), timeout=60) as quiet:
            asking = threading.Thread(target=client, args=(quiet,), daemon=True)
            asking.start()
            time.sleep(0.2)
            sent = time.monotonic()
            _send_storm(brokers, storm)
            storm_s = _storm_answered(brokers, sent, beats, codes.SUCCESS)
            done.set()
            asking.join(30)
        during = [w for asked, w in waits if sent <= asked and asked + w <= sent + storm_s]
        assert len(during) >= 3, f"{len(during)} batches during a {storm_s:.2f} s storm"
        assert max(during) < storm_s / 8, f"a client's batch waited {max(during):.2f} s, the storm took {storm_s:.2f} s"
    finally:
        done.set()
        for sock in brokers:
            sock.close()
        front.stop()


def test_brokers_that_send_much_are_served_while_clients_keep_the_front_busy(tmp_path):
    """30 clients keep asking 60 lookups at a time (6 KB, not a small read) while 20 broker
    connections each pipeline 200 heartbeats into a front whose bound of unserved bytes is 64 KB.
    The heartbeats are answered in about 5 s, and the clients' lookups go on. Two things held
    them back before: the clients' held bytes (their connections are never stalled) kept the
    count past the bound, so the writers were stalled again as soon as they were read again
    (none answered in 60 s); and once the clients had spent a turn's bound, a deferred writer was
    served one request a turn (9-10 s); now the writers have a quarter of the bound of their own
    (half: 2.3 s, and the clients' lookups fell behind at 100,000 brokers). At 100,000 brokers the
    front answered 20 registrations a second while the job idled, and the brokers expired unread
    (by hand, 2026-11-30)."""
    import threading

    front, host, port = _bounded_front(tmp_path, 64 * 1024)
    beats = 200
    storm = b"".join(encode_request(codes.BROKER_HEARTBEAT, i, ext={
        "clusterName": "C", "brokerName": "broker-with-a-long-name-1", "brokerAddr": "10.0.0.1:10911"})
        for i in range(beats))
    batch = b"".join(encode_request(codes.GET_ROUTEINFO_BY_TOPIC, i, ext={"topic": "T1"}) for i in range(60))
    done = threading.Event()
    batches = [0]

    def client(sock: socket.socket) -> None:
        while not done.is_set():
            sock.sendall(batch)
            for _ in range(60):
                assert decode(_read_answer(sock)).code == codes.SUCCESS
            batches[0] += 1
    clients = [socket.create_connection((host, int(port)), timeout=60) for _ in range(30)]
    brokers = [socket.create_connection((host, int(port)), timeout=60) for _ in range(20)]
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in clients]
    try:
        for th in threads:
            th.start()
        time.sleep(0.2)
        before = batches[0]
        sent = time.monotonic()
        _send_storm(brokers, storm)
        storm_s = _storm_answered(brokers, sent, beats, codes.SUCCESS)
        during = batches[0] - before
        done.set()
        for th in threads:
            th.join(30)
        assert storm_s < 7, f"20 x {beats} heartbeats answered after {storm_s:.1f} s beside the clients"
        assert during >= len(clients), f"the clients' lookups stopped: {during} batches in {storm_s:.1f} s"
    finally:
        done.set()
        for sock in clients + brokers:
            sock.close()
        front.stop()
