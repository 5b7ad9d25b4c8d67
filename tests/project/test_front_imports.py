"""What the remoting front's process loads by importing its entry point: not deltalake nor
pyarrow.parquet, which it needs only to serve time travel (`snapshots.reader` imports them in the
methods that read Delta). Each front process of NAMESRV_REMOTING_PROCESSES pays for what it
imports; those two were 17 MB of a bare import's peak RSS (102 -> 85 MB)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_front_entry_point_loads_neither_deltalake_nor_pyarrow_parquet():
    code = "import remoting.__main__, sys; print('deltalake' in sys.modules, 'pyarrow.parquet' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
