"""GET /topics/<topic>/route answered from the served cut's encoded bodies without entering
Flask: `fast_route_body`, which the HTTP server's event loop asks first (`serving.asgi`), and
`RouteBodies`, the same as WSGI middleware (for the app under any WSGI server).

Clients ask for the same topics' routes over and over (every producer and consumer, every
30 s); Flask's routing, request and response objects cost more than the answer itself. A plain
lookup (no query string: no `zone`, no time travel) of a topic the cut has takes this path: from
the shared cut file, every topic, its first lookup included; from a cut loaded from Delta, those
whose body an earlier lookup stored (serving.routes). A name that is not plain ASCII or holds a
slash goes through Flask, which decodes the path as the WSGI server could not and routes no slash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from routeinfo import route_reads
from routeinfo.snapshot import Snapshot
from schemas.metrics import FAST_PATH_ENDPOINT
from snapshots.store import SnapshotStore

ENDPOINT_KEY = "namesrv.endpoint"  # where serving.metrics reads the endpoint name
# Every answer names the cut it came from, so answers of different replicas can be compared.
SNAPSHOT_HEADER = "X-Namesrv-Snapshot"
# ... and how long ago this replica last read the store (a cut-off replica answers from its last cut).
STALENESS_HEADER = "X-Namesrv-Staleness-Ms"

_PREFIX, _SUFFIX = "/topics/", "/route"


def cut_headers(snap: Snapshot, store: SnapshotStore) -> list[tuple[str, str]]:
    """The headers every answer carries: the cut it came from and how stale this replica is (each
    left out while unknown: no cut served yet, the store never read)."""
    staleness = store.staleness_ms()
    return ([] if snap.snapshot_id is None else [(SNAPSHOT_HEADER, str(snap.snapshot_id))]) + \
        ([] if staleness is None else [(STALENESS_HEADER, str(staleness))])


def fast_route_body(snapshots: SnapshotStore, method: str, path: str, query: str) -> tuple[bytes, Snapshot] | None:
    """The answer of a lookup this path takes (module docstring) and the cut it came from; None
    when Flask answers it. `path` as the server decoded it (WSGI's PATH_INFO, RSGI's `path`:
    alike for the plain ASCII names taken here)."""
    if method != "GET" or query or not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    topic = path[len(_PREFIX):-len(_SUFFIX)]
    snap = snapshots.current
    body = route_reads.cached_route_body(snap, topic) if topic.isascii() and "/" not in topic else None
    return None if body is None else (body, snap)


class RouteBodies:
    def __init__(self, app: Callable[..., Iterable[bytes]], snapshots: SnapshotStore) -> None:
        self.app = app
        self.snapshots = snapshots

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        found = fast_route_body(self.snapshots, environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""),
                                environ.get("QUERY_STRING", ""))
        if found is not None:
            body, snap = found
            environ[ENDPOINT_KEY] = FAST_PATH_ENDPOINT
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                                      *cut_headers(snap, self.snapshots)])
            return [body]
        return self.app(environ, start_response)
