"""Risks over a real Delta history (the real sink, no Spark): the history fold reads only the cuts
that can change a risk (snapshots.risk_history) and answers, at every cut, what a recomputation
from every cut loaded from Delta answers (routeinfo.risks.report_from_scratch); and the service
behind GET /risks folds that history, then the served cuts, and sets the gauges."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from deltalake import DeltaTable

from routeinfo.risks import Cut, Settings, report_from_scratch
from schemas import events as ev
from schemas import tables as t
from snapshots.reader import SnapshotReader
from snapshots.risk_history import (
    LIVE,
    QUIET,
    RETRIES,
    ROUTE,
    HistoryFold,
    HistoryUnreadable,
    change_log,
    classify,
    fold_history,
    snapshot_rows,
    version_gone,
)
from tests.delta_history import SinkDriver
from tests.helpers import hb, reg, topics

WINDOW_MS = 1_500
SETTINGS = Settings(flap_threshold=1, window_ms=WINDOW_MS)  # two expiries within 1.5 s make a broker flap
C = "DefaultCluster"
A0, A1, B0, C0, C1, F0 = ("10.0.0.1:10911", "10.0.0.2:10911", "10.0.1.1:10911", "10.0.2.1:10911",
                          "10.0.2.2:10911", "10.0.9.1:10911")


def now() -> int:
    return int(time.time() * 1000)


def slave_a(counter: int) -> dict[str, Any]:
    return reg("a", 1, A1, tps=topics("T1", "T2", "Base"), zone="z1", counter=counter)


def fleet() -> list[dict[str, Any]]:
    """a: master and slave, zone z1; b: a master alone, zone z1; c: master and slave, zone z2."""
    tps = {"a": topics("T1", "T2", "Base"), "b": topics("T1", "Solo", "Base"), "c": topics("T2", "Base")}
    return [reg("a", 0, A0, tps=tps["a"], zone="z1"), slave_a(5),
            reg("b", 0, B0, tps=tps["b"], zone="z1"),
            reg("c", 0, C0, tps=tps["c"], zone="z2"), reg("c", 1, C1, tps=tps["c"], zone="z2")]


def beats() -> list[dict[str, Any]]:
    return [hb("a", 0, A0), hb("a", 1, A1), hb("b", 0, B0), hb("c", 0, C0), hb("c", 1, C1)]


def flap(d: SinkDriver, times: int) -> None:
    """Broker group f registers with a 150 ms timeout and expires, `times` times."""
    for _ in range(times):
        d.run_batch([reg("f", 0, F0, tps=topics("FT", "Base"), timeout_ms=150)], now())
        time.sleep(0.25)
        d.run_batch([], now())


def write_history(warehouse: Path) -> None:
    d = SinkDriver(warehouse)
    d.run_batch(fleet(), now())                      # no-live-slave:b, single-group-topic:Solo, single-zone-topic:T1
    d.run_batch(beats(), now() + 1)                  # heartbeats alone: a LIVE cut with nothing a risk reads
    d.run_batch([slave_a(3)], now())                 # a's slave went back: a LIVE cut with a new DataVersion
    d.run_batch(beats(), now() + 1)
    d.run_batch([ev.wipe_write_perm_event("b")], now())   # write-perm-wiped:b; Solo not writable; T1 on a alone
    d.run_batch([ev.put_kv_event("ns", "k", "v")], now())  # a QUIET cut
    d.run_batch([ev.add_write_perm_event("b")], now())
    flap(d, 2)                                        # flapping-broker: 2 expiries > 1
    time.sleep(WINDOW_MS / 1000 + 0.2)
    d.run_batch(beats(), now())                       # quiet, after the window: flapping and the step cleared here
    d.run_batch([ev.put_kv_event("ns", "k", "w")], now())
    d.run_batch([slave_a(1)], now())                 # back again: a new run


def every_cut(warehouse: Path) -> list[Cut]:
    """Every cut loaded from Delta, with the change-log rows it committed: the reference's input."""
    reader = SnapshotReader(warehouse)
    rows = snapshot_rows(warehouse)
    changes: dict[int, list[dict[str, Any]]] = {}
    for row in DeltaTable(str(warehouse / t.ROUTE_CHANGES.name)).to_pyarrow_table().to_pylist():
        changes.setdefault(row["snapshotId"], []).append(row)
    cuts, previous = [], None
    for row in rows:
        previous = reader.load(row, previous=previous)
        cuts.append(Cut(previous, changes.get(row["snapshotId"], [])))
    return cuts


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[dict[str, Any]], list[Cut]]:
    warehouse = tmp_path_factory.mktemp("risk-history") / "delta"
    write_history(warehouse)
    return warehouse, snapshot_rows(warehouse), every_cut(warehouse)


