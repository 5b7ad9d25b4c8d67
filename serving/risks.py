"""`GET /risks`: the risks in the served topology, and as of any retained cut (issue 39, items 2-3).

The report of a cut is computed once, never per request: `RiskService` folds each cut the server
serves into one `routeinfo.risks.RiskTracker` on a thread of its own (started by the snapshot
store's refresh that first serves a cut, so it never holds up readiness; stopped by
`serving.lifecycle.stop`, which closes it) and publishes the report with the cut's id;
a request takes the published report of the served cut (waiting up to `WAIT_S` for a cut swapped
in a moment ago) and builds one page of it. The same report sets the `namesrv_risks` gauges.

`since` is read from the history (`snapshots.risk_history`): at its start the thread folds the
retained cuts that can change a risk, from the oldest retained on, then the served ones. Until it
has (seconds for a small history, longer for days of a large fleet's), the served cut's report is
provisional: the kinds one cut shows by itself and flapping (from the change log), each since
the served cut with `sinceAtOrBefore`, no data-version-backwards, and the answer says
`historyComplete: false`. From then on, since is read at each served cut: a cut the server never
served (the job committed two before it looked) is not read, so a risk that held only there is
not seen.

A cut of the history that fails to read while its files are all there (a store that did not
answer) is read again after a while (`snapshots.risk_history`: a vacuumed cut is told apart);
meanwhile the answer stays provisional and says why in `historyProblem`, and the log says so.

`?asOf=` / `?snapshot=` fold the retained cuts up to the one asked afresh (the same cuts, from
the same oldest one), one request at a time, and keep the last `AS_OF_CACHED` answers; a cut that
fails to read for now makes that answer a 503 to ask again, never a since dated after it.

Memory: reading the history, and computing a million topics' facts when a served cut's topology
moved, briefly need a few hundred MB (10,000 × 100), which glibc's and Arrow's allocators would keep
for the life of the process; it is given back (`conf.memory.release_memory`, no garbage
collection) once the history is folded, after an `?asOf=` fold, and after a fold that computed topic
facts afresh, at most every `RELEASE_EVERY_S`.

`sinceAtOrBefore` marks a risk that already held at the oldest cut read, unless that cut is the
warehouse's first: then nothing came before it and every since is exact.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, current_app, g, jsonify, request
from flask.typing import ResponseReturnValue

from conf.memory import ReleaseEvery
from routeinfo.risks import KINDS, Cut, RiskReport, RiskTracker, Settings
from routeinfo.snapshot import Snapshot
from schemas import tables as t
from schemas.fields import InvalidInput
from serving.errors import ApiError
from serving.params import parse_instant, parse_int
from snapshots.reader import SnapshotReader
from snapshots.risk_history import (
    RETRY_S,
    HistoryFold,
    HistoryUnreadable,
    change_log,
    first_cut_id,
    fold_history,
    retention_floor,
    snapshot_rows,
)
from snapshots.store import SnapshotStore

log = logging.getLogger(__name__)
bp = Blueprint("risks", __name__)
EXTENSION = "namesrv.risks"
MAX_LIMIT = 1000
WAIT_S = 2.0          # how long a request waits for the report of a cut served a moment ago
STEP_S = 0.05         # history folded between two looks at the served cut
PROVISIONAL_AFTER_S = 0.5  # a history folded for longer than this gets a provisional report of the served cut
IDLE_S = 1.0          # the thread's longest sleep without a refresh
AS_OF_CACHED = 4      # past cuts' answers kept (a 10,000 x 100 fleet's report is tens of MB)
RELEASE_EVERY_S = 30.0  # freed memory given back after a served fold that computed topic facts, at most this often
SEVERITIES = tuple(dict.fromkeys(k.severity for k in KINDS))  # critical, warning, info


@dataclass(frozen=True)
class Answer:
    """A cut's report as `GET /risks` serves it. `report` None: no cut served yet."""

    report: RiskReport | None
    snapshot_id: int | None
    commit_time: int | None
    history_complete: bool
    from_first: bool = False  # the history read begins at the warehouse's first cut: every since is exact
    history_problem: str | None = None  # why the history is not read yet (a cut that failed to read, to be read again)

    def counts(self) -> dict[str, int]:
        return self.report.counts() if self.report is not None else {k.name: 0 for k in KINDS}

    def stamp(self) -> Snapshot:
        """A stand-in cut naming this answer's, for the response's X-Namesrv-Snapshot header."""
        return dataclasses.replace(_NO_CUT, snapshot_id=self.snapshot_id, commit_time=self.commit_time)


