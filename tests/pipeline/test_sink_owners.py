"""The sink appends the rows of owners a state table does not hold, and replaces the rest: a
registration wave's batches read nothing of the tables to delete nothing, and no owner's rows are
ever held twice, across a restart of the sink too."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from bench.pure import CFG, _records
from pipelines.sink import DeltaSink
from pipelines.step import State, run_group
from schemas import events as ev
from schemas import tables as t

NOW = 1_700_000_000_000


def registration(name: str, topics: list[str]) -> dict[str, Any]:
    return ev.register_broker_event(cluster="C", broker_name=name, broker_id=0, addr=f"{name}:10911",
                                    topics={n: ev.topic_config(n) for n in topics})


Written = dict[str, list[tuple[str, str]]]  # per owner, its topic_queue rows as the step last wrote them


def step(states: dict[str, State | None], written: Written, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step's rows (route changes left out) for each event's group, its state carried; what
    topic_queue must then hold is kept in `written`."""
    out: list[dict[str, Any]] = []
    for e in events:
        name = e["brokerName"]
        states[name], _, rows = run_group(name, _records([e], NOW), states.get(name), NOW, CFG)
        out += [r for r in rows if r["target"] != "route_changes"]
        for r in rows:
            if r["target"] == t.TOPIC_QUEUE.name:
                written[r["owner"]] = [(q["topic"], q["brokerName"]) for q in json.loads(r["body"])]
    return out


def held(written: Written) -> Counter[tuple[str, str]]:
    return Counter(row for rows in written.values() for row in rows)


def queues(warehouse: Path) -> Counter[tuple[str, str]]:
    table = DeltaTable(str(warehouse / t.TOPIC_QUEUE.name)).to_pyarrow_table(columns=["topic", "brokerName"])
    return Counter(zip(table.column("topic").to_pylist(), table.column("brokerName").to_pylist(), strict=True))


def last_mode(warehouse: Path) -> str:
    return str(DeltaTable(str(warehouse / t.TOPIC_QUEUE.name)).history(1)[0]["operationParameters"]["mode"])


def test_new_owners_are_appended_and_known_ones_replaced_across_a_restart(tmp_path: Path) -> None:
    warehouse = tmp_path / "delta"
    written: Written = {}
    states: dict[str, State | None] = {}
    sink = DeltaSink(warehouse, retention_ms=86_400_000)
    sink.ensure_tables()
    sink.commit(0, step(states, written, [registration("a", ["A1", "A2"]), registration("b", ["B1", "B0"])]), {"0": 2}, 2)
    assert last_mode(warehouse) == "Append"
    assert queues(warehouse) == held(written)

    # a known owner beside a new one: one overwrite replacing a's rows
    sink.commit(1, step(states, written, [registration("a", ["A1", "A3"]), registration("c", ["C1", "C0"])]), {"0": 4}, 2)
    assert last_mode(warehouse) == "Overwrite"
    assert queues(warehouse) == held(written)

    # a's rows removed, then a registering again is a new owner: appended
    gone = ev.unregister_broker_event(cluster="C", broker_name="a", broker_id=0, addr="a:10911")
    sink.commit(2, step(states, written, [gone]), {"0": 5}, 1)
    assert queues(warehouse) == held(written)
    sink.commit(3, step(states, written, [registration("a", ["A4", "A0"])]), {"0": 6}, 1)
    assert last_mode(warehouse) == "Append"

    # a restarted sink reads the owners from the table: b is known, d is not
    again = DeltaSink(warehouse, retention_ms=86_400_000)
    again.ensure_tables()
    again.commit(4, step(states, written, [registration("b", ["B2", "B0"]), registration("d", ["D1", "D0"])]), {"0": 8}, 2)
    assert last_mode(warehouse) == "Overwrite"
    again.commit(5, step(states, written, [registration("e", ["E1", "E0"])]), {"0": 9}, 1)
    assert last_mode(warehouse) == "Append"
    assert queues(warehouse) == held(written)
