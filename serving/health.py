"""Blueprint: the probes an operator or a load balancer asks first.

`/livez`: the process answers. `/readyz`: it serves a cut and the job behind it is running
(`SnapshotStore.not_ready`); 503 with the reason otherwise. `/healthz`: the detailed status.
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify

from serving.context import store

bp = Blueprint("health", __name__)


@bp.get("/livez")
def livez() -> Response:
    return jsonify(status="alive")


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    s = store()
    reason = s.not_ready()
    if reason is not None:
        return jsonify(status="not ready", reason=reason, snapshotId=s.current.snapshot_id), 503
    return jsonify(status="ready", snapshotId=s.current.snapshot_id), 200


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
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
        "ready": s.not_ready() is None,
        "snapshotId": snap.snapshot_id,
        "snapshotCommitTime": snap.commit_time,
        "snapshotAgeMs": age_ms,
        "sourceOffsets": s.served_offsets(),
        "jobProgress": s.progress,
        "jobStartedAt": s.job_started,
        "lastCheckAgeMs": None if s.last_check is None else int((now - s.last_check) * 1000),
        "lastError": s.last_error,
    }
    return jsonify(body), 200 if status != "degraded" else 503