def shown(risks) -> list[tuple[str, int | None, str]]:
    return [(r.id, r.since, r.message) for r in risks]


def test_the_fold_reads_only_what_can_change_a_risk_and_agrees_with_a_recomputation(history, figures):
    warehouse, rows, cuts = history
    routed, _ = change_log(warehouse, rows[-1]["route_changes_version"], upto_id=rows[-1]["snapshotId"], after_id=-1)
    classes = [classify(before, row, row["snapshotId"] in routed) for before, row in zip([None, *rows[:-1]], rows,
                                                                                         strict=True)]
    assert {ROUTE, LIVE, QUIET} <= set(classes), classes
    started = time.perf_counter()
    asked = [k for k in range(len(rows)) if k % 3 == 0 or classes[k] != ROUTE or k == len(rows) - 1]
    for k in asked:  # as ?asOf= each of these cuts would: every LIVE and QUIET one, a third of the others
        fold = fold_history(warehouse, rows[:k + 1], SETTINGS)
        assert fold.tracker.report is not None and fold.tracker.report.at_ms == rows[k]["commitTime"]
        assert shown(fold.tracker.report.risks()) == shown(report_from_scratch(cuts[:k + 1], SETTINGS)), \
            f"cut {k} ({classes[k]})"
    per_fold = (time.perf_counter() - started) / len(asked)
    fold = fold_history(warehouse, rows, SETTINGS)
    assert fold.stats.quiet >= 4 and fold.stats.loaded < len(rows) and fold.stats.refolds >= 1, fold.stats
    seen = {r.kind for cut in range(len(rows)) for r in report_from_scratch(cuts[:cut + 1], SETTINGS)}
    assert seen == {"no-live-slave", "single-group-topic", "single-zone-topic", "write-perm-wiped",
                    "flapping-broker", "data-version-backwards"}
    figures(f"risk history fold: {len(rows)} cuts ({fold.stats.loaded} loaded, {fold.stats.quiet} quiet, "
            f"{fold.stats.refolds} refolded), {per_fold * 1000:.0f} ms per fold of up to {len(rows)} cuts "
            f"(compared at {len(asked)} of them)")


def test_a_risk_that_cleared_in_a_quiet_run_starts_again(history):
    """The DataVersion step went out of its window in the quiet cuts: the second step is a new
    run, dated at its own cut, which only the last quiet cut's refold tells."""
    warehouse, rows, _ = history
    report = fold_history(warehouse, rows, SETTINGS).tracker.report
    assert report is not None
    (step,) = report.risks(kind="data-version-backwards")
    assert step.since == rows[-1]["commitTime"] and step.address == A1
    assert step.since > rows[0]["commitTime"] + WINDOW_MS


def test_risks_at_the_oldest_cut_read_say_so(history):
    warehouse, rows, _ = history
    report = fold_history(warehouse, rows[2:], SETTINGS).tracker.report
    assert report is not None and report.origin_ms == rows[2]["commitTime"]
    flagged = {r.id for r in report.risks() if report.since_at_or_before(r)}
    assert "no-live-slave:b" in flagged and "single-zone-topic:T1" not in flagged


# ---------------------------------------------------------------- a cut that fails to read


