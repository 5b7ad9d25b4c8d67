"""The wire side of the benchmarks' fleets (`bench.broker_fleet`, `bench.lookup_clients`): a
request's frame re-sent with a new opaque, a connection that reads answers without holding their
bodies, the timer that fires each actor at its own phase of a period, and the open-files limit a
fleet's connections need."""

from __future__ import annotations

import asyncio
import re
import resource
import struct
import time
from collections.abc import Callable, Sequence

from remoting.protocol import encode_request

_CODE = re.compile(rb'"code":(-?\d+)')
_OPAQUE = re.compile(rb'"opaque":(-?\d+)')


class Template:
    """A request's frame with its opaque left open: a broker re-sends the same bytes but for it."""

    def __init__(self, code: int, ext: dict[str, str] | None, body: bytes = b"", *, oneway: bool = False) -> None:
        mark = -1_234_567
        frame = encode_request(code, mark, ext=ext, body=body, oneway=oneway)
        header_len = struct.unpack_from(">I", frame, 4)[0] & 0xFFFFFF
        header = frame[8:8 + header_len]
        self.pre, self.post = header.split(b'"opaque":%d' % mark)
        self.body = body

    def frame(self, opaque: int) -> bytes:
        header = b'%s"opaque":%d%s' % (self.pre, opaque, self.post)
        return struct.pack(">iI", 4 + len(header) + len(self.body), len(header)) + header + self.body


class Conn(asyncio.Protocol):
    """One connection of the fleet. An answer's header is parsed and its body skipped as it
    arrives, never held: a 10,000-broker cluster info is 1.2 MB, and gathered whole in a buffer
    (`bytearray +=`), 1,300 of them a second took the fleet's loop a whole core, which then sent
    late and timed every lookup late (by hand, py-spy: 86 % of the loop on that line)."""

    def __init__(self, answered: Callable[[int, int], None], lost: Callable[[str], None]) -> None:
        self._answered, self._lost = answered, lost
        self.transport: asyncio.Transport | None = None
        self._head = bytearray()  # the frame's length fields and header, until whole
        self._skip = 0  # body bytes of the frame being read that are still to come
        self._got: tuple[int, int] | None = None  # its (opaque, code), said once its last byte came
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        pos, end, head = 0, len(data), self._head
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                if not self._skip:
                    self._done()
                continue
            take = min(_head_size(head) - len(head), end - pos)
            head += data[pos:pos + take]
            pos += take
            if len(head) < _head_size(head):  # the length fields came in: now the header's size is known
                continue
            (length,) = struct.unpack_from(">i", head, 0)
            header = bytes(head[8:8 + min(len(head) - 8, 512)])
            code, opaque = _CODE.search(header), _OPAQUE.search(header)
            self._got = (int(opaque.group(1)), int(code.group(1))) if code is not None and opaque is not None else None
            self._skip = max(0, 4 + length - len(head))
            head.clear()
            if not self._skip:
                self._done()

    def _done(self) -> None:
        if self._got is not None:
            self._answered(*self._got)
            self._got = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._lost(f"connection closed by the NameServer: {exc}")

    def send(self, frame: bytes) -> bool:
        if self.transport is None or self.lost:
            return False
        self.transport.write(frame)
        return True


def _head_size(head: bytearray) -> int:
    """How long a frame's head (its length fields and header) is, as far as `head` tells: the
    length fields first, then those and the header they announce."""
    return 8 if len(head) < 8 else 8 + (struct.unpack_from(">I", head, 4)[0] & 0xFFFFFF)


async def ticker(phases: Sequence[tuple[float, int]], period: float, fire: Callable[[int], None]) -> None:
    """Fire each actor at its own phase of `period` (a fraction drawn once), forever (cancelled by
    the fleet's `close`)."""
    if not phases:
        return
    t0 = time.monotonic()
    cycle = 0
    while True:
        base = t0 + cycle * period
        for phase, actor in phases:
            due = base + phase * period
            delay = due - time.monotonic()
            if delay > 0.001:
                await asyncio.sleep(delay)
            fire(actor)
        cycle += 1


def raise_file_limit() -> None:
    """The soft limit on open files up to the hard one (the fleet holds one per connection)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

