"""The life of the app's long-lived resources, in the manner of a Flask extension (flaskr's
`db.init_app`): `create_app` only wires them up, `init_app` registers them on the app, and the
entry point that serves calls `start` before the first request and `stop` at shutdown.

`start` is the snapshot store's first refresh (it blocks: a server answers only once it has read
the newest cut) and then its refresher thread; `stop` ends that thread and closes the Kafka
clients (the write path's publisher, the lag probe), which connect on first use. Nothing here is
per request: a request only dereferences the served cut (`serving.context`), so there is nothing
for `teardown_appcontext` to close.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from flask import Flask

from serving.context import EXTENSION
from snapshots.store import SnapshotStore

log = logging.getLogger(__name__)
RESOURCES = "namesrv.lifecycle"
STOP_TIMEOUT_S = 5.0  # how long `stop` waits for a refresh under way; the thread is a daemon either way


class Closable(Protocol):
    def close(self) -> None: ...


@dataclass
class _Resources:
    snapshots: SnapshotStore
    closing: tuple[Closable, ...]
    started: bool = False
    stopped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def init_app(app: Flask, snapshots: SnapshotStore, *, closing: Iterable[Closable] = ()) -> None:
    """Register `snapshots` (what `serving.context.store()` answers) and what `stop` closes. No I/O."""
    app.extensions[EXTENSION] = snapshots
    app.extensions[RESOURCES] = _Resources(snapshots, tuple(closing))


def _resources(app: Flask) -> _Resources:
    resources: _Resources = app.extensions[RESOURCES]
    return resources


def start(app: Flask) -> None:
    """Load the newest cut, then keep the store fresh on its refresher thread (a second call does
    nothing). A refresh that fails is not raised: the store keeps serving what it has, and
    /healthz reports the error, as every later refresh does."""
    r = _resources(app)
    with r.lock:
        if r.stopped:
            raise RuntimeError("this app was stopped; build a new one with create_app")
        if r.started:
            return
        r.snapshots.refresh()
        r.snapshots.start()
        r.started = True


def stop(app: Flask, *, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """End the refresher thread and close the Kafka clients; for an app never started too (a write
    may have connected its publisher). A second call does nothing; a stopped app is not started again."""
    r = _resources(app)
    with r.lock:
        if r.stopped:
            return
        r.stopped = True
    if not r.snapshots.stop(timeout_s):
        log.warning("the snapshot refresher did not end within %.1f s (a load under way); leaving it", timeout_s)
    for resource in r.closing:
        try:
            resource.close()
        except Exception as exc:  # one client that fails to close does not keep the others open
            log.warning("closing %s failed: %s: %s", type(resource).__name__, type(exc).__name__, exc)
    log.info("stopped the snapshot refresher and closed the Kafka clients")


@contextmanager
def running(app: Flask) -> Iterator[Flask]:
    """`start(app)` on entry, `stop(app)` on exit, whatever happened in between."""
    start(app)
    try:
        yield app
    finally:
        stop(app)
