"""Opt-in heap dumps of a running process (issue 36: what holds a serving process's heap).

With `NAMESRV_TRACEMALLOC=<frames>` (frames per traceback; unset: off, and nothing here runs) a
process that calls `install` starts `tracemalloc` at once (0 frames: no tracing, the dumps give
the process's figures alone, at no cost until asked) and, on each SIGUSR2, writes
`<directory>/heap-<role>-<pid>-<n>.txt`: its RSS and PSS (`/proc/self/smaps_rollup`), glibc's
arenas (`mallinfo2`: bytes in use, and bytes freed but kept), pyarrow's pool when pyarrow is
loaded (`pa.total_allocated_bytes()`), what tracemalloc traces (current and peak) and costs, and
the largest holders: by traceback (each with its frames, the allocating one first) and by line.

Why a hook and not a profiler attached from outside: the memory of interest is the Python heap
of processes that run for hours under a fleet (a 10,000-broker cut), and tracemalloc must be
tracing since the start to name what allocated what survives. Tracing costs CPU (every
allocation records its traceback) and memory (about as much again as the traced heap at 25
frames): a debugging aid, never on by default. It is read here rather than declared in `conf`
because it is not a setting of the product, only of a profiling run; the entry points pass
where the dumps go.

The dump is written on a thread of its own, woken by the signal handler (which only sets an
event), so a signal landing inside the answering loop does no work there beyond that; the
tracemalloc snapshot itself holds the GIL while it copies the traces (seconds at millions of
allocations). Used by `bench`-style profiling scripts: start the system with the variable set,
`kill -USR2 <pid>`, read the newest dump.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import linecache
import logging
import os
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Mapping
from pathlib import Path

ENV = "NAMESRV_TRACEMALLOC"
TOP = 25          # holders listed by traceback, and by line
FRAMES_SHOWN = 12  # frames of each traceback written (the allocation's end first)
MiB = 1024 * 1024
log = logging.getLogger(__name__)


def frames_asked(environ: Mapping[str, str] | None = None) -> int | None:
    """The frames per traceback asked for by NAMESRV_TRACEMALLOC (None: off; 0: dumps without
    tracing); a value that is not a whole number is off, with a warning (a debugging switch must
    not stop a process)."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not raw:
        return None
    try:
        frames = int(raw)
    except ValueError:
        log.warning("%s=%r is not a number of frames: heap dumps are off", ENV, raw)
        return None
    return max(0, frames)


def memory_figures() -> dict[str, int]:
    """RSS, PSS and their parts (kB) from /proc/self/smaps_rollup; empty where there is none."""
    out: dict[str, int] = {}
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[name] = int(parts[0])
    except OSError:
        pass
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_figures() -> dict[str, int]:
    """glibc's arenas (bytes): `arena` (sbrk'd), `hblkhd` (mmap'd blocks), `uordblks` (in use),
    `fordblks` (freed, kept by malloc: RSS no allocation holds). Empty off glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    info = fn()
    return {name: int(getattr(info, name)) for name in ("arena", "hblkhd", "uordblks", "fordblks")}


def arrow_figures() -> dict[str, int | str]:
    """pyarrow's default pool, when this process has loaded pyarrow (never imported here)."""
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return {}
    pool = pa.default_memory_pool()
    return {"total_allocated_bytes": int(pa.total_allocated_bytes()), "backend": pool.backend_name,
            "max_memory": int(pool.max_memory() or 0)}


def _frame_lines(tb: tracemalloc.Traceback) -> list[str]:
    lines = []
    for frame in list(tb)[-FRAMES_SHOWN:][::-1]:  # the allocating frame first
        code = linecache.getline(frame.filename, frame.lineno).strip()
        lines.append(f"      {frame.filename}:{frame.lineno}  {code[:110]}")
    return lines


def render(role: str, snapshot: tracemalloc.Snapshot | None, figures: Mapping[str, Mapping[str, float | str]],
           top: int = TOP) -> str:
    """The dump's text: the process's figures (MiB), then the top holders by traceback and by line."""
    out = [f"heap dump of {role} (pid {os.getpid()}) at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"]
    for name, values in figures.items():
        shown = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())
        out.append(f"{name} (MiB): {shown}")
    if snapshot is None:
        out.append("tracemalloc: not tracing")
        return "\n".join(out) + "\n"
    stats = snapshot.statistics("traceback")
    total = sum(s.size for s in stats)
    out.append(f"traced: {total / MiB:.1f} MiB in {sum(s.count for s in stats):,} blocks, {len(stats):,} tracebacks")
    out.append(f"\ntop {top} by traceback:")
    for i, s in enumerate(stats[:top], 1):
        out.append(f"  #{i} {s.size / MiB:.1f} MiB in {s.count:,} blocks")
        out.extend(_frame_lines(s.traceback))
    by_line: dict[tuple[str, int], list[int]] = {}
    for s in stats:  # the allocating frame's line, summed over the tracebacks through it
        frame = s.traceback[-1]
        held = by_line.setdefault((frame.filename, frame.lineno), [0, 0])
        held[0] += s.size
        held[1] += s.count
    out.append(f"\ntop {top} by line:")
    for (filename, lineno), (size, count) in sorted(by_line.items(), key=lambda kv: -kv[1][0])[:top]:
        out.append(f"  {size / MiB:8.1f} MiB {count:>10,}  {filename}:{lineno}  "
                   f"{linecache.getline(filename, lineno).strip()[:100]}")
    return "\n".join(out) + "\n"


def dump(role: str, directory: Path, n: int) -> Path:
    """Write one dump now (any thread); returns its path."""
    snapshot = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
    traced = tracemalloc.get_traced_memory() if tracemalloc.is_tracing() else (0, 0)
    figures: dict[str, Mapping[str, float | str]] = {
        "smaps_rollup": {k: v / 1024 for k, v in memory_figures().items() if k.startswith(("Rss", "Pss", "Anonymous"))},
        "malloc": {k: v / MiB for k, v in malloc_figures().items()},
        "pyarrow": {k: v / MiB if isinstance(v, int) else v for k, v in arrow_figures().items()},
        "tracemalloc": {"current": traced[0] / MiB, "peak": traced[1] / MiB,
                        "overhead": tracemalloc.get_tracemalloc_memory() / MiB}}
    text = render(role, snapshot, figures)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"heap-{role}-{os.getpid()}-{n}.txt"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def install(role: str, directory: Path, environ: Mapping[str, str] | None = None) -> bool:
    """When NAMESRV_TRACEMALLOC asks for it: start tracing and dump on each SIGUSR2 (module
    docstring). Call it first thing in the process's main thread; returns whether it is on."""
    frames = frames_asked(environ)
    if frames is None:
        return False
    if frames and not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    wanted = threading.Event()

    def dumper() -> None:
        n = 0
        while True:
            wanted.wait()
            wanted.clear()
            n += 1
            try:
                log.warning("heap dump written: %s", dump(role, directory, n))
            except Exception:  # a diagnostic must not take the process down
                log.exception("heap dump failed")

    threading.Thread(target=dumper, name="heapdump", daemon=True).start()
    try:
        signal.signal(signal.SIGUSR2, lambda *_: wanted.set())
    except ValueError:  # not the main thread: no handler can be set from here
        log.warning("%s: tracing %d frames, but SIGUSR2 could not be handled from this thread", ENV, frames)
        return True
    log.warning("%s: tracing allocations (%d frames); SIGUSR2 writes a heap dump under %s", ENV, frames, directory)
    return True
