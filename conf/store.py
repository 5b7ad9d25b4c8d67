"""Where the shared state lives: a local directory or an HDFS URI, behind pathlib's own names.

The Delta tables, Spark's checkpoint and the writer's leases must be on a store that every host
of a deployment sees (docs/deploy.md). Spark and delta-rs take URIs; the few small files the job
and the readers handle themselves (offset log entries, the progress record, leases, the state
layout) go through `store_path`, which returns a `pathlib.Path` for a local directory and an
`HdfsPath` for `hdfs://namenode:port/path`. `HdfsPath` has the subset of pathlib the code base
uses, with pathlib's names and exceptions (FileNotFoundError, FileExistsError), so a call site
reads the same for both and the local case stays plain pathlib.

HDFS is reached with hdfs-native (a Rust client, no JVM and no libhdfs), over the NameNode's RPC:
a create that must not overwrite and a rename are single NameNode operations, atomic for every
host, as a local `open(..., "x")` and `os.replace` are for one host.
"""

from __future__ import annotations

import io
import os
import posixpath
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

SCHEMES = ("hdfs",)

# One client per NameNode per process: it holds the RPC connection. Keyed by the pid as well, so
# a process forked after a client was made (Spark's Python workers are forked from a daemon)
# opens its own instead of sharing the parent's sockets.
_clients: dict[tuple[int, str], Any] = {}
_clients_lock = threading.Lock()


def _client(authority: str) -> Any:
    key = (os.getpid(), authority)
    with _clients_lock:
        if key not in _clients:
            from hdfs_native import Client
            _clients[key] = Client(f"hdfs://{authority}")
        return _clients[key]


def is_uri(location: str | os.PathLike[str]) -> bool:
    return "://" in str(location)


def check_location(location: str) -> str | None:
    """Why `location` cannot be the store (None: it can): a local path or hdfs://host:port/path."""
    if not is_uri(location):
        return None
    parts = urlsplit(location)
    if parts.scheme not in SCHEMES:
        return f"scheme {parts.scheme!r} is not supported (a local directory or hdfs://namenode:port/path)"
    if not parts.hostname or parts.port is None:
        return "an hdfs:// location names its NameNode with host and port (hdfs://namenode:9000/path)"
    if not parts.path.startswith("/") or parts.query or parts.fragment:
        return "an hdfs:// location has an absolute path and no query (hdfs://namenode:9000/path)"
    return None


@dataclass(frozen=True)
class HdfsStat:
    """What readers ask of a file's status, with os.stat_result's names (hdfs-native reports no
    file id: st_ino is 0, and a rewrite is told by its modification time and size)."""

    st_size: int
    st_mtime_ns: int
    st_ino: int = 0

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9


@dataclass(frozen=True)
class HdfsPath:
    """A file or directory on HDFS, with pathlib's names; picklable (only the URI travels)."""

    authority: str  # namenode:port
    path: str  # absolute, normalised

    @classmethod
    def parse(cls, uri: str) -> HdfsPath:
        parts = urlsplit(uri)
        return cls(parts.netloc, posixpath.normpath(parts.path or "/"))

    def __str__(self) -> str:
        return f"hdfs://{self.authority}{self.path}"

    def __truediv__(self, other: str) -> HdfsPath:
        return HdfsPath(self.authority, posixpath.normpath(posixpath.join(self.path, other)))

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parent(self) -> HdfsPath:
        return HdfsPath(self.authority, posixpath.dirname(self.path) or "/")

    def with_name(self, name: str) -> HdfsPath:
        return self.parent / name

    @property
    def _fs(self) -> Any:
        return _client(self.authority)

    # -- reading
    def read_bytes(self) -> bytes:
        with self._fs.read(self.path) as f:
            return bytes(f.read())

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def stat(self) -> HdfsStat:
        st = self._fs.get_file_info(self.path)
        return HdfsStat(int(st.length), int(st.modification_time) * 1_000_000)

    def exists(self) -> bool:
        try:
            self._fs.get_file_info(self.path)
        except FileNotFoundError:
            return False
        return True

    def is_dir(self) -> bool:
        try:
            return bool(self._fs.get_file_info(self.path).isdir)
        except FileNotFoundError:
            return False

    def iterdir(self) -> Iterator[HdfsPath]:
        for st in self._fs.list_status(self.path):
            yield self / posixpath.basename(st.path)

    # -- writing
    def open(self, mode: str = "w", encoding: str = "utf-8") -> IO[Any]:
        """For writing: "w"/"wb" replace the file; "x"/"xb" create it, FileExistsError when it exists
        (one NameNode operation: exactly one of two hosts creating it at once wins). Reading is
        `read_bytes`/`read_text`."""
        if mode not in ("w", "wb", "x", "xb"):
            raise ValueError(f"mode {mode!r} is not supported on HDFS")
        return _Writer(self, overwrite=mode.startswith("w"), text=not mode.endswith("b"),  # type: ignore[return-value]
                       encoding=encoding)

    def write_bytes(self, data: bytes) -> int:
        with self.open("wb") as f:
            f.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    def replace(self, target: HdfsPath | Path) -> HdfsPath:
        """Rename over `target` (one NameNode operation)."""
        if not isinstance(target, HdfsPath) or target.authority != self.authority:
            raise ValueError(f"{self} can only be renamed on its own NameNode, not to {target}")
        self._fs.rename(self.path, target.path, True)
        return target

    def touch(self, exist_ok: bool = True) -> None:
        """Create an empty file, or set an existing one's modification time to now."""
        try:
            self.open("x").close()
            return
        except FileExistsError:
            if not exist_ok:
                raise
        now = int(time.time() * 1000)
        self._fs.set_times(self.path, now, now)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        if self.exists():
            if exist_ok and self.is_dir():
                return
            raise FileExistsError(str(self))
        self._fs.mkdirs(self.path, create_parent=parents)

    def unlink(self, missing_ok: bool = False) -> None:
        if not self._fs.delete(self.path, False) and not missing_ok:
            raise FileNotFoundError(str(self))


class _Writer(io.RawIOBase):
    """A file being written to HDFS: it exists under its name once `close` returns."""

    def __init__(self, target: HdfsPath, *, overwrite: bool, text: bool, encoding: str) -> None:
        from hdfs_native import WriteOptions
        options = WriteOptions()
        options.overwrite = overwrite
        self._inner = target._fs.create(target.path, options)
        self._text, self._encoding = text, encoding

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raw = data.encode(self._encoding) if self._text and isinstance(data, str) else bytes(data)
        self._inner.write(raw)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


StorePath = Path | HdfsPath


def replace_text(path: StorePath, text: str) -> None:
    """Atomically replace `path`'s contents: a temporary file beside it, then a rename over it (one
    NameNode operation on HDFS), so a reader sees the old text or the new, never part of it."""
    tmp = path.with_name(f".{path.name}.namesrv-tmp")
    tmp.write_text(text)
    tmp.replace(path)  # type: ignore[arg-type]  # a sibling: the same store


def store_path(location: str | os.PathLike[str] | HdfsPath) -> StorePath:
    """`location` as a path on its store: an `HdfsPath` for hdfs://, else a local `Path`."""
    if isinstance(location, HdfsPath):
        return location
    text = str(location)
    if is_uri(text):
        reason = check_location(text)
        if reason is not None:
            raise ValueError(f"{text}: {reason}")
        return HdfsPath.parse(text)
    return Path(text)
