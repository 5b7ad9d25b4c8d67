"""BENCHMARKS.md on the documentation site: docs/benchmarks.md, the same text with its paths seen
from docs/ (a picture `docs/x.png` is `x.png` there, a page named `docs/x.md` a link to it).
Written wherever BENCHMARKS.md is written (`./run.sh bench`, `--render`); a test keeps the two
alike (tests/project/test_bench_figures.py)."""

from __future__ import annotations

import re
from pathlib import Path

NOTE = ("_The site's copy of BENCHMARKS.md, written with it by `./run.sh bench`; do not edit by hand._\n\n")
_PAGE = re.compile(r"(?<![\w/`])docs/([a-z][a-z0-9-]*)\.md")  # not in a path or a code span


def site_copy(markdown: str) -> str:
    """BENCHMARKS.md's text as docs/benchmarks.md holds it."""
    text = markdown.replace("](docs/", "](")
    text = _PAGE.sub(lambda m: f"[{m.group(1)}]({m.group(1)}.md)", text)
    title, _, rest = text.partition("\n")
    return f"{title}\n\n{NOTE}{rest.lstrip(chr(10))}"


def write(benchmarks: Path, docs: Path) -> None:
    """docs/benchmarks.md from BENCHMARKS.md as it is now."""
    (docs / "benchmarks.md").write_text(site_copy(benchmarks.read_text()))
