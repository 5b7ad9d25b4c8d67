"""Event builders for tests: the producers' builders, normalised through the real parser; and
`wait`, the polling loop of the tests that drive whole processes."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from conf import load_config
from pipelines.step import StepConfig
from routeinfo import route_manager
from routeinfo.route_writes import RoutingConfig
from routeinfo.snapshot import Snapshot, build_snapshot
from routeinfo.state import table_rows
from schemas import events as ev
from schemas import tables as t

CLUSTER = "DefaultCluster"
DEFAULTS = load_config({})  # the configured defaults, no environment


def routing_config(**overrides: Any) -> RoutingConfig:
    """The job's routing settings at their defaults, with `overrides`."""
    return dataclasses.replace(StepConfig.from_config(DEFAULTS).routing, **overrides)


def norm(event: dict[str, Any], time_ms: int) -> dict[str, Any]:
    """What the pipeline hands the state machines for `event` published at `time_ms`."""
    key, value = ev.encode(event)
    return ev.parse_event(value, key=key.decode(), record_time_ms=time_ms,
                          max_message_bytes=1 << 20, max_clock_skew_ms=10**12)


def topics(*names: str, read: int = 8, write: int = 8, perm: int = 6, sys_flag: int = 0) -> dict[str, Any]:
    return {n: ev.topic_config(n, read=read, write=write, perm=perm, sys_flag=sys_flag) for n in names}


def dv(counter: int, state_version: int = 0, timestamp: int = 1) -> dict[str, int]:
    return {"timestamp": timestamp, "counter": counter, "stateVersion": state_version}


def reg(name: str, bid: int, addr: str, *, tps: dict[str, Any] | None = None, counter: int = 1,
        state_version: int = 0, cluster: str = CLUSTER, timeout_ms: int | None = None,
        acting: bool | None = False, zone: str | None = None, filters: list[str] | None = None,
        ha: str | None = None) -> dict[str, Any]:
    return ev.register_broker_event(
        cluster=cluster, broker_name=name, broker_id=bid, addr=addr, ha_addr=ha,
        topics=topics("Base", "TopicTest") if tps is None else tps, data_version=dv(counter, state_version),
        timeout_ms=timeout_ms, enable_acting_master=acting, zone=zone, filter_servers=filters)


def hb(name: str, bid: int, addr: str, cluster: str = CLUSTER) -> dict[str, Any]:
    return ev.heartbeat_event(cluster=cluster, broker_name=name, broker_id=bid, addr=addr)


def unreg(name: str, bid: int, addr: str, cluster: str = CLUSTER) -> dict[str, Any]:
    return ev.unregister_broker_event(cluster=cluster, broker_name=name, broker_id=bid, addr=addr)


def cut(*events: dict[str, Any]) -> Snapshot:
    """The cut the pure core makes of `events` (one per millisecond), as the server would load it."""
    states: dict[str, Any] = {}
    for i, e in enumerate(events):
        name = e["brokerName"]
        states[name], _ = route_manager.apply(states.get(name), [norm(e, i)], i, routing_config())
    tables: dict[str, list[dict[str, Any]]] = {x.name: [] for x in t.STATE_TABLES}
    for s in states.values():
        for x in t.ROUTE_TABLES:
            tables[x.name].extend(table_rows(s, x.name))
    return build_snapshot(None, tables)


def wait(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `probe` until it returns a truthy value (an OSError, such as a refused connection, counts
    as not yet); fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except OSError:  # requests' errors are OSErrors too
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
