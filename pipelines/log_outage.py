"""When the events log could not be read, and what that grants the brokers (the source's collaborator).

A heartbeat the log could not take is not silence: once the log is readable again after an
outage, no broker is judged silent for it, each gets a full timeout from then (the outage floor,
`offset_log.RESUMED`, which the next batch carries). An outage is also marked in the store
(`OUTAGE_FILE`, beside the progress record), so that a job that restarts meanwhile still knows
of it; the mark goes once a batch carrying the floor committed.

A log can also look shorter than what the job read (a memory-only broker restarted, its log
wiped): `ShortLogs` believes that only once it lasted `GONE_CONFIRM_S`.
"""

from __future__ import annotations

import json
import logging
import time

from conf.store import StorePath

OUTAGE_FILE = "_log_outage.json"
# How long a partition's log must look shorter than a planned read before those offsets count as
# gone (a wiped broker): longer than a healed broker takes to learn it no longer leads.
GONE_CONFIRM_S = 15.0
# A look at the log (end offsets, a wait for records) that took this much longer than it should
# have means the log could not be read meanwhile (`LogOutage.slow`); a healthy one takes milliseconds.
SLOW_LOOK_S = 5.0

log = logging.getLogger(__name__)


class ShortLogs:
    """Partitions whose log looks shorter than what the job read or planned, and since when. A short
    log is believed (a memory-only broker restarted, its log wiped) only once it has stayed short
    for GONE_CONFIRM_S: a broker healed from a cut still answers as the partition's leader, with its
    own shorter log, until it learns of the new leader (seen on the multi-host bed: acknowledged
    records skipped as "gone")."""

    def __init__(self) -> None:
        self._since: dict[int, float] = {}

    def believed(self, partition: int) -> bool:
        """The partition looks short now: whether to believe it yet."""
        first = self._since.setdefault(partition, time.monotonic())
        return time.monotonic() - first >= GONE_CONFIRM_S

    def clear(self, partition: int) -> None:
        self._since.pop(partition, None)


class LogOutage:
    """The planner's view of the log's outages: `lost` and `slow` when a look fails, `looked` after
    one that succeeded (it takes the floor), `committed` after a batch. Reads on executors use
    `mark` (through `stalled`) only: the planner, which saw nothing of it, finds the mark."""

    def __init__(self, bootstrap: str, store_dir: StorePath | None) -> None:
        self.bootstrap = bootstrap
        self.file = None if store_dir is None else store_dir / OUTAGE_FILE
        self.unavailable = False
        self.resumed: int | None = None  # the outage floor: when the log could be read again
        self._marked: bool | None = None  # whether the file is there (None: not looked yet)

    def slow(self, overran_s: float, what: str) -> None:
        """A call to Kafka that took SLOW_LOOK_S longer than it should have counts as an outage (the
        floor is taken when the next look succeeds): a broker cut off behind a switch may leave
        kafka-python's requests hanging and retried without an error for as long as the cut
        lasts, and the heartbeats the log could not take meanwhile are not silence either."""
        if overran_s > SLOW_LOOK_S:
            self.lost(f"took {overran_s:.0f} s too long to answer ({what}); counted as an outage of the log")

    def lost(self, why: str) -> None:
        """The log could not be read (logged and marked once per outage): the next look that
        succeeds takes the outage floor."""
        if not self.unavailable:
            log.warning("Kafka at %s %s", self.bootstrap, why)
            self.mark()
        self.unavailable = True

    def looked(self) -> None:
        """A look at the log succeeded: after an outage (this planner's, or one marked in the store
        by a read or a job before a restart), the floor is now. Looked at every time while
        unmarked: a batch's read may have marked an outage."""
        if self._marked and not self.unavailable:
            return
        if self.unavailable or (self.file is not None and self.file.exists()):
            self.resumed = int(time.time() * 1000)
            self._marked = True
            log.warning("Kafka at %s is reachable again; brokers are judged from now on (%s)", self.bootstrap,
                        "an outage this job saw" if self.unavailable else f"an outage marked in {self.file}")
        else:
            self._marked = False
        self.unavailable = False

    def committed(self, resumed_in_batch: int) -> None:
        """A batch committed: once one carried the floor, the store's mark has done its part."""
        if self.file is None or not self._marked or self.resumed is None or resumed_in_batch < self.resumed:
            return
        try:
            self.file.unlink(missing_ok=True)
            self._marked = False
        except Exception as exc:  # the store is unreachable: tried again after the next batch
            log.warning("could not remove %s: %s", self.file, exc)

    def mark(self) -> None:
        if self.file is None:
            return
        try:
            self.file.write_text(json.dumps({"since": int(time.time() * 1000)}))
            self._marked = True
        except Exception as exc:  # the floor still holds for this process; a restart would not know
            log.warning("could not mark the log's outage in %s: %s", self.file, exc)

    def stalled(self, topic: str, partition: int, waiting_since: float | None) -> bool:
        """Whether a read's polls have brought none of its records for SLOW_LOOK_S: the log went
        away under it, and it marks an outage (once), whose floor its planner, which saw nothing of
        it, grants at its next look (a heartbeat the log could not take is not silence)."""
        if waiting_since is None or time.monotonic() - waiting_since <= SLOW_LOOK_S:
            return False
        log.warning("%s[%d]: Kafka at %s did not answer this read for %.0f s; marking an outage of the log",
                    topic, partition, self.bootstrap, SLOW_LOOK_S)
        self.mark()
        return True
