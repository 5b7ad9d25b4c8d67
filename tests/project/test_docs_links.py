"""A documentation page names another page by a link, never in plain text (issue 37): "see
docs/scaling.md" on the site is a dead string a reader has to retype, where `[scaling](scaling.md)`
is a link mkdocs checks (--strict). Every page under docs/ and README.md is read; fenced code
blocks, link texts and targets, and code spans that hold more than a page's path (a command such
as `cat docs/x.md`) are left alone."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
PAGE_NAMES = PAGES | {p.rsplit("/", 1)[-1] for p in PAGES}

FENCE = re.compile(r"^\s*(```|~~~)")
# [text](target) and ![alt](target), one level of brackets inside the text; a reference
# definition `[id]: target`; an HTML comment on one line
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\](?:\([^)]*\)|\[[^\]]*\])")
DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*\S+")
COMMENT = re.compile(r"<!--.*?-->")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# a page's file name, bare (`scaling.md`), under docs/ or relative (`./x.md`, `../x.md`)
MENTION = re.compile(r"(?<![\w/.-])(?:\.\.?/)?(docs/)?((?:reference/)?[\w-]+\.md)(?![\w/-])")

# Plain mentions in text this change could not edit, at most this many of each: docs/scaling.md
# and docs/performance.md (another change owns them), and the configuration page's table, which
# is conf.Config's declarations verbatim (conf.settings_table; tests/project/test_layout.py).
# Link them at their source and take them out of here; a new plain mention anywhere fails.
NOT_YET: dict[str, Counter[str]] = {
    "docs/configuration.md": Counter({"docs/deploy.md": 2, "docs/operations.md": 1, "docs/reliability.md": 1}),
    "docs/performance.md": Counter({"docs/scaling.md": 3, "docs/latency.md": 1}),
    "docs/scaling.md": Counter({"docs/architecture.md": 3, "docs/semantics.md": 2, "docs/latency.md": 1,
                                "docs/events.md": 1}),
}


def plain_mentions(text: str) -> list[tuple[int, str]]:
    """(line number, mention) of every page file named in plain text: outside fenced code, links
    and code spans that hold more than the path. Pure. `docs/<anything>.md` counts (a page that
    is gone is still a dead string); a bare `<name>.md` counts when docs/ has that page, so
    `BENCHMARKS.md` or `README.md` do not."""
    found: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or DEFINITION.match(line):
            continue
        rest = LINK.sub(" ", COMMENT.sub(" ", line))
        rest = CODE_SPAN.sub(lambda m: m.group(2).strip() if MENTION.fullmatch(m.group(2).strip()) else " ", rest)
        for m in MENTION.finditer(rest):
            if m.group(1) or m.group(2) in PAGE_NAMES:
                found.append((number, m.group(0)))
    return found


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_page_is_named_in_plain_text():
    over = []
    for path in _pages():
        name = path.relative_to(ROOT).as_posix()
        mentions = plain_mentions(path.read_text())
        allowed = NOT_YET.get(name, Counter())
        counts = Counter(m for _, m in mentions)
        over += [f"{name}:{line}: {m}" for line, m in mentions if counts[m] > allowed[m]]
    assert not over, "pages named in plain text, make each a relative link ([scaling](scaling.md); from " \
                     "README.md, docs/scaling.md):\n" + "\n".join(over)


@pytest.mark.parametrize("text, expected", [
    ("the costs are in docs/scaling.md, per unit", ["docs/scaling.md"]),
    ("see scaling.md.", ["scaling.md"]),
    ("in `docs/remoting.md`", ["docs/remoting.md"]),
    ("(docs/reference/metrics.md)", ["docs/reference/metrics.md"]),
    ("a page that is gone: docs/nothing-here.md", ["docs/nothing-here.md"]),
    ("cited ../semantics.md §15", ["../semantics.md"]),
    ("two: docs/deploy.md and latency.md", ["docs/deploy.md", "latency.md"]),
    ("| `docs/` | `semantics.md`: the behaviour |", ["semantics.md"]),
])
def test_a_plain_mention_is_found(text, expected):
    assert [m for _, m in plain_mentions(text)] == expected


@pytest.mark.parametrize("text", [
    "see [scaling](scaling.md) and [semantics §15.6](semantics.md#156-when-the-event-log-itself-is-unreachable)",
    "[docs/compatibility.md](compatibility.md) and [`deploy.md`](deploy.md)",
    "from the README: [operations](docs/operations.md#the-event-logs-retention)",
    "![the bed](deploy-topology.png) and BENCHMARKS.md and README.md and notes.md",
    "```bash\ncat docs/scaling.md\n```",
    "- a list\n  ~~~\n  docs/latency.md\n  ~~~",
    "`python -m docgen` writes `docs/reference/*.md`; `cat docs/scaling.md | less`",
    "[scaling]: scaling.md",
    "<!-- generated from docs/reference/metrics.md -->",
    "https://example.org/docs/scaling.md",
])
def test_links_code_and_other_files_are_not_mentions(text):
    assert plain_mentions(text) == []


def test_the_fence_state_spans_lines():
    text = "```\ndocs/scaling.md\n```\nthen docs/latency.md\n"
    assert plain_mentions(text) == [(4, "docs/latency.md")]
