"""The admin writes' journal: what an admin published, kept until the job has read past it.

The events topic keeps events for its retention only (eventlog.topics.retention_configs). A
job that is down longer loses what the log dropped meanwhile. A broker's registration is
repaired by its next re-registration (30 s), but a KV or topic write an operator made is not
repeated by anyone. So the servers that publish admin writes (HTTP, the remoting front) also
note each one here, with its log coordinates, one small file each:
`<warehouse>/_admin_writes/<partition>/<offset>.json`. When the job finds offsets it never
read gone from the log, it names the admin writes among them from these notes (in its log and
in `dead_letter`, with the write itself). The job removes the notes it has read past
(`prune`, at its table maintenance), so the journal holds about a maintenance period of admin
writes; they are rare (an operator's hand), so a file each costs nothing that matters.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conf.store import StorePath, store_path
from schemas.events import ADMIN_EVENT_TYPES, encode

JOURNAL_DIR = "_admin_writes"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JournalEntry:
    partition: int
    offset: int
    type: str
    key: str
    value: bytes  # the record's value as published
    time: int  # epoch ms when it was published

    def describe(self) -> str:
        """The write in a few words, for a log line: its type and what it named."""
        event = json.loads(self.value)
        named = [f"{k}={event[k]}" for k in ("namespace", "key", "topic", "brokerName") if k in event]
        return f"{self.type} {' '.join(named)} (partition {self.partition}, offset {self.offset})"


class AdminJournal:
    def __init__(self, warehouse: StorePath) -> None:
        self.root = store_path(warehouse) / JOURNAL_DIR

    def record(self, events: Iterable[Mapping[str, Any]], coords: Iterable[tuple[int, int]]) -> None:
        """Note the admin writes among `events`, published at `coords` (one per event: admin writes
        are never chunked). A note that cannot be written is logged: the write itself is in the log."""
        now = int(time.time() * 1000)
        for event, (partition, offset) in zip(events, coords, strict=True):
            if event["type"] not in ADMIN_EVENT_TYPES:
                continue
            key, value = encode(event)
            note = {"type": event["type"], "key": key.decode(), "value": value.decode(), "time": now}
            try:
                folder = self.root / str(partition)
                folder.mkdir(parents=True, exist_ok=True)
                (folder / f"{offset}.json").write_text(json.dumps(note, sort_keys=True))
            except Exception as exc:  # never fails a publish Kafka acknowledged (HDFS errors are not all OSError)
                log.warning("admin write %s at partition %d offset %d not noted in %s: %s", event["type"], partition,
                            offset, self.root, exc)

    def between(self, partition: int, first: int, end: int) -> list[JournalEntry]:
        """The admin writes noted at offsets first..end-1 of `partition`, in log order."""
        folder = self.root / str(partition)
        if not folder.exists():
            return []
        found = []
        for path in folder.iterdir():
            offset = _offset(path.name)
            if offset is None or not first <= offset < end:
                continue
            try:
                note = json.loads(path.read_text())
            except Exception as exc:  # a half-written note, a store error: named by its place only
                log.warning("admin write note %s unreadable: %s", path, exc)
                continue
            found.append(JournalEntry(partition, offset, note["type"], note["key"], note["value"].encode(),
                                      int(note["time"])))
        return sorted(found, key=lambda e: e.offset)

    def prune(self, read: Mapping[str, int]) -> int:
        """Remove the notes below the offsets the job has read (`read`: partition -> next offset);
        returns how many."""
        removed = 0
        if not self.root.exists():
            return 0
        for folder in self.root.iterdir():
            upto = read.get(folder.name)
            if upto is None:
                continue
            for path in folder.iterdir():
                offset = _offset(path.name)
                if offset is not None and offset < int(upto):
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed


def _offset(name: str) -> int | None:
    stem = name.removesuffix(".json")
    return int(stem) if name.endswith(".json") and stem.isdigit() else None
