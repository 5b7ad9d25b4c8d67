"""Blueprint: /healthz, what an operator or a load balancer asks first."""

from __future__ import annotations

import time

from flask import Blueprint, jsonify

from serving.context import store

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    s = store()
    snap = s.current
    now = time.time()
    age_ms = None if snap.commit_time is None else int(now * 1000) - snap.commit_time
    status = "ok"
    if s.last_error is not None:
        status = "degraded"
    elif snap.snapshot_id is None:
        status = "starting"
    body = {
        "status": status,
        "snapshotId": snap.snapshot_id,
        "snapshotCommitTime": snap.commit_time,
        "snapshotAgeMs": age_ms,
        "sourceOffsets": s.served_offsets(),
        "jobProgress": s.progress,
        "lastCheckAgeMs": None if s.last_check is None else int((now - s.last_check) * 1000),
        "lastError": s.last_error,
    }
    return jsonify(body), 200 if status != "degraded" else 503