def replaced_file(warehouse: Path) -> tuple[Path, int, int]:
    """A topic_queue data file that a cut of the history reads and the newest version no longer
    names (what VACUUM removes once it is old enough); the index of the first row whose version
    names it, and of the first row after that whose version does not."""
    rows = snapshot_rows(warehouse)
    table = warehouse / t.TOPIC_QUEUE.name
    named: dict[int, set[str]] = {}

    def files(k: int) -> set[str]:
        version = rows[k][t.version_column(t.TOPIC_QUEUE)]
        if version not in named:
            named[version] = set(DeltaTable(str(table), version=version).get_add_actions(flatten=True)
                                 .column("path").to_pylist())
        return named[version]

    first, name = next((k, n) for k in range(len(rows)) for n in sorted(files(k) - files(len(rows) - 1)))
    after = next(k for k in range(first, len(rows)) if name not in files(k))
    return table / unquote(name), first, after


def step_until(fold: HistoryFold, done, limit: int = 500) -> None:
    for _ in range(limit):
        if done():
            return
        fold.step()
    raise AssertionError(f"not reached in {limit} steps: {fold.stats}, stall {fold.stall}")


def test_a_cut_that_fails_to_read_while_its_files_are_there_is_read_again(history, tmp_path):
    """A transient read error (here a data file whose bytes are garbage for a while) is not a
    vacuumed history: the fold waits and reads the same cut again, and since stays exact; a cut
    whose file is really gone begins the fold again after it, since then only an upper bound."""
    warehouse, rows, _ = history
    intact = fold_history(warehouse, rows, SETTINGS).tracker.report
    copy = tmp_path / "delta"
    shutil.copytree(warehouse, copy)
    path, first, after = replaced_file(copy)
    assert first == 0, "the first cut reads the file"
    kept = path.read_bytes()
    path.write_bytes(b"not parquet")  # unreadable, but there: a fault that passes
    assert not version_gone(copy, t.TOPIC_QUEUE, rows[0][t.version_column(t.TOPIC_QUEUE)])
    with pytest.raises(HistoryUnreadable, match=f"cut {rows[0]['snapshotId']} .*read again"):
        fold_history(copy, rows, SETTINGS)  # an asOf fold says so rather than answer without that cut

    fold = HistoryFold(copy, SETTINGS, retry_s=0.01)
    fold.extend(rows)
    fold.step()
    assert fold.stall is not None and fold.stall.snapshot_id == rows[0]["snapshotId"] and fold.stall.tries == 1
    assert fold.stats.restarts == 0 and fold.last_id is None
    fold.step()  # not due yet: nothing happens
    assert fold.stall.tries == 1
    time.sleep(0.02)
    fold.step()
    assert fold.stall is not None and fold.stall.tries == 2
    path.write_bytes(kept)  # the store answers again
    time.sleep(0.05)
    step_until(fold, fold.done)
    fold.refold()
    assert fold.stall is None and fold.stats.restarts == 0 and fold.stats.retries == 2
    assert fold.from_first and fold.tracker.report is not None
    assert shown(fold.tracker.report.risks()) == shown(intact.risks())

    path.unlink()  # vacuumed: every version that names the file is gone for good
    assert version_gone(copy, t.TOPIC_QUEUE, rows[0][t.version_column(t.TOPIC_QUEUE)])
    fold = fold_history(copy, rows, SETTINGS)
    report = fold.tracker.report
    assert fold.stats.restarts == after and fold.stats.retries == 0 and not fold.from_first
    assert report is not None and report.origin_ms == rows[after]["commitTime"]
    assert report.since_at_or_before(next(r for r in report.risks() if r.id == "no-live-slave:b"))


def test_a_cut_that_never_reads_is_given_up_after_its_tries(history, tmp_path):
    warehouse, rows, _ = history
    copy = tmp_path / "delta"
    shutil.copytree(warehouse, copy)
    path, _, _ = replaced_file(copy)
    path.write_bytes(b"not parquet")
    fold = HistoryFold(copy, SETTINGS, retry_s=0.0)
    fold.extend(rows)
    step_until(fold, lambda: fold.stats.restarts > 0, limit=RETRIES + 1)
    assert fold.stall is None and fold.stats.retries == RETRIES - 1 and fold.last_id == rows[0]["snapshotId"]
