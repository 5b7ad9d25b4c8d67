"""A batch that replaces more broker groups than a Delta predicate can name (issue 15's
100,000-group run): the sink still writes one commit per table, and the process survives.

delta-rs recurses once per element of an `IN (...)` list on the calling thread's stack; with
8 MiB it died of SIGSEGV near 21,000 owners, which a registration or expiry wave of 100,000
groups reaches. The scenario runs in a child process with an 8 MiB stack, so a regression is a
failed test naming the signal, not a dead test session."""

from __future__ import annotations

import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from schemas import tables as t

pytestmark = pytest.mark.integration

GROUPS = 30_000  # well past the ~21,000 owners that crashed an 8 MiB stack
T0 = 1_700_000_000_000
TIMEOUT_MS = 120_000


def scenario(warehouse: str) -> None:
    """Batch 0: GROUPS + 1 groups register; batch 1: GROUPS of them move to a new address and
    add a topic; batch 2: the untouched one heartbeats; batch 3: the GROUPS expire, it stays."""
    from tests.delta_history import SinkDriver
    from tests.helpers import hb, reg, topics

    d = SinkDriver(Path(warehouse), timeout_ms=TIMEOUT_MS)
    d.run_batch([reg(f"w-{g}", 0, f"10.0.{g // 250}.{g % 250}:10911", tps=topics("Old", "Base"))
                 for g in range(GROUPS + 1)], T0)
    d.run_batch([reg(f"w-{g}", 0, f"10.1.{g // 250}.{g % 250}:10911", tps=topics("New", "Base"), counter=2)
                 for g in range(GROUPS)], T0 + 1_000)
    d.run_batch([hb(f"w-{GROUPS}", 0, f"10.0.{GROUPS // 250}.{GROUPS % 250}:10911")], T0 + 60_000)
    d.run_batch([], T0 + 1_000 + TIMEOUT_MS + 1_000)


def _rows(warehouse: Path, table: t.TableDef, version: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(warehouse / table.name), version=version).to_pyarrow_table().to_pylist()
    return rows


def test_a_batch_wider_than_a_predicate_replaces_its_groups_in_one_commit(tmp_path):
    warehouse = tmp_path / "delta"
    proc = subprocess.run(
        [sys.executable, "-c", f"from tests.pipeline.test_wide_batches import scenario; scenario({str(warehouse)!r})"],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_STACK, (8 << 20, resource.getrlimit(resource.RLIMIT_STACK)[1])),
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, f"sink process exited {proc.returncode}: {proc.stderr[-2000:]}"

    cuts = DeltaTable(str(warehouse / t.SNAPSHOTS.name)).to_pyarrow_table().sort_by("snapshotId").to_pylist()
    assert [c["snapshotId"] for c in cuts] == [0, 1, 2, 3]
    for table in (t.TOPIC_QUEUE, t.BROKER_ADDR, t.BROKER_LIVE):
        versions = [c[t.version_column(table)] for c in cuts]
        wide = [versions[0] - 0, versions[1] - versions[0], versions[3] - versions[2]]
        assert wide == [1, 1, 1], f"{table.name}: one commit per wide batch, got versions {versions}"

    moved = _rows(warehouse, t.TOPIC_QUEUE, cuts[1][t.version_column(t.TOPIC_QUEUE)])
    # RocketMQ keeps a topic a new registration leaves out (deleteTopicWithBrokerRegistration off)
    assert Counter(r["topic"] for r in moved) == {"New": GROUPS, "Old": GROUPS + 1, "Base": GROUPS + 1}
    per_group = Counter(r["brokerName"] for r in moved)
    assert len(per_group) == GROUPS + 1 and per_group[f"w-{GROUPS}"] == 2 and set(per_group.values()) == {2, 3}
    addrs = {r["brokerName"]: r["brokerAddr"] for r in _rows(warehouse, t.BROKER_ADDR, cuts[1][t.version_column(t.BROKER_ADDR)])}
    assert len(addrs) == GROUPS + 1 and addrs["w-0"] == "10.1.0.0:10911" and addrs[f"w-{GROUPS}"].startswith("10.0.")

    for table in (t.TOPIC_QUEUE, t.BROKER_ADDR, t.BROKER_LIVE, t.CLUSTER_ADDR):
        left = _rows(warehouse, table, cuts[3][t.version_column(table)])
        assert {r["brokerName"] for r in left} == {f"w-{GROUPS}"}, f"{table.name} after the expiry wave"
