"""Blueprint: route history for data engineers and auditors (snapshots, change log, diffs).

Every other read endpoint also takes `?asOf=` / `?snapshot=` (see serving.context.snapshot).
"""

from __future__ import annotations

import json
from functools import reduce

import pyarrow.compute as pc
from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue

from routeinfo import route_reads
from schemas import tables as t
from schemas.fields import InvalidInput
from serving.context import store
from serving.errors import ApiError
from serving.params import parse_instant, parse_int

bp = Blueprint("history", __name__)
MAX_LIMIT = 1000


def _paging() -> tuple[int, int]:
    limit = parse_int(request.args.get("limit", "100"), "limit")
    offset = parse_int(request.args.get("offset", "0"), "offset")
    if not 1 <= limit <= MAX_LIMIT or offset < 0:
        raise InvalidInput(f"limit must be 1..{MAX_LIMIT} and offset >= 0")
    return limit, offset


@bp.get("/history/snapshots")
def snapshots() -> ResponseReturnValue:
    limit, _ = _paging()
    before = request.args.get("before")
    rows, total = store().reader_for_history().list_rows(
        limit=limit, before=None if before is None else parse_int(before, "before"))
    out = [{"snapshotId": r["snapshotId"], "batchId": r["batchId"], "commitTime": r["commitTime"],
            "eventCount": r["eventCount"], "sourceOffsets": json.loads(r["sourceOffsets"]),
            "versions": {x.name: r[t.version_column(x)] for x in t.CUT_TABLES}} for r in rows]
    body = {"snapshots": out, "total": total}
    if len(out) == limit:
        body["next"] = f"/history/snapshots?limit={limit}&before={out[-1]['snapshotId']}"
    return jsonify(body)


@bp.get("/history/changes")
def changes() -> ResponseReturnValue:
    limit, offset = _paging()
    args = request.args
    conditions = []
    if "since" in args:
        conditions.append(pc.field("time") >= parse_instant(args["since"], "since"))
    if "until" in args:
        conditions.append(pc.field("time") <= parse_instant(args["until"], "until"))
    for param, column in (("topic", "topic"), ("brokerName", "brokerName"), ("cluster", "clusterName"),
                          ("kind", "kind"), ("namespace", "namespace")):
        if param in args:
            conditions.append(pc.field(column) == args[param])
    current = store().current
    version = current.versions.get(t.ROUTE_CHANGES.name)
    if version is None:
        return jsonify(changes=[], total=0)
    flt = reduce(lambda a, b: a & b, conditions) if conditions else None
    rows = store().reader_for_history().changes(version, flt)
    page = rows[offset:offset + limit]
    for r in page:
        for col in ("before", "after"):
            r[col] = None if r[col] is None else json.loads(r[col])
    body = {"changes": page, "total": len(rows)}
    if offset + limit < len(rows):
        body["next"] = f"offset={offset + limit}&limit={limit}"
    return jsonify(body)


@bp.get("/history/diff")
def diff() -> ResponseReturnValue:
    if "from" not in request.args or "to" not in request.args:
        raise InvalidInput("both 'from' and 'to' instants are required")
    try:
        before = store().historic(as_of_ms=parse_instant(request.args["from"], "from"))
        after = store().historic(as_of_ms=parse_instant(request.args["to"], "to"))
    except LookupError as exc:
        raise ApiError(404, "SNAPSHOT_NOT_FOUND", str(exc)) from None
    return jsonify(route_reads.diff(before, after))
