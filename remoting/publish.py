"""The front's way into the event log: every write published in arrival order, off the event loop.

Kafka's client blocks, and events must keep the order they arrived in, so one publishing thread
publishes them all; the event loop only queues and awaits. What queued while a produce request
was in flight goes out together in the next one: a fleet starting together registers in one
flush per round trip, not one per broker, and so shares a batch of the job. When Kafka is away,
writes are refused at once for a while instead of each waiting out the connect timeout (two in
a row outlasted mqadmin's 5 s). The coalesced liveness signals go out the same way, once per
window.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client import Counter

from eventlog.publisher import EventPublisher, ReconnectingPublisher
from liveness.coalescing import Coalescer

log = logging.getLogger("namesrv.remoting")
RETRY_AFTER_FAILURE_S = 5.0


class PublishFailed(Exception):
    """Kafka did not acknowledge; nothing was written."""


class PublishPipeline:
    """The publisher, its one thread and the queue of writes waiting for it. `bootstrap` names
    Kafka in refusals; `forwarded` counts the liveness signals published."""

    def __init__(self, bootstrap: str, publisher_factory: Callable[[], EventPublisher], forwarded: Counter) -> None:
        self.bootstrap = bootstrap
        self._forwarded = forwarded
        self._publisher = ReconnectingPublisher(publisher_factory)
        self._failure: tuple[float, str] | None = None  # (when, remark) of the last failed publish
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="publish")  # one thread: events keep their order
        self._queue: list[tuple[list[dict[str, Any]], asyncio.Future[list[tuple[int, int]]]]] = []
        self._queue_lock = threading.Lock()
        self._draining = False
        self._last_drop_log = 0.0

    def start(self) -> None:
        """Connect to Kafka on the publishing thread, first, before the first write needs it."""
        asyncio.get_running_loop().run_in_executor(self._pool, self._connect_publisher)

    def close(self) -> None:
        """Let the publishing thread finish what it has, then close the publisher."""
        self._pool.shutdown(wait=True)
        self._publisher.close()

    async def publish(self, events: list[dict[str, Any]], *,
                      signals: list[dict[str, Any]] | None = None) -> list[tuple[int, int]]:
        """Publish `events` in arrival order. Whatever other requests queued meanwhile goes in the
        same produce request (`_drain`). `signals`: liveness signals that arrived before `events`
        and waited in the coalescing window, queued ahead of them (their failure drops them, as
        `forward`'s does); the coordinates returned are those of `events`."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[tuple[int, int]]] = loop.create_future()
        with self._queue_lock:
            if signals:
                ahead: asyncio.Future[list[tuple[int, int]]] = loop.create_future()
                count = len(signals)

                def settled(f: asyncio.Future[list[tuple[int, int]]]) -> None:
                    self._forwarded_or_dropped(count, f.exception())

                ahead.add_done_callback(settled)
                self._queue.append((signals, ahead))
            self._queue.append((events, done))
            start, self._draining = not self._draining, True
        if start:
            loop.run_in_executor(self._pool, self._drain, loop)
        return await done

    async def publish_logged(self, events: list[dict[str, Any]], what: str, *,
                             signals: list[dict[str, Any]] | None = None) -> None:
        """Publish `events` nobody waits for (`signals` as `publish` takes them): a failure is only logged."""
        try:
            await self.publish(events, signals=signals)
        except PublishFailed as exc:
            log.warning("%s failed: %s", what, exc)

    async def forward_every(self, period_s: float, signals: Coalescer) -> None:
        """Publish the coalesced liveness signals once per window."""
        while True:
            await asyncio.sleep(period_s)
            await self.forward(signals)

    async def forward(self, signals: Coalescer) -> None:
        """Publish what waits in `signals` now. Signals Kafka refused are dropped, not retried (their
        brokers send more), with a warning at most every 30 s."""
        batch = signals.flush()
        if not batch:
            return
        try:
            await self.publish(batch)
            self._forwarded_or_dropped(len(batch), None)
        except PublishFailed as exc:
            self._forwarded_or_dropped(len(batch), exc)

    def _forwarded_or_dropped(self, count: int, failure: BaseException | None) -> None:
        if failure is None:
            self._forwarded.inc(count)
            return
        now = time.monotonic()
        if now - self._last_drop_log > 30:
            self._last_drop_log = now
            log.warning("dropped %d heartbeat(s): %s", count, failure)

    # ------------------------------------------------------------ on the publishing thread

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """Everything queued, in order, one publish per round, until nothing waits."""
        while True:
            with self._queue_lock:
                queued, self._queue = self._queue, []
                if not queued:
                    self._draining = False
                    return
            try:
                results: list[Any] = list(self._publish_sync([events for events, _ in queued]))
            except PublishFailed as exc:
                results = [exc] * len(queued)
            settled = [(done, result) for (_, done), result in zip(queued, results, strict=True)]
            # acknowledged: the events (their encodings went with the publisher's call) are not
            # held by this thread over the next round's publish
            del queued
            for done, result in settled:
                loop.call_soon_threadsafe(_settle, done, result)

    def _connect_publisher(self) -> None:
        """A failure to connect counts as a failed publish: the writes that queued behind the
        attempt, and those of the next RETRY_AFTER_FAILURE_S, are refused at once instead of each
        waiting out the connect timeout again."""
        try:
            self._publisher.connect()
        except Exception as exc:
            self._failure = (time.monotonic(), self._unavailable(exc))
            log.warning("Kafka at %s not reachable at start (%s: %s); writes will connect when they come",
                        self.bootstrap, type(exc).__name__, exc)

    def _publish_sync(self, groups: list[list[dict[str, Any]]]) -> list[list[tuple[int, int]]]:
        """After a failure, writes fail at once for RETRY_AFTER_FAILURE_S instead of each waiting
        out the connect timeout again."""
        if self._failure is not None and time.monotonic() - self._failure[0] < RETRY_AFTER_FAILURE_S:
            raise PublishFailed(self._failure[1])
        try:
            coords = self._publisher.publish_groups(groups)
        except Exception as exc:
            remark = self._unavailable(exc)
            self._failure = (time.monotonic(), remark)
            raise PublishFailed(remark) from None
        self._failure = None
        return coords

    def _unavailable(self, exc: Exception) -> str:
        return (f"the event log (Kafka at {self.bootstrap}) is unavailable ({type(exc).__name__}); "
                "nothing was written, retry later")


def _settle(done: asyncio.Future[Any], result: Any) -> None:
    """A queued publish's outcome, on the event loop (its requester may have gone meanwhile)."""
    if done.done():
        return
    if isinstance(result, BaseException):
        done.set_exception(result)
    else:
        done.set_result(result)
