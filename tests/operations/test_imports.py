"""A process's refused imports (conf/imports.py), in a fresh interpreter each: the test's own
process needs pandas (Spark's Arrow path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_refused_pandas_is_not_imported_by_pyarrow_and_says_why_when_asked_for():
    out = _run("""
import sys
from conf.imports import refuse
assert refuse("pandas", why="the test's reason") == []
assert refuse("pandas", why="again") == []  # once is enough: one finder
import pyarrow as pa
print(pa.array([1, 2, 3]).to_pylist(), pa.table({"a": ["x"]}).num_rows, "pandas" in sys.modules)
try:
    import pandas.core.frame
except ModuleNotFoundError as exc:
    print(exc.name, "|", exc)
print(sum(type(f).__name__ == "_Refused" for f in sys.meta_path))
""")
    assert out.splitlines() == ["[1, 2, 3] 1 False",
                                "pandas | pandas is not imported in this process (the test's reason)", "1"]


def test_a_refusal_after_the_import_says_it_saves_nothing():
    out = _run("""
import pandas, json
from conf.imports import refuse
print(refuse("pandas", "json", "nosuchpackage", why="late"))
""")
    assert out.strip() == "['json', 'pandas']"
