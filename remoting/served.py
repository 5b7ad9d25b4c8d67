"""Waiting for the served cut to include a write: the promise behind a write's answer.

RocketMQ answers an admin write or a registration once its own tables have it, so the next lookup
sees it. Here the tables are the job's, a cut behind the event log: such a write is answered
once the served cut includes its log coordinates, or after a bound (NAMESRV_REMOTING_WRITE_WAIT_MS)
with the cut of that moment. A starting fleet's thousand first registrations wait together, and
each polling the store on its own cost the front more CPU than answering them (3.7 s for 1,000):
one watcher looks at every waiter, and only when the served offsets moved or a bound passed.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Awaitable, Callable
from typing import Any

from routeinfo.snapshot import Snapshot
from snapshots.freshness import LogMark, includes

# a write waiting for the served cut to include it: (coords, log mark taken before publishing,
# deadline, answer)
Waiting = tuple[list[tuple[int, int]], LogMark, float, "asyncio.Future[Snapshot]"]


class ServedWaiter:
    """`store` is the served-snapshot holder (snapshots.store.SnapshotStore); `bound_s` how long a
    write waits at most; `spawn` runs the watcher as one of its owner's tasks (cancelled with them)."""

    def __init__(self, store: Any, bound_s: float, spawn: Callable[[Awaitable[Any]], None]) -> None:
        self.store = store
        self.bound_s = bound_s
        self._spawn = spawn
        # writes waiting for the served cut to include them, in deadline order
        self._waiting: collections.deque[Waiting] = collections.deque()
        self._watching = False

    async def served(self, coords: list[tuple[int, int]], mark: LogMark) -> Snapshot:
        """The served cut once it includes `coords` (published after `mark` was taken), or the
        current one after the bound."""
        if self.store.serves(coords, mark):
            return self.store.current  # type: ignore[no-any-return]
        done: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        self._waiting.append((coords, mark, time.monotonic() + self.bound_s, done))
        if not self._watching:
            self._watching = True
            self._spawn(self._watch())
        return await done

    async def _watch(self) -> None:
        """One watcher for every write waiting to be served. The waiters are looked at again only
        when the served offsets moved; otherwise only those whose bound passed, from the front."""
        seen: LogMark | None = None
        try:
            while self._waiting:
                self.store.poke()
                await asyncio.sleep(0.02)
                snap: Snapshot = self.store.current
                served, now = self.store.served_mark(), time.monotonic()
                moved, seen = served != seen, served
                if moved:
                    still: collections.deque[Waiting] = collections.deque()
                    for coords, mark, deadline, done in self._waiting:
                        if done.done():
                            continue
                        if includes(served, coords, mark) or now >= deadline:
                            done.set_result(snap)
                        else:
                            still.append((coords, mark, deadline, done))
                    self._waiting = still
                # deadlines come in arrival order (one bound for all): the passed ones are at the front
                while self._waiting and self._waiting[0][2] <= now:
                    done = self._waiting.popleft()[3]
                    if not done.done():
                        done.set_result(snap)
        finally:
            self._watching = False
