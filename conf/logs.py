"""Logging for every process: text or JSON lines (NAMESRV_LOG_FORMAT), and the size-rotated
files the launcher keeps (NAMESRV_LOG_MAX_BYTES, NAMESRV_LOG_BACKUPS).

Processes log to stdout; the launcher pumps each child's output into `<data dir>/logs/<child>.log`
through a `RotatingLog`, which starts every file (the first and each one after a rotation) with
a header naming the version and the effective configuration, secrets masked. In JSON mode every
line of every file is a JSON object: lines a child prints that are not (Spark's JVM, Tansu) are
wrapped by the launcher, so a log shipper can parse each file line by line.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

# Libraries that log every connection at INFO; their warnings still show.
_NOISY = ("kafka", "py4j", "waitress.queue", "granian")
# Context a log call may carry (`extra={...}`): JSON fields, so logs can be filtered by them.
CONTEXT_FIELDS = ("batchId", "snapshotId", "brokerName", "clusterName", "brokerAddr", "topic")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{int(epoch_s * 1000) % 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message, context fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": _iso(record.created), "level": record.levelname, "logger": record.name,
                               "message": record.getMessage()}
        for name in CONTEXT_FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def setup_logging(fmt: str = "text", level: int = logging.INFO, log: RotatingLog | None = None) -> None:
    """Root logging to stdout in `fmt` (text or json), and to `log` when given (the launcher's own)."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stdout)]
    if log is not None:
        handlers.append(RotatingLogHandler(log))
    for h in handlers:
        h.setFormatter(formatter(fmt))
    logging.basicConfig(level=level, handlers=handlers, force=True)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)


class RotatingLog:
    """An append-only log file rotated by size: `x.log` → `x.log.1` → ... → `x.log.<backups>`
    (the oldest dropped). Every new file starts with `header`. Thread-safe; lines are written whole."""

    def __init__(self, path: Path, *, max_bytes: int, backups: int, header: str) -> None:
        self.path, self.max_bytes, self.backups, self.header = Path(path), max_bytes, backups, header
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 (open for the object's life)
        self._size = self._fh.tell()
        if self._size == 0:
            self._write(header.encode() + b"\n")

    def write(self, line: bytes) -> None:
        if not line.endswith(b"\n"):
            line += b"\n"
        with self._lock:
            if self._size > 0 and self._size + len(line) > self.max_bytes:
                self._rotate()
            self._write(line)

    def _write(self, data: bytes) -> None:
        self._fh.write(data)
        self._fh.flush()
        self._size += len(data)

    def _rotate(self) -> None:
        self._fh.close()
        for i in range(self.backups, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if i == self.backups:
                older.unlink(missing_ok=True)
            elif older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self._fh = open(self.path, "ab")  # noqa: SIM115 (open until the next rotation)
        self._size = 0
        self._write(self.header.encode() + b"\n")

    def close(self) -> None:
        with self._lock:
            self._fh.close()


class RotatingLogHandler(logging.Handler):
    def __init__(self, log: RotatingLog) -> None:
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.write(self.format(record).encode() + b"\n")
        except Exception:
            self.handleError(record)


def header(role: str, version: str, configuration: dict[str, str], fmt: str) -> str:
    """A log file's first line: which program, which version, with which settings."""
    message = f"namesrv-stream {version}: {role} log"
    if fmt == "json":
        return json.dumps({"time": _iso(time.time()), "level": "INFO", "logger": f"namesrv.{role}",
                           "message": message, "version": version, "configuration": configuration})
    settings = " ".join(f"{k}={v}" for k, v in configuration.items())
    return f"{_iso(time.time())} INFO namesrv.{role}: {message}; configuration: {settings}"


def as_json_line(line: bytes, source: str) -> bytes:
    """`line` if it is a JSON object already, else wrapped as one (a JVM or Tansu line)."""
    text = line.rstrip(b"\r\n")
    if text.startswith(b"{"):
        try:
            if isinstance(json.loads(text), dict):
                return text + b"\n"
        except ValueError:
            pass
    message = text.decode("utf-8", errors="replace")
    level = next((lv for lv in ("ERROR", "WARN", "INFO", "DEBUG") if f" {lv}" in message[:60]), "INFO")
    return json.dumps({"time": _iso(time.time()), "level": "WARNING" if level == "WARN" else level,
                       "logger": source, "message": message}).encode() + b"\n"
