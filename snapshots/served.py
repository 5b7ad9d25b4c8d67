"""Newly served cuts handed to an asyncio loop: the one notifier of a serving process.

The store's refresher thread swaps a new cut in (`SnapshotStore.refresh`); whoever answers from
an event loop (the HTTP server's watch streams, `serving.watch`) wants to know at once, on its
loop, without polling the store. `ServedCuts` is a refresh listener of the store that, after a
refresh that swapped a cut in, schedules the loop's callback with that cut
(`call_soon_threadsafe`, so cuts reach the loop in the order they were served). One per process:
every watcher is woken by the loop's one callback, never by a wait of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from routeinfo.snapshot import Snapshot
from snapshots.store import SnapshotStore

log = logging.getLogger(__name__)


class ServedCuts:
    """Calls `callback(cut)` on `loop` for every cut the store serves from `attach` on."""

    def __init__(self, store: SnapshotStore) -> None:
        """Registers itself as the store's refresh listener: build it before the store starts
        (`SnapshotStore.add_listener`)."""
        self._target: tuple[asyncio.AbstractEventLoop, Callable[[Snapshot], None]] | None = None
        store.add_listener(self._refreshed)

    def attach(self, loop: asyncio.AbstractEventLoop, callback: Callable[[Snapshot], None]) -> None:
        """From now on, each newly served cut is handed to `callback` on `loop`."""
        self._target = (loop, callback)

    def detach(self) -> None:
        self._target = None

    def _refreshed(self, cut: Snapshot, swapped: bool) -> None:
        """The store's listener, on its refresher thread."""
        target = self._target
        if not swapped or target is None:
            return
        loop, callback = target
        try:
            loop.call_soon_threadsafe(callback, cut)
        except RuntimeError:  # the loop closed (the server is stopping): nobody is watching any more
            log.debug("served cut %s not handed over: the loop is closed", cut.snapshot_id)
