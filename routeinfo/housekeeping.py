"""Broker expiry, RocketMQ's `scanNotActiveBroker` (§5.1), and when a group must be looked at again.

RocketMQ scans its live table every 5 s and unregisters every broker whose
`lastUpdateTimestamp + heartbeatTimeoutMillis` has passed. Here no process scans: each broker
group is a group of Spark's stateful operator, and a group is only called when it has records
or when its timeout fires. One silent broker, end to end:

1. Its last REGISTER_BROKER or BROKER_HEARTBEAT set `LiveInfo.last_update` to the event's time
   (`route_writes.heartbeat`, `route_writes._refresh_live`).
2. After every call, `next_deadline` computes when the group must be called again without
   data: its earliest `last_update + timeout_ms` (+1 ms, expiry is strict), or the end of the
   broker_live flush window. The step (`pipelines/step.py`) hands it to Spark with
   `GroupState.setTimeoutDuration` and also emits it as a `_deadline` output row.
3. The sink (`pipelines/sink.py`) keeps the newest deadline per group and publishes the
   earliest one as `nextDeadline` in `<warehouse>/_progress.json` (`schemas/progress.py`).
   A restarted job starts that book from `broker_live` and looks again every `RECHECK_MS`
   at groups not heard from since (`liveness/deadlines.py`).
4. Spark's own no-data batches are off (they would run every trigger). The Kafka source asks
   the pure admission policy (`liveness/admission.py`) each trigger; once `nextDeadline` is
   due it admits a batch without records by bumping a virtual `tick` offset.
5. In that batch Spark calls the group with `hasTimedOut`; `route_manager.apply` runs
   `expire` at the batch's processing time, which removes the address like an UNREGISTER
   (`route_writes.remove_address`: live entry, BrokerData address, and the group's queues
   and cluster membership when it was the last address) and records BROKER_EXPIRED.
6. The sink writes the group's changed rows and a `snapshots` row; the HTTP server swaps in
   that cut within its refresh interval, and the broker is gone from routes.

Before each event, `apply` also expires what had expired by that event's time, as RocketMQ's
periodic scan would have, so the outcome does not depend on how events fall into batches.

`heard_since` (the log's outage floor): the moment the job could read the event log again after
it could not. While the log was unreachable no heartbeat could reach it, so that time is not
silence: an entry is judged from max(its last update, heard_since), which gives every broker a full
timeout after the log came back (docs/semantics.md §15.6). None: no outage known.
"""

from __future__ import annotations

from routeinfo.route_writes import Result, RoutingConfig, remove_address
from routeinfo.state import GroupState, PendingRegistration
from schemas import tables as t

# How long a due expiry may go unlooked-at when its exact time is not known yet (a backlog being
# read, a restarted job that has not heard the group): RocketMQ's NameServer scans every 5 s.
RECHECK_MS = 5_000


def _since(last: int, heard_since: int | None) -> int:
    return last if heard_since is None else max(last, heard_since)


def expire(st: GroupState, now_ms: int, cfg: RoutingConfig, res: Result, heard_since: int | None = None) -> None:
    """§5.1: every live entry with lastUpdateTimestamp + timeout < now is unregistered.

    As in RocketMQ the unregister needs the address to resolve to this group's BrokerData in
    the same cluster; where it does not (§14.9, RocketMQ keeps the entry forever), the live
    and filter entries are dropped and nothing else changes.
    """
    abandon_stale_chunks(st, now_ms, cfg, res, heard_since)
    for (cluster, addr), li in sorted(st.live.items()):
        if _since(li.last_update, heard_since) + li.timeout_ms < now_ms:
            res.expired.append((cluster, addr))
            broker = st.broker
            if broker is not None and broker.cluster == cluster and addr in broker.addrs.values():
                remove_address(st, cluster, addr, res, "BROKER_EXPIRED")
            else:
                del st.live[(cluster, addr)]
                res.dirty_tables.add(t.BROKER_LIVE.name)
                res.change("BROKER_EXPIRED", cluster=cluster, addr=addr, broker_id=li.broker_id)
                if st.filters.pop((cluster, addr), None) is not None:
                    res.dirty_tables.add(t.FILTER_SERVER.name)


def abandon_stale_chunks(st: GroupState, now_ms: int, cfg: RoutingConfig, res: Result,
                         heard_since: int | None = None) -> None:
    """An incomplete chunked registration whose newest chunk is older than the broker timeout
    will never complete (the broker would have re-sent it): drop it rather than keep it forever."""
    for (cluster, addr), p in sorted(st.pending.items()):
        if _since(p.last_time, heard_since) + pending_timeout(p, cfg) < now_ms:
            del st.pending[(cluster, addr)]
            res.change("REGISTRATION_ABANDONED", cluster=cluster, addr=addr, broker_id=p.header.get("brokerId"),
                       after=f"{len(p.chunks)} of {p.count} chunks, the last at {p.last_time}")


def pending_timeout(p: PendingRegistration, cfg: RoutingConfig) -> int:
    given = p.header.get("heartbeatTimeoutMillis")
    timeout: int = cfg.default_timeout_ms if given is None else given
    return timeout


def flush_live(st: GroupState, now_ms: int, cfg: RoutingConfig, res: Result) -> None:
    """Decide whether broker_live gets this group's fresh lastUpdateTimestamps now: when its
    rows are rewritten anyway, or once the window in which an entry went stale has ended.
    Windows are aligned for every group, so a quiet fleet flushes in the same batch."""
    rewritten = t.BROKER_LIVE.name in res.dirty_tables
    stale = [li for li in st.live.values() if li.materialized_update != li.last_update]
    due = rewritten or not cfg.live_flush_ms or any(
        _window(now_ms, cfg) > _window(li.stale_since, cfg) for li in stale)
    if (stale and due) or rewritten:
        for li in st.live.values():
            li.materialized_update, li.stale_since = li.last_update, -1
        res.dirty_tables.add(t.BROKER_LIVE.name)


def _window(ms: int, cfg: RoutingConfig) -> int:
    return ms // cfg.live_flush_ms if cfg.live_flush_ms else ms


def next_deadline(state: GroupState | None, cfg: RoutingConfig, heard_since: int | None = None) -> int | None:
    """When this group must be called again without data (the Spark timeout): its earliest
    expiry, or the next flush window if broker_live holds stale lastUpdateTimestamps."""
    if state is None or not (state.live or state.pending):
        return None
    deadline = min([_since(li.last_update, heard_since) + li.timeout_ms for li in state.live.values()]
                   + [_since(p.last_time, heard_since) + pending_timeout(p, cfg) for p in state.pending.values()]) + 1
    stale = [li for li in state.live.values() if li.materialized_update != li.last_update]
    if cfg.live_flush_ms and stale:
        deadline = min(deadline, (min(_window(li.stale_since, cfg) for li in stale) + 1) * cfg.live_flush_ms)
    return deadline


def look_again(deadline: int | None, expiry_ms: int, now_ms: int) -> int | None:
    """A group's deadline as its timeout is set: one due by the wall clock but not yet by the log
    (the job is reading a backlog) is looked at again when the log may have reached it, and at
    least every RECHECK_MS, not at every batch; 100,000 groups re-called per batch would stall the
    catch-up."""
    if deadline is not None and expiry_ms < deadline <= now_ms:
        return now_ms + min(deadline - expiry_ms, RECHECK_MS)
    return deadline
