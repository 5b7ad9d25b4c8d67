"""Writes: bearer-token check, publishing commands, and waiting until they are served.

A write is acknowledged only once the served snapshot has consumed the offsets its events
were written at (read-your-writes); `?wait=false` answers 202 at once with the offsets.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable
from typing import Any

from flask import current_app, request
from flask.typing import ResponseReturnValue

from conf import Config
from eventlog.publisher import ReconnectingPublisher
from routeinfo.snapshot import Snapshot
from schemas.fields import InvalidInput
from serving.context import store
from serving.errors import ApiError

PUBLISHER = "namesrv.publisher"
TOKEN = "namesrv.admin_token"


def authorized(view: Callable) -> Callable:
    """Refuse the request (401) unless it carries `Authorization: Bearer <admin token>`."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> ResponseReturnValue:
        expected = current_app.extensions.get(TOKEN)
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if expected is None:
            raise ApiError(401, "NO_PERMISSION", "writes are disabled: no admin token is configured "
                           "(set NAMESRV_ADMIN_TOKEN or create the token file)")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
            raise ApiError(401, "NO_PERMISSION", "a valid 'Authorization: Bearer <token>' header is required")
        result: ResponseReturnValue = view(*args, **kwargs)
        return result

    return wrapper


def json_body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    return body


def _publisher() -> ReconnectingPublisher:
    pub: ReconnectingPublisher = current_app.extensions[PUBLISHER]
    return pub


def publish(events: list[dict[str, Any]]) -> tuple[Snapshot | None, list[tuple[int, int]]]:
    """Publish `events`; return (the first snapshot that includes them, their offsets).

    The snapshot is None when the caller asked not to wait (`?wait=false`); a wait that runs
    out raises 504 with the offsets, so the client can still check later.
    """
    if not events:
        return store().current, []
    snaps = store()
    mark = snaps.mark()
    try:
        coords = _publisher().publish(events)
    except Exception as exc:  # Kafka unreachable or refusing: nothing was acknowledged
        current_app.logger.warning("publishing %d event(s) failed: %s", len(events), exc)
        raise ApiError(503, "SYSTEM_BUSY", f"the event log is unavailable ({type(exc).__name__}); "
                       "nothing was written, retry later") from None
    if request.args.get("wait", "true").lower() == "false":
        return None, coords
    cfg: Config = current_app.config["NAMESRV"]
    snap = snaps.wait_for(lambda s: snaps.serves(coords, mark), cfg.write_timeout_ms / 1000)
    if snap is None:
        raise ApiError(504, "SYSTEM_BUSY", f"published, but not materialized within {cfg.write_timeout_ms} ms",
                       offsets=offsets_json(coords))
    return snap, coords


def offsets_json(coords: list[tuple[int, int]]) -> list[dict[str, int]]:
    return [{"partition": p, "offset": o} for p, o in coords]


def accepted(coords: list[tuple[int, int]]) -> ResponseReturnValue:
    return {"code": "ACCEPTED", "offsets": offsets_json(coords)}, 202
