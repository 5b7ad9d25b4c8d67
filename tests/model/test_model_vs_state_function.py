"""Property: the pure state step (parse → routing/kv → emitted table rows → sink plan) yields
exactly the reference model's tables after every step of any generated workload."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings

from pipelines import routing
from pipelines.sink import plan_batch
from pipelines.stateful import StepConfig, run_group
from schemas import events as ev
from schemas import tables as t
from serving import commands
from serving.snapshot import build_snapshot
from tests.model import ops
from tests.model.namesrv_model import NamesrvModel

T0 = 1_700_000_000_000
TIMEOUT = 3000
EXAMPLES = 500


class PureSystem:
    """Drives stateful.run_group one batch at a time and materializes its output like the sink."""

    def __init__(self) -> None:
        self.cfg = StepConfig(routing.RoutingConfig(default_timeout_ms=TIMEOUT), 1 << 20, 10**12)
        self.states: dict[str, str] = {}
        self.tables: dict[str, dict[str, list[dict[str, Any]]]] = {x.name: {} for x in t.STATE_TABLES}
        self.batch = 0
        self.offset = 0

    def run_batch(self, events: list[dict[str, Any]], now: int) -> None:
        records: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            key, value = ev.encode({**e, "timestamp": now})
            records.setdefault(key.decode(), []).append(
                {"partition": 0, "offset": self.offset, "timestamp": now, "key": key.decode(), "value": value})
            self.offset += 1
        out = []
        for group in sorted(set(self.states) | set(records)):
            state, _, rows = run_group(group, records.get(group, []), self.states.get(group), now, self.cfg)
            if state is None:
                self.states.pop(group, None)
            else:
                self.states[group] = state
            out.extend(rows)
        plan = plan_batch(out, self.batch, now)
        assert not plan.dead_letters, plan.dead_letters
        for table, owners in plan.replace.items():
            self.tables[table].update(owners)
        self.batch += 1

    def rows(self, table: str) -> list[dict[str, Any]]:
        return [r for rs in self.tables[table].values() for r in rs]

    def snapshot(self):
        return build_snapshot(None, {name: self.rows(name) for name in self.tables})

    def table_rows(self) -> dict[str, set[tuple]]:
        live = set()
        for r in self.rows("broker_live"):
            dv = json.loads(r["dataVersion"])
            live.add((r["clusterName"], r["brokerAddr"], r["lastUpdateTimestamp"], r["heartbeatTimeoutMillis"],
                      tuple(sorted(dv.items())), r["haServerAddr"]))
        return {
            "topic_queue": {(r["topic"], r["brokerName"], r["readQueueNums"], r["writeQueueNums"], r["perm"],
                             r["topicSysFlag"]) for r in self.rows("topic_queue")},
            "broker_addr": {(r["brokerName"], r["cluster"], r["brokerId"], r["brokerAddr"], r["zoneName"],
                             r["enableActingMaster"]) for r in self.rows("broker_addr")},
            "cluster_addr": {(r["clusterName"], r["brokerName"]) for r in self.rows("cluster_addr")},
            "broker_live": live,
            "filter_server": {(r["clusterName"], r["brokerAddr"], tuple(r["filterServer"]))
                              for r in self.rows("filter_server")},
            "kv_config": {(r["namespace"], r["key"], r["value"]) for r in self.rows("kv_config")},
        }


def run_workload(workload) -> int:
    model = NamesrvModel(default_timeout_ms=TIMEOUT)
    pure = PureSystem()
    now = T0
    for step, ((kind, args), dt) in enumerate(workload):
        now += dt
        if kind == "advance":
            now += args["ms"]
            model.scan_not_active_broker(now)
            pure.run_batch([], now)
        elif kind == "delete_topic":
            model.scan_not_active_broker(now)
            pure.run_batch([], now)
            pure.run_batch(commands.delete_topic(pure.snapshot(), args["topic"], args["cluster"]), now)
            model.delete_topic(args["topic"], args["cluster"])
        elif kind == "register_topic":
            model.scan_not_active_broker(now)
            pure.run_batch([], now)
            pure.run_batch(commands.register_topic(pure.snapshot(), args["topic"], args["queueDatas"]), now)
            model.register_topic(args["topic"], args["queueDatas"])
        else:
            event = ops.broker_event(kind, args, timestamp=now)
            model.apply_event({**ops_normalised(event, now)})
            pure.run_batch([event], now)
        expected, actual = model.table_rows(), pure.table_rows()
        for table in expected:
            assert actual[table] == expected[table], (
                f"step {step} ({kind} {args}): {table} differs\n  pipeline-only: {actual[table] - expected[table]}"
                f"\n  model-only: {expected[table] - actual[table]}")
    return len(workload)


def ops_normalised(event: dict[str, Any], now: int) -> dict[str, Any]:
    key, value = ev.encode(event)
    return ev.parse_event(value, key=key.decode(), record_time_ms=now, max_message_bytes=1 << 20,
                          max_clock_skew_ms=10**12)


_STEPS: list[int] = []


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops.workload)
def test_state_function_matches_the_model_after_every_step(workload):
    _STEPS.append(run_workload(workload))


def test_report_examples(figures):
    """Runs after the property (same module): reports how much it explored."""
    figures(f"model vs state function: {len(_STEPS)} hypothesis examples, {sum(_STEPS)} steps compared")
    assert len(_STEPS) >= EXAMPLES * 0.9
