"""conf.heapdump: off unless NAMESRV_TRACEMALLOC asks; asked, a real process dumps its heap on
SIGUSR2 (its figures and the largest holders by traceback, the allocating line named)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conf import heapdump

ROOT = Path(__file__).resolve().parents[2]
HOLDER = '''
import sys, time
from pathlib import Path
from conf import heapdump
heapdump.install("probe", Path(sys.argv[1]))
held = [bytes(1000) + str(i).encode() for i in range(20_000)]  # the holder: about 20 MB
print("ready", flush=True)
time.sleep(60)
'''


def test_off_unless_asked():
    assert heapdump.frames_asked({}) is None
    assert heapdump.frames_asked({heapdump.ENV: "0"}) == 0
    assert heapdump.frames_asked({heapdump.ENV: "25"}) == 25
    assert heapdump.frames_asked({heapdump.ENV: "lots"}) is None
    assert heapdump.install("off", Path("/nonexistent"), {}) is False


def test_sigusr2_dumps_the_largest_holders_by_traceback(tmp_path):
    env = {**os.environ, heapdump.ENV: "5", "PYTHONPATH": str(ROOT)}
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        dumps: list[Path] = []
        while not dumps and time.monotonic() < deadline:
            time.sleep(0.1)
            dumps = list(tmp_path.glob(f"heap-probe-{proc.pid}-1.txt"))
        assert dumps, "no dump within 30 s"
        text = dumps[0].read_text()
    finally:
        proc.kill()
        proc.wait()
    assert "smaps_rollup (MiB): Rss" in text and "tracemalloc (MiB): current" in text
    top = text.split("top 25 by traceback:", 1)[1].split("\n  #2 ", 1)[0]
    size = float(top.split("#1 ", 1)[1].split(" MiB", 1)[0])
    assert 18 <= size <= 30 and "holder.py:6  held = [bytes(1000)" in top, top
