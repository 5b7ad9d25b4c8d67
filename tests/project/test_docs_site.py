"""The documentation site builds with --strict: a broken link or anchor, a page missing from the
nav, or a nav entry without a page fails (mkdocs.yml's validation settings), and the README, the
front door, stays short and points only at pages that exist."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly(tmp_path):
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists() and shutil.which("mkdocs") is None:
        pytest.skip("mkdocs is not installed in this environment (pyproject's test extras)")
    done = subprocess.run([str(mkdocs if mkdocs.exists() else "mkdocs"), "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#]+)\)", readme)
    assert links and all((ROOT / link).is_file() for link in links), [x for x in links if not (ROOT / x).is_file()]
