"""The one accessor for the app's shared resource: its SnapshotStore (kept in app.extensions)."""

from __future__ import annotations

from flask import current_app

from serving.snapshot import Snapshot, SnapshotStore

EXTENSION = "namesrv.snapshots"


def store() -> SnapshotStore:
    return current_app.extensions[EXTENSION]


def snapshot() -> Snapshot:
    """The cut this request reads; taken once so one request sees one cut."""
    return store().current
