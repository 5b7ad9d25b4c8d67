"""The configuration page names every variable the project reads (issue 37): the programs' come
from conf (test_layout.py keeps that table), the notebooks read their own; and the settings the
checkpoint or the events topic keep from their first start are marked so."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_notebooks_variables_are_on_the_page():
    read = set()
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        read |= set(re.findall(r'os\.environ\.get\(\\"((?:NAMESRV|AUDIT)_\w+)\\"', notebook.read_text()))
    assert "NAMESRV_WAREHOUSE" in read
    section = PAGE.read_text().split("## Read by the notebooks", 1)[1]
    assert not {v for v in read if f"`{v}`" not in section}, sorted(v for v in read if f"`{v}`" not in section)


def test_the_settings_kept_from_the_first_start_are_marked():
    section = PAGE.read_text().split("## Fixed at the first start", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(NAMESRV_\w+)`.*$", section, re.M)}
    assert "fixed at the first start" in rows["NAMESRV_SHUFFLE_PARTITIONS"]
    assert "fixed at the first start" in rows["NAMESRV_STATE_STORE"]
    assert "moved at the next start" in rows["NAMESRV_STATE_BUCKETS"]
