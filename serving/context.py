"""Per-request access to the app's shared resource: its SnapshotStore (kept in app.extensions)."""

from __future__ import annotations

from flask import Response, current_app, g, request

from routeinfo.snapshot import Snapshot
from schemas.fields import InvalidInput
from serving.errors import ApiError
from serving.fastpath import cut_headers
from serving.params import parse_instant, parse_int
from snapshots.store import SnapshotStore

EXTENSION = "namesrv.snapshots"


def store() -> SnapshotStore:
    snapshots: SnapshotStore = current_app.extensions[EXTENSION]
    return snapshots


def snapshot() -> Snapshot:
    """The cut this request reads: the served one, or a past one for `?asOf=` / `?snapshot=`.

    Taken once per request, so one request sees one cut.
    """
    cached: Snapshot | None = g.get("namesrv_snapshot")
    if cached is not None:
        return cached
    as_of, snap_id = request.args.get("asOf"), request.args.get("snapshot")
    if as_of is None and snap_id is None:
        snap = store().current
    else:
        if as_of is not None and snap_id is not None:
            raise InvalidInput("give either asOf or snapshot, not both")
        try:
            if snap_id is not None:
                snap = store().historic(snapshot_id=parse_int(snap_id, "snapshot"))
            else:
                assert as_of is not None
                snap = store().historic(as_of_ms=parse_instant(as_of, "asOf"))
        except LookupError as exc:
            raise ApiError(404, "SNAPSHOT_NOT_FOUND", str(exc)) from None
    g.namesrv_snapshot = snap
    return snap


def stamp_snapshot(response: Response) -> Response:
    """after_request: the id of the cut this answer came from (the request's, else the served one)."""
    snap: Snapshot | None = g.get("namesrv_snapshot")
    if snap is None:
        snap = store().current
    for name, value in cut_headers(snap, store()):
        response.headers[name] = value
    return response
