"""A documentation page names another page by a link, never in plain text (issue 37): "see
docs/scaling.md" on the site is a dead string a reader has to retype, where `[scaling](scaling.md)`
is a link mkdocs checks (--strict). Every page under docs/ and README.md is read; fenced code
blocks, link texts and targets, and code spans that hold more than a page's path (a command such
as `cat docs/x.md`) are left alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
PAGE_NAMES = PAGES | {p.rsplit("/", 1)[-1] for p in PAGES}

FENCE = re.compile(r"^\s*(```|~~~)")
# [text](target) and ![alt](target), one level of brackets inside the text, either across a line
# break; a reference definition `[id]: target`; an HTML comment; a code span (within a paragraph)
PARAGRAPH = r"(?!\n\s*\n)"  # what follows does not cross a blank line
LINK = re.compile(rf"!?\[(?:{PARAGRAPH}[^\[\]]|\[[^\]]*\])*\](?:\((?:{PARAGRAPH}[^)])*\)|\[[^\]]*\])")
DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*\S+")
COMMENT = re.compile(r"<!--.*?-->", re.S)
CODE_SPAN = re.compile(rf"(`+)((?:{PARAGRAPH}.)+?)\1", re.S)
# a page's file name, bare (`scaling.md`), under docs/ or relative (`./x.md`, `../x.md`)
MENTION = re.compile(r"(?<![\w/.-])(?:\.\.?/)?(docs/)?((?:reference/)?[\w-]+\.md)(?![\w/-])")



def plain_mentions(text: str) -> list[tuple[int, str]]:
    """(line number, mention) of every page file named in plain text: outside fenced code, links
    and code spans that hold more than the path. Pure. `docs/<anything>.md` counts (a page that
    is gone is still a dead string); a bare `<name>.md` counts when docs/ has that page, so
    `BENCHMARKS.md` or `README.md` do not."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        kept.append("" if fenced or FENCE.match(line) or DEFINITION.match(line) else line)
    body = COMMENT.sub(_blank, LINK.sub(_blank, "\n".join(kept)))
    body = CODE_SPAN.sub(lambda m: m.group(2).strip() if MENTION.fullmatch(m.group(2).strip()) else _blank(m), body)
    found: list[tuple[int, str]] = []
    for number, line in enumerate(body.split("\n"), 1):
        for m in MENTION.finditer(line):
            if m.group(1) or m.group(2) in PAGE_NAMES:
                found.append((number, m.group(0)))
    return found


def _blank(m: re.Match[str]) -> str:
    """What is left of a match: its line breaks, so the lines after it keep their numbers."""
    return " " + "\n" * m.group(0).count("\n")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_page_is_named_in_plain_text():
    over = []
    for path in _pages():
        name = path.relative_to(ROOT).as_posix()
        over += [f"{name}:{line}: {m}" for line, m in plain_mentions(path.read_text())]
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
    "bounded by the retention ([Operating it, The event log's\nretention](operations.md#the-event-logs-retention)).",
])
def test_links_code_and_other_files_are_not_mentions(text):
    assert plain_mentions(text) == []


def test_the_fence_state_spans_lines():
    text = "```\ndocs/scaling.md\n```\nthen docs/latency.md\n"
    assert plain_mentions(text) == [(4, "docs/latency.md")]


def test_brackets_and_backticks_do_not_pair_across_paragraphs():
    text = "a [bracket\n\nthen docs/latency.md](and more) and `one\n\ndocs/tests.md`"
    assert plain_mentions(text) == [(3, "docs/latency.md"), (5, "docs/tests.md")]


def test_a_mention_after_a_link_across_lines_keeps_its_line():
    text = "a [link\nacross](deploy.md) lines\n\nand `one\nspan` then docs/tests.md\n"
    assert plain_mentions(text) == [(5, "docs/tests.md")]
