"""Several remoting front processes on one port (NAMESRV_REMOTING_PROCESSES, SO_REUSEPORT).

One front is one event loop on one Python thread: it answers lookups with at most one core. With
N > 1, `python -m remoting` becomes a supervisor of N front processes, each binding the port with
SO_REUSEPORT (the kernel hashes each new connection to one of their listening sockets) and
holding its own connections, store, publisher and coalescing window. They add connections and
CPU but not a copy of the cut: each maps the host's one cut file (`snapshots.cutbuilder`).

Why each part is where it is:

- **Forked after the imports.** The supervisor imports everything a front needs, freezes its
  objects out of the garbage collector (`gc.freeze`, so a collection in a child never writes to
  the pages it shares with the others) and forks; a child starts in milliseconds instead of
  re-importing (about 1.4 s), and the imported modules' memory is shared by all of them
  (docs/performance.md has the measurement). The supervisor starts no thread, opens no store,
  lock or connection before it forks, so a child inherits none.
- **Per process:** connections and their bounds (idle timeout, held reading), the publish
  pipeline (one Kafka producer each) and the heartbeat coalescing: a broker's connection lives in
  one process, and what a broker sends goes through that process's window in arrival order.
  Across processes nothing is ordered, as across two fronts today; the job does not need it (a
  closed connection's unregistration names the registration it undoes, `registrationOffset`).
  Each process's store watches the job's progress record and the cut file itself, so the
  served-cut waiter of a write waits on the process that took it.
- **Shared as a host total:** the bound on writes in flight. It exists to bound the memory a
  registration wave faster than the job takes; each process takes `share(WRITES_IN_FLIGHT, N)`,
  so the host holds what one front held, and SYSTEM_BUSY comes at the same total.
- **The in-process cut builder** (a host without `python -m snapshots.cutbuilder`): at most one
  process writes the file, since the builder's lock is an flock taken by each child on its own
  open of the lock file after the fork; the others map what it writes. The launcher's hosts have
  their own builder, so no front builds.
- **Metrics:** each process writes `remoting-<port>.<i>.prom`; the supervisor writes their sum as
  `remoting-<port>.prom`, the file the HTTP server reads (`remoting.metrics_sum`).
- **Supervision:** a child that dies is forked again, at once after a stable minute and with a
  doubling delay while it keeps dying; after `MAX_QUICK_DEATHS` quick deaths in a row the
  supervisor stops and exits 1, and the launcher (which supervises it as its `remoting` child)
  restarts the whole. SIGTERM or SIGINT stops every child (SIGKILL after `STOP_S`); a child dies
  with the supervisor (PR_SET_PDEATHSIG). A replaced child binds only once its store has mapped
  the cut, so the kernel never hands a connection to a process that does not serve yet while
  its siblings do.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import math
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remoting import metrics_sum
from schemas.metrics import metrics_file, remoting_role

log = logging.getLogger("namesrv.remoting")
TICK_S = 0.2
METRICS_SUM_S = 1.0  # as often as each front writes its own file (remoting.front.METRICS_WRITE_S)
STABLE_S = 60.0  # a child that ran this long died of a crash, not a crash loop: forked again at once
MAX_QUICK_DEATHS = 5  # then the supervisor gives up (after about 31 s of doubling delays)
STOP_S = 8.0  # under the launcher's 10 s for the remoting child
_PR_SET_PDEATHSIG = 1

# A child's body: serve as process `index`, call `listening()` once its socket is bound; its
# return value is the child's exit code.
ChildBody = Callable[[int, Callable[[], None]], int]


def share(total: int, processes: int) -> int:
    """One process's part of a host-wide bound (rounded up: never zero)."""
    return max(1, math.ceil(total / processes))


def child_role(remoting_port: int, index: int) -> str:
    """The metrics file of front process `index` on this port (`schemas.metrics.metrics_file`)."""
    return f"{remoting_role(remoting_port)}.{index}"


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on host:port already: a bind without SO_REUSEPORT fails then,
    even beside sockets that have it. Checked before the children bind with SO_REUSEPORT, which
    would otherwise share the port silently with a second `python -m remoting` of the same user."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    except OSError:
        return False  # the children's own bind says what is wrong with the address
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError:
            return True
    return False


class MetricsFiles:
    """The children's metrics files and their sum (`remoting.metrics_sum`): what ended children
    counted stays in the sum (`retire`), the live ones' files are read as they are."""

    def __init__(self, data_dir: Path, remoting_port: int, processes: int) -> None:
        self.data_dir, self.port, self.processes = Path(data_dir), remoting_port, processes
        self.retired: metrics_sum.Families = {}

    def child_file(self, index: int) -> Path:
        return metrics_file(self.data_dir, child_role(self.port, index))

    @property
    def path(self) -> Path:
        return metrics_file(self.data_dir, remoting_role(self.port))

    def clear(self) -> None:
        """Files a previous supervisor's children left (it was killed): not this run's counts."""
        for stale in self.path.parent.glob(f"{remoting_role(self.port)}.*.prom"):
            stale.unlink(missing_ok=True)

    def retire(self, index: int) -> None:
        """Child `index` ended: what it counted stays in the sum; its file goes."""
        path = self.child_file(index)
        try:
            ended = metrics_sum.parse(path.read_text())
        except OSError:
            return
        self.retired = metrics_sum.total([self.retired, metrics_sum.cumulative(ended)])
        path.unlink(missing_ok=True)

    def write_sum(self) -> None:
        texts = []
        for index in range(self.processes):
            try:
                texts.append(self.child_file(index).read_text())
            except OSError:
                continue  # not written yet (a child writes its first file a second after it binds)
        if not texts and not self.retired:
            return
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp.{os.getpid()}")
        tmp.write_bytes(metrics_sum.summed(texts, self.retired))
        os.replace(tmp, path)


