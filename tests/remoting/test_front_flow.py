"""The remoting front's flow control over the in-memory log (no Kafka, Spark or Delta): a client
that pipelines requests and does not read the answers is not answered faster than it reads."""

from __future__ import annotations

import asyncio
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
    cfg = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_REMOTING_PORT": "0"})
    log = InMemoryLog(cfg.broker_timeout_ms)
    log.publish([ev.register_broker_event(cluster="C", broker_name=f"broker-with-a-long-name-{g}", broker_id=0,
                                          addr=f"10.0.{g // 250}.{g % 250}:10911", topics={f"T{g}": {}, f"U{g}": {}},
                                          timestamp=int(time.time() * 1000))
                 for g in range(2000)])
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
