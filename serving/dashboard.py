"""Blueprint: the read-only web dashboard (`/dashboard`) and the two paged lookups it needs.

The page is plain HTML, CSS and JavaScript shipped in `serving/dashboard_static/` (no build step);
everything else it shows comes from the public API (`/topics/<t>/route`, `/history/*`, and `/risks`
for the Risks page: the cut's risks by severity with since when each holds, filtered by kind),
with `asOf` for the instant picked. Only the lists that grow with the fleet have their own endpoints
here, paged on the server, so a 10,000-group cluster costs the browser one page of rows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request, send_from_directory
from flask.typing import ResponseReturnValue

from routeinfo.snapshot import Snapshot
from schemas.fields import InvalidInput
from serving.context import snapshot
from serving.params import parse_int

bp = Blueprint("dashboard", __name__)
STATIC = Path(__file__).resolve().parent / "dashboard_static"
SORTED_TOPICS = "namesrv.dashboard.sorted_topics"  # app extension: (snapshot id, sorted names) of the last cut asked
SORTED_GROUPS = "namesrv.dashboard.sorted_groups"  # app extension: (snapshot id, (cluster, name) pairs) likewise
MAX_PAGE = 500
DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key of a name with its runs of digits compared as numbers: dash-2, dash-102, dash-1002
    (as text, dash-1002 came before dash-102). The split alternates text and number, so two keys
    never compare a number with text; names whose numbers are equal (a01, a1) fall back to the text."""
    parts: list[str | int] = list(DIGITS.split(name))
    parts[1::2] = [int(p) for p in parts[1::2]]
    return tuple(parts), name


@bp.get("/dashboard")
def page() -> Response:
    return send_from_directory(STATIC, "index.html", max_age=0)


@bp.get("/dashboard/static/<name>")
def asset(name: str) -> Response:
    return send_from_directory(STATIC, name, max_age=0)


def _page() -> tuple[str, int, int]:
    q = request.args.get("q", "").strip().lower()
    offset = parse_int(request.args.get("offset", "0"), "offset")
    limit = parse_int(request.args.get("limit", "100"), "limit")
    if offset < 0 or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"offset must be >= 0 and limit 1..{MAX_PAGE}")
    return q, offset, limit


def _cut(snap: Snapshot) -> dict[str, Any]:
    return {"snapshotId": snap.snapshot_id, "commitTime": snap.commit_time}


@bp.get("/dashboard/api/groups")
def groups() -> ResponseReturnValue:
    """Broker groups (cluster, name, members with their last heartbeat), filtered by a substring
    of the cluster, group name or an address, sorted by cluster then name (numbers in a name as
    numbers: `natural_key`), one page."""
    q, offset, limit = _page()
    snap = snapshot()
    rows = []
    for cluster, name in _sorted_groups(snap):
        data = snap.brokers.get(name)
        if data is None:
            continue
        addrs = data["brokerAddrs"]
        if q and q not in cluster.lower() and q not in name.lower() and not any(q in a for a in addrs.values()):
            continue
        rows.append((cluster, name, data))
    out = []
    for cluster, name, data in rows[offset:offset + limit]:
        members = []
        for bid, addr in sorted(data["brokerAddrs"].items(), key=lambda kv: int(kv[0])):
            live = snap.live_by_addr.get((cluster, addr))
            members.append({"brokerId": int(bid), "addr": addr,
                            "lastUpdateTimestamp": None if live is None else live["lastUpdateTimestamp"],
                            "heartbeatTimeoutMillis": None if live is None else live["heartbeatTimeoutMillis"]})
        out.append({"cluster": cluster, "brokerName": name, "zoneName": data.get("zoneName"), "members": members})
    return jsonify(total=len(rows), offset=offset, groups=out, clusters=len(snap.clusters), **_cut(snap))


@bp.get("/dashboard/api/topics")
def topics() -> ResponseReturnValue:
    """Topic names containing a substring (case-insensitive), sorted, one page; or, with `exact`,
    that one name if the cut has it (the route panel asks before it looks a route up)."""
    q, offset, limit = _page()
    snap = snapshot()
    exact = request.args.get("exact")
    if exact is not None:
        found = [exact] if snap.topics.get(exact) is not None else []
        return jsonify(total=len(found), offset=0, topics=found, **_cut(snap))
    names = _sorted_topics(snap)
    matches = [t for t in names if q in t.lower()] if q else names
    return jsonify(total=len(matches), offset=offset, topics=matches[offset:offset + limit], **_cut(snap))


def _sorted_groups(snap: Snapshot) -> list[tuple[str, str]]:
    """(cluster, broker name) in natural order, sorted once per cut (100,000 names take a few tenths
    of a second), kept for the last cut asked."""
    cached = current_app.extensions.get(SORTED_GROUPS)
    if cached is not None and cached[0] == snap.snapshot_id and snap.snapshot_id is not None:
        pairs: list[tuple[str, str]] = cached[1]
        return pairs
    pairs = [(cluster, name) for cluster in sorted(snap.clusters, key=natural_key)
             for name in sorted(snap.clusters[cluster], key=natural_key)]
    current_app.extensions[SORTED_GROUPS] = (snap.snapshot_id, pairs)
    return pairs


def _sorted_topics(snap: Snapshot) -> list[str]:
    """Sorted once per cut (a million names take a second to sort), kept for the last cut asked."""
    cached = current_app.extensions.get(SORTED_TOPICS)
    if cached is not None and cached[0] == snap.snapshot_id and snap.snapshot_id is not None:
        names: list[str] = cached[1]
        return names
    names = sorted(snap.topics)
    current_app.extensions[SORTED_TOPICS] = (snap.snapshot_id, names)
    return names
