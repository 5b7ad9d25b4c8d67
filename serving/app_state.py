"""The one accessor for the app's shared resource: its SnapshotStore (kept in app.extensions)."""

from __future__ import annotations

from datetime import datetime, timezone

from flask import current_app, g, request

from schemas.events import InvalidEvent
from serving.errors import ApiError
from serving.snapshot import Snapshot, SnapshotStore

EXTENSION = "namesrv.snapshots"


def store() -> SnapshotStore:
    return current_app.extensions[EXTENSION]


def snapshot() -> Snapshot:
    """The cut this request reads: the served one, or a past one for `?asOf=` / `?snapshot=`.

    Taken once per request, so one request sees one cut.
    """
    cached = g.get("namesrv_snapshot")
    if cached is not None:
        return cached
    as_of, snap_id = request.args.get("asOf"), request.args.get("snapshot")
    if as_of is None and snap_id is None:
        snap = store().current
    else:
        if as_of is not None and snap_id is not None:
            raise InvalidEvent("give either asOf or snapshot, not both")
        try:
            if snap_id is not None:
                snap = store().historic(snapshot_id=parse_int(snap_id, "snapshot"))
            else:
                snap = store().historic(as_of_ms=parse_instant(as_of, "asOf"))
        except LookupError as exc:
            raise ApiError(404, "SNAPSHOT_NOT_FOUND", str(exc)) from None
    g.namesrv_snapshot = snap
    return snap


def parse_int(text: str, name: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidEvent(f"{name} must be an integer, not {text[:40]!r}") from None
    if not lo <= value <= hi:
        raise InvalidEvent(f"{name} must be between {lo} and {hi}")
    return value


def parse_instant(text: str, name: str) -> int:
    """ISO-8601 (naive = UTC) or epoch milliseconds -> epoch milliseconds."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return parse_int(text, name)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return int(moment.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        raise InvalidEvent(f"{name} must be ISO-8601 or epoch milliseconds, not {text[:40]!r}") from None