@dataclass
class Slot:
    """Front process `index`: its pid while it runs, and how it has been dying."""

    index: int
    pid: int | None = None
    started_at: float = 0.0
    quick_deaths: int = 0
    next_start: float = 0.0
    listening: bool = False


class Supervisor:
    """Forks `processes` children running `body` and keeps them running (module docstring)."""

    def __init__(self, processes: int, body: ChildBody, metrics: MetricsFiles, *, where: str = "") -> None:
        self.slots = [Slot(i) for i in range(processes)]
        self.body = body
        self.metrics = metrics
        self.where = where
        self.stopping = False
        self.gave_up: str | None = None
        self._ready_r, self._ready_w = os.pipe()
        os.set_blocking(self._ready_r, False)
        self._pending = b""
        self._all_listening = False

    # ------------------------------------------------------------ the parent's loop

    def run(self) -> int:
        """Fork the children, keep them running until SIGTERM/SIGINT, stop them; the exit code."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop_requested)
        self.metrics.clear()
        next_sum = time.monotonic() + METRICS_SUM_S
        while not self.stopping and self.gave_up is None:
            self._reap()
            self._start_due()
            self._read_listening(TICK_S)
            if time.monotonic() >= next_sum:
                next_sum = time.monotonic() + METRICS_SUM_S
                self._write_sum()
        if self.gave_up is not None:
            log.error("%s; stopping the other front processes", self.gave_up)
        self.stop_all()
        self._write_sum()
        return 1 if self.gave_up is not None else 0

    def _stop_requested(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _write_sum(self) -> None:
        try:
            self.metrics.write_sum()
        except OSError as exc:
            log.warning("remoting metrics not summed: %s", exc)

    def _start_due(self) -> None:
        now = time.monotonic()
        for slot in self.slots:
            if slot.pid is None and now >= slot.next_start and not self.stopping:
                self._fork(slot)

    def _reap(self) -> None:
        """Collect the children that ended; each is forked again (`_start_due`) after its delay."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((s for s in self.slots if s.pid == pid), None)
            if slot is None:
                continue
            self.metrics.retire(slot.index)
            ran = time.monotonic() - slot.started_at
            slot.pid, slot.listening = None, False
            if self.stopping:
                continue
            slot.quick_deaths = 0 if ran >= STABLE_S else slot.quick_deaths + 1
            delay = 0.0 if not slot.quick_deaths else min(30.0, 2.0 ** (slot.quick_deaths - 1))
            slot.next_start = time.monotonic() + delay
            how = _exit_status(status)
            if slot.quick_deaths > MAX_QUICK_DEATHS:
                self.gave_up = (f"front process {slot.index} died {slot.quick_deaths} times in a row, each within "
                                f"{STABLE_S:.0f} s of its start (the last time it {how})")
                return
            log.warning("front process %d (pid %d) %s after %.1f s; forking it again in %.0f s", slot.index, pid, how,
                        ran, delay)

    def _read_listening(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for children saying they listen (their index, a line each)."""
        try:
            readable, _, _ = select.select([self._ready_r], [], [], timeout_s)
        except InterruptedError:
            return
        if not readable:
            return
        try:
            self._pending += os.read(self._ready_r, 4096)
        except BlockingIOError:
            return
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            slot = self.slots[int(line)]
            if slot.pid is None:
                continue
            slot.listening = True
            log.info("front process %d (pid %d) listening", slot.index, slot.pid)
        if not self._all_listening and all(s.listening for s in self.slots):
            self._all_listening = True
            log.info("remoting front on %s: %d processes on the one port (SO_REUSEPORT), pids %s", self.where,
                     len(self.slots), ", ".join(str(s.pid) for s in self.slots))

    def stop_all(self) -> None:
        """SIGTERM to every child, SIGKILL to those still running after STOP_S."""
        self.stopping = True
        for slot in self.slots:
            if slot.pid is not None:
                _signal(slot.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        while any(s.pid is not None for s in self.slots) and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for slot in self.slots:
            if slot.pid is not None:
                log.warning("front process %d (pid %d) did not stop within %.0f s; killing it", slot.index, slot.pid,
                            STOP_S)
                _signal(slot.pid, signal.SIGKILL)
                try:
                    os.waitpid(slot.pid, 0)
                except ChildProcessError:
                    pass
                self.metrics.retire(slot.index)
                slot.pid = None

    # ------------------------------------------------------------ a child

    def _fork(self, slot: Slot) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()  # the imported objects out of the collector's reach: their pages stay shared
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            os._exit(self._child(slot.index, parent))
        slot.pid, slot.started_at, slot.listening = pid, time.monotonic(), False

    def _child(self, index: int, parent: int) -> int:
        """Run in the forked child; its exit code (never returns into the parent's loop)."""
        code = 1
        try:
            os.close(self._ready_r)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)  # until the front's loop takes them
            _die_with_parent(parent)
            _name_records(index)
            ready_w = self._ready_w

            def listening() -> None:
                os.write(ready_w, f"{index}\n".encode())

            code = self.body(index, listening)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            log.exception("front process %d failed", index)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return code


def _die_with_parent(parent: int) -> None:
    """SIGTERM when the supervisor dies, however it dies (the launcher then starts a new one)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    if os.getppid() != parent:  # it died before the prctl
        os._exit(0)


def _name_records(index: int) -> None:
    """Every log record of front process `index` names it (`namesrv.remoting[1]`): the children
    share the supervisor's output, which the launcher writes to one log."""
    make = logging.getLogRecordFactory()

    def named(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        record.name = f"{record.name}[{index}]"
        return record

    logging.setLogRecordFactory(named)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _exit_status(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"
