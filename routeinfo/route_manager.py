"""The route write path's one entry point: a broker group's events in order, then expiry.

This is what RocketMQ's RouteInfoManager does under its write lock, for one brokerName: the
streaming job groups events by brokerName and calls `apply` with the group's state, its new
events in Kafka order, and the batch's processing time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from routeinfo import housekeeping
from routeinfo.route_writes import HANDLERS, Rejected, Result, RoutingConfig
from routeinfo.state import GroupState
from schemas.fields import MASTER_ID


def apply(state: GroupState | None, events: Iterable[dict[str, Any]], now_ms: int,
          cfg: RoutingConfig, *, expiry_ms: int | None = None,
          heard_since: int | None = None) -> tuple[GroupState | None, Result]:
    """Apply `events` (normalised, in Kafka order) to a group, then expire at `expiry_ms`
    (default `now_ms`; the step passes the batch's log clock, which lags `now_ms` while the job
    reads a backlog). `heard_since`: the event log's outage floor (housekeeping: no entry is
    judged silent for time in which the log could not be read).

    Before each event, entries already expired at that event's time are expired first, as
    RocketMQ's periodic scan would have done; so the outcome does not depend on how events
    are cut into micro-batches. Event times are receive times and only move forward here:
    an event stamped earlier than one before it is judged at the later time. Returns None as
    the state once the group holds nothing.
    """
    res = Result()
    st = state
    clock = 0
    for i, e in enumerate(events):
        if st is None:
            st = GroupState(broker_name=e["brokerName"])
        clock = max(clock, e["time"])
        res.event_index, res.time = None, clock
        housekeeping.expire(st, clock, cfg, res, heard_since)
        res.event_index = i
        master_before, existed = st.master(), st.broker is not None
        try:
            HANDLERS[e["type"]](st, e, cfg, res)
        except Rejected as exc:
            res.rejected.append(str(exc))
            res.change("REGISTRATION_REJECTED", cluster=e.get("clusterName"), addr=e.get("brokerAddr"),
                       broker_id=e.get("brokerId"), after=str(exc))
        master_after = st.master()
        # A group that already existed got a (different) master: a switch, or a new master
        # after the old one left (its BROKER_UNREGISTERED/EXPIRED row names the old address).
        if existed and st.broker is not None and master_after is not None and master_before != master_after:
            res.change("MASTER_CHANGED", cluster=st.broker.cluster, addr=master_after, broker_id=MASTER_ID,
                       before=master_before, after=master_after)
    if st is not None:
        expiry = now_ms if expiry_ms is None else expiry_ms
        res.event_index, res.time = None, expiry
        housekeeping.expire(st, expiry, cfg, res, heard_since)
        housekeeping.flush_live(st, now_ms, cfg, res)
        if st.is_empty():
            st = None
    return st, res