_NO_CUT = Snapshot.empty()


class AsOfBusy(Exception):
    """A past cut's report is being folded for another request, or a cut of the history could not
    be read for now (answered 503 SYSTEM_BUSY)."""


class RiskService:
    """The served cuts' risk reports, folded on a thread of its own (module docstring), and the
    reports of past cuts. `on_refresh` is the store's listener; `close` ends the thread."""

    def __init__(self, store: SnapshotStore, settings: Settings | None = None, *,
                 on_report: Callable[[Mapping[str, int]], None] | None = None, retry_s: float = RETRY_S) -> None:
        self.store = store
        self.settings = settings or Settings()
        self.on_report = on_report
        self.retry_s = retry_s  # a history cut that failed to read while still there: read again after this (doubling)
        self._cond = threading.Condition()
        self._answer: Answer | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._fold: HistoryFold | None = None
        self._catching_up = True       # the history is being folded; the served cut's report is provisional
        self._from_first = False       # the history folded began at the warehouse's first cut
        self._catch_up_from: float | None = None  # when the history fold began (monotonic)
        self._as_of_lock = threading.Lock()
        self._as_of: dict[int, Answer] = {}
        self._releases = ReleaseEvery(RELEASE_EVERY_S)  # freed memory given back to the OS (module docstring)
        self._facts_made = 0     # the tracker's topic_facts_made at the last look
        self.error: str | None = None  # the thread's last failure (it tries again)

    @property
    def warehouse(self) -> Any:
        return self.store.reader.warehouse

    # ------------------------------------------------------------ the thread

    def on_refresh(self, snap: Snapshot, swapped: bool) -> None:
        """The store's refresh listener (its refresher thread): start the thread once a cut is
        served (before, there is nothing to read), wake it on a swap."""
        if snap.snapshot_id is not None:
            self._ensure_started()
        if swapped:
            self._wake.set()

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="risks", daemon=True)
                self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """End the thread (a history fold stops between two cuts)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self._work()
                self.error = None
            except Exception as exc:  # the store's next cut, or the next try, may do better
                self.error = f"{type(exc).__name__}: {exc}"
                log.exception("risk report failed; trying again")
                busy = False
                self._stop.wait(IDLE_S)
            if not busy:
                self._wake.wait(IDLE_S)
                self._wake.clear()

    def _work(self) -> bool:
        """One round: True when there is more to do at once (history left to fold)."""
        snap = self.store.current
        if snap.snapshot_id is None or snap.commit_time is None:  # a store that went back to no cut
            return False
        if self._fold is None:
            self._fold = HistoryFold(self.warehouse, self.settings, retry_s=self.retry_s)
            self._fold.extend(snapshot_rows(self.warehouse, since_ms=retention_floor(self.store.retention_ms),
                                            before_id=snap.snapshot_id))
        fold = self._fold
        if self._catching_up:
            return self._catch_up(fold, snap)
        last = fold.last_row
        if last is not None and snap.snapshot_id < last["snapshotId"]:
            # the store went back (a warehouse restored from a backup): read the history again
            log.warning("served cut %s is older than the last folded, %s: reading the risk history again",
                        snap.snapshot_id, last["snapshotId"])
            self._fold, self._catching_up, self._catch_up_from = None, True, None
            return True
        if fold.last_id != snap.snapshot_id:
            self._publish(Answer(fold.fold(snap, self._served_changes(fold, snap)), snap.snapshot_id,
                                 snap.commit_time, True, self._from_first))
            made = fold.tracker.topic_facts_made
            if made != self._facts_made:
                self._releases.release()
            self._facts_made = made
        return False

    def _catch_up(self, fold: HistoryFold, snap: Snapshot) -> bool:
        """Fold the history for up to STEP_S, keeping a provisional report of the served cut once
        it has taken PROVISIONAL_AFTER_S (a short history needs none: a request waits for the
        report meanwhile); once every cut before the served one is folded, fold it and go on
        with served cuts."""
        if self._catch_up_from is None:
            self._catch_up_from = time.monotonic()
        deadline = time.monotonic() + STEP_S
        while not fold.done() and time.monotonic() < deadline and not self._stop.is_set():
            fold.step()
            if fold.stall is not None:
                break
        problem = None if fold.stall is None else fold.stall.describe()
        current = self._answer
        if (current is None or current.snapshot_id != snap.snapshot_id or current.history_problem != problem) and \
                (problem is not None or time.monotonic() - self._catch_up_from >= PROVISIONAL_AFTER_S):
            self._publish(self._provisional(snap, problem))
        if fold.stall is not None:
            return False  # nothing to do before the cut is due to be read again: the thread sleeps
        if not fold.done():
            return True
        last = fold.last_id
        behind = snapshot_rows(self.warehouse, after_id=last, before_id=snap.snapshot_id,
                               since_ms=retention_floor(self.store.retention_ms) if last is None else None)
        if behind:  # committed while the history was folded
            fold.extend(behind)
            return True
        report = fold.fold(snap, self._served_changes(fold, snap))
        fold.close()
        self._facts_made = fold.tracker.topic_facts_made
        self._releases.release_now()  # the history's reads and folds are done: their peak goes back to the OS
        self._catching_up = False
        self._from_first = fold.from_first
        log.info("risk history folded: %s; since is read from %s on", fold.stats, fold.tracker.origin)
        self._publish(Answer(report, snap.snapshot_id, snap.commit_time, True, self._from_first))
        return False

    def _served_changes(self, fold: HistoryFold, snap: Snapshot) -> list[dict[str, Any]]:
        """The expiries committed since the last cut folded, up to the served one."""
        version = snap.versions.get(t.ROUTE_CHANGES.name)
        before = fold.last_row
        if version is None or snap.snapshot_id is None or \
                (before is not None and before.get(t.version_column(t.ROUTE_CHANGES)) == version):
            return []
        if before is not None:
            return change_log(self.warehouse, version, upto_id=snap.snapshot_id, after_id=int(before["snapshotId"]))[1]
        return change_log(self.warehouse, version, upto_id=snap.snapshot_id, after_id=snap.snapshot_id - 1,
                          window_from_ms=(snap.commit_time or 0) - self.settings.window_ms)[1]

    def _provisional(self, snap: Snapshot, problem: str | None = None) -> Answer:
        """The served cut alone, with the expiries of the window before it (module docstring);
        `problem`: why the history is not read yet, when a cut of it failed to read."""
        version = snap.versions.get(t.ROUTE_CHANGES.name)
        changes: list[dict[str, Any]] = []
        if version is not None and snap.snapshot_id is not None:
            changes = change_log(self.warehouse, version, upto_id=snap.snapshot_id, after_id=snap.snapshot_id - 1,
                                 window_from_ms=(snap.commit_time or 0) - self.settings.window_ms)[1]
        report = RiskTracker(self.settings).fold(Cut(snap, changes))
        return Answer(report, snap.snapshot_id, snap.commit_time, False,
                      snap.snapshot_id == first_cut_id(self.warehouse), problem)

    def _publish(self, answer: Answer) -> None:
        with self._cond:
            self._answer = answer
            self._cond.notify_all()
        if answer.report is not None and self.on_report is not None:
            self.on_report(answer.report.counts())

    # ------------------------------------------------------------ answers

    def newest(self, wait_s: float = WAIT_S) -> Answer | None:
        """The served cut's answer; a cut swapped in a moment ago is waited for up to `wait_s`,
        then the last answer made is given (it names its cut). None: none made yet."""
        if self.store.current.snapshot_id is None:
            return Answer(None, None, None, False)  # no cut served yet: no risk known
        self._ensure_started()
        deadline = time.monotonic() + wait_s
        with self._cond:
            while True:
                answer = self._answer
                if answer is not None and answer.snapshot_id == self.store.current.snapshot_id:
                    return answer
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    return answer
                self._wake.set()
                self._cond.wait(min(remaining, 0.1))

    def as_of(self, *, as_of_ms: int | None = None, snapshot_id: int | None = None) -> Answer:
        """The answer for the cut committed at or before `as_of_ms` (or with `snapshot_id`), folded
        from the oldest retained cut; LookupError with a remark when there is none, or it is older
        than the history retention (as `snapshots.history.History.cut` says it)."""
        # one fold of the retained history at a time, and none queued behind it: a week of cuts
        # takes a long while to fold, and requests waiting here would hold every Flask thread
        # (/readyz with them) until it ends, so the next one is told to come back instead
        if not self._as_of_lock.acquire(blocking=False):
            raise AsOfBusy("another asOf risk report is being folded from the history; ask again in a moment")
        try:
            return self._as_of_locked(as_of_ms=as_of_ms, snapshot_id=snapshot_id)
        except HistoryUnreadable as exc:
            log.warning("asOf risk report not made: %s", exc)
            raise AsOfBusy(f"{exc}; ask again in a moment") from None
        finally:
            self._as_of_lock.release()

    def _as_of_locked(self, *, as_of_ms: int | None, snapshot_id: int | None) -> Answer:
        """`as_of` under its lock."""
        reader = SnapshotReader(self.warehouse)
        row = reader.row_at(as_of_ms=as_of_ms, snapshot_id=snapshot_id)
        if row is None:
            raise LookupError(f"no snapshot {snapshot_id}" if snapshot_id is not None else
                              f"no snapshot was committed at or before {as_of_ms} (epoch ms)")
        floor = retention_floor(self.store.retention_ms)
        if row["commitTime"] < floor and row["snapshotId"] != self.store.current.snapshot_id:
            raise LookupError(f"snapshot {row['snapshotId']} is older than the history retention "
                              f"({self.store.retention_ms // 3_600_000} h)")
        cached = self._as_of.get(row["snapshotId"])
        if cached is not None:
            return cached
        rows = snapshot_rows(self.warehouse, since_ms=min(floor, row["commitTime"]),
                             before_id=row["snapshotId"] + 1)
        try:
            fold = fold_history(self.warehouse, rows, self.settings)
        finally:
            self._releases.release_now()  # the fold's reads of the whole retained history
        answer = Answer(fold.tracker.report, row["snapshotId"], row["commitTime"], True, fold.from_first)
        if len(self._as_of) >= AS_OF_CACHED:
            self._as_of.pop(next(iter(self._as_of)))
        self._as_of[row["snapshotId"]] = answer
        return answer


# ---------------------------------------------------------------- the endpoint


def _choice(text: str | None, name: str, allowed: tuple[str, ...]) -> str | None:
    if text is None:
        return None
    if text not in allowed:
        raise InvalidInput(f"{name} must be one of {', '.join(allowed)}, not {text[:40]!r}")
    return text


def _kinds() -> list[str]:
    """The kinds asked for by `kind=` and `severity=` (both: the kinds that are both), KINDS' order."""
    kind = _choice(request.args.get("kind"), "kind", tuple(k.name for k in KINDS))
    severity = _choice(request.args.get("severity"), "severity", SEVERITIES)
    return [k.name for k in KINDS if kind in (None, k.name) and severity in (None, k.severity)]


