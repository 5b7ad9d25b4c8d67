"""The bench's fleet reads RocketMQ answers however the bytes arrive, without holding bodies."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from bench.fleet_wire import Conn
from remoting import codes
from remoting.protocol import encode_response_parts


def _answer(opaque: int, code: int, body: bytes) -> bytes:
    head, data = encode_response_parts(opaque, code, remark=None, ext=None, body=body)
    return bytes(head) + bytes(data)


def _read(stream: bytes, steps: Iterator[int]) -> tuple[list[tuple[int, int, int, int]], Conn]:
    """Feed `stream` in chunks of the given sizes: each answer said, with the chunk (from, to) it
    was said in."""
    said: list[tuple[int, int, int, int]] = []
    chunk = [0, 0]
    conn = Conn(lambda opaque, code: said.append((opaque, code, chunk[0], chunk[1])), lambda what: None)
    while chunk[1] < len(stream):
        chunk[0], chunk[1] = chunk[1], min(len(stream), chunk[1] + next(steps))
        conn.data_received(stream[chunk[0]:chunk[1]])
    return said, conn


def test_answers_are_said_once_whole_in_order_whatever_the_chunking():
    """A small answer, a 1.2 MB one, an empty one and a 70 KB one, cut at random points (the first
    answer and the next's header a byte at a time): each is said once, with its opaque and code,
    in the chunk that brought its last byte, and nothing of a body is kept."""
    frames = [_answer(1, codes.SUCCESS, b"{}"), _answer(2, codes.SUCCESS, b"x" * 1_200_000),
              _answer(3, codes.SYSTEM_BUSY, b""), _answer(4, codes.TOPIC_NOT_EXIST, b"y" * 70_000)]
    stream = b"".join(frames)
    ends = [sum(len(f) for f in frames[:i + 1]) for i in range(len(frames))]
    rnd = random.Random(7)
    sizes = [itertools.chain([1] * 300, itertools.repeat(65536))] + \
        [iter(lambda: rnd.choice((1, 7, 100, 4096, 65536, 300_000)), 0) for _ in range(40)]
    for steps in sizes:
        said, conn = _read(stream, steps)
        assert [(o, c) for o, c, _, _ in said] == [(1, codes.SUCCESS), (2, codes.SUCCESS), (3, codes.SYSTEM_BUSY),
                                                   (4, codes.TOPIC_NOT_EXIST)]
        assert all(start < end <= to for (_, _, start, to), end in zip(said, ends, strict=True))
        assert len(conn._head) == 0 and conn._skip == 0