def _paging() -> tuple[int, int]:
    limit = parse_int(request.args.get("limit", "100"), "limit")
    offset = parse_int(request.args.get("offset", "0"), "offset")
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be 1..{MAX_LIMIT} and offset >= 0")
    return limit, offset


def _answer(service: RiskService) -> Answer:
    as_of, snap_id = request.args.get("asOf"), request.args.get("snapshot")
    if as_of is None and snap_id is None:
        answer = service.newest()
        if answer is None:
            raise ApiError(503, "SYSTEM_BUSY", "the served cut's risks are still being computed; ask again in a moment")
        return answer
    if as_of is not None and snap_id is not None:
        raise InvalidInput("give either asOf or snapshot, not both")
    try:
        if snap_id is not None:
            return service.as_of(snapshot_id=parse_int(snap_id, "snapshot"))
        assert as_of is not None
        return service.as_of(as_of_ms=parse_instant(as_of, "asOf"))
    except LookupError as exc:
        raise ApiError(404, "SNAPSHOT_NOT_FOUND", str(exc)) from None
    except AsOfBusy as exc:
        raise ApiError(503, "SYSTEM_BUSY", str(exc)) from None


def page(answer: Answer, kinds: list[str], offset: int, limit: int, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of an answer's risks as JSON (the report builds only the page's risks)."""
    report = answer.report
    counts = answer.counts()
    total = sum(counts[k] for k in kinds)
    risks = [] if report is None else [
        {**r.to_json(), "sinceAtOrBefore": report.since_at_or_before(r) and not answer.from_first}
        for r in report.risks(kinds=kinds, offset=offset, limit=limit)]
    body: dict[str, Any] = {
        "snapshotId": answer.snapshot_id, "commitTime": answer.commit_time,
        "historyFrom": None if report is None else report.origin_ms, "historyComplete": answer.history_complete,
        "counts": counts, "severities": {sev: sum(counts[k.name] for k in KINDS if k.severity == sev) for sev in SEVERITIES},
        "total": total, "offset": offset, "limit": limit, "risks": risks}
    if answer.history_problem is not None:
        body["historyProblem"] = answer.history_problem
    if offset + limit < total:
        body["next"] = "/risks?" + urlencode({**query, "offset": offset + limit, "limit": limit})
    return body


@bp.get("/risks")
def risks() -> ResponseReturnValue:
    kinds = _kinds()
    limit, offset = _paging()
    answer = _answer(current_app.extensions[EXTENSION])
    g.namesrv_snapshot = answer.stamp()
    return jsonify(page(answer, kinds, offset, limit, request.args.to_dict()))
