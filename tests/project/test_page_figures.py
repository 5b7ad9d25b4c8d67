"""Figures in pages come from the bench, never copied by hand (issue 37). The pages' generated
blocks are what rendering bench/last-run.json gives now, and outside them (and outside dated
records) no page states a figure with a performance unit that BENCHMARKS.md does not hold:
bench/page_figures.py has the rule, its settings and why."""

from __future__ import annotations

import json
import re

import pytest

from bench import headline, page_figures, units
from bench.report import LAST_RUN, ROOT

# Pages this change could not touch (other work holds them), each with what it still needs; the
# test fails once a page is clean, so that its entry goes.
NOT_YET = {
    "docs/latency.md": "its before/after tables are dated records under headings the rule does not know "
                       "(\"What the first timelines showed\"): a History heading, or links to BENCHMARKS.md",
    "docs/deploy.md": "\"Faults, end to end\" and the HDFS checks quote a dated `./run.sh multihost` run, not the "
                      "bench: a History heading or the multihost run's own generated block",
    "docs/architecture.md": "quotes decision record 4's idle CPU (6.2 against 2.4 %) as prose: a link instead",
    "docs/reliability.md": "the standby's memory (about 600 MiB) typed by hand: BENCHMARKS.md's takeover row "
                           "has it (both jobs' RSS), a link instead",
}


def _raw() -> dict:
    return json.loads(LAST_RUN.read_text())["raw"]


def _between(text: str, begin: str, end: str) -> str:
    found = re.search(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.S)
    assert found, f"the {begin} ... {end} block is missing"
    return found.group(1)


@pytest.mark.parametrize("name", sorted(page_figures.BLOCKS))
def test_each_generated_block_is_what_the_last_run_renders(name):
    page, _ = page_figures.BLOCKS[name]
    begin, end = page_figures.markers(name)
    assert _between((ROOT / page).read_text(), begin, end) == _between(page_figures.block(name, _raw()), begin, end), \
        f"{page}'s block {name} differs from bench/last-run.json: run .venv/bin/python -m bench --render"


def test_every_block_in_a_page_is_one_the_bench_writes():
    written = {*page_figures.BLOCKS, headline.BEGIN[len("<!-- bench:"):-len(" -->")],
               units.BEGIN[len("<!-- bench:"):-len(" -->")]}
    for page in page_figures.pages(ROOT):
        for name in re.findall(r"^<!-- bench:([\w-]+) -->", page.read_text(), re.M):  # a marker starts its line
            assert name in written, f"{page.name}: a block {name} the bench does not write"


def test_no_page_quotes_a_figure_benchmarks_md_does_not_hold():
    unheld = [f for f in page_figures.scan(ROOT) if f.page not in NOT_YET]
    assert not unheld, "figures not in BENCHMARKS.md (generate them, link the section, or mark a dated record):\n" \
        + "\n".join(f"  {f.page}:{f.line}: {f.text!r} ({', '.join(f.missing)} not held)" for f in unheld)


@pytest.mark.parametrize("page", sorted(NOT_YET))
def test_the_pages_left_for_later_still_need_it(page):
    assert any(f.page == page for f in page_figures.scan(ROOT)), f"{page} is clean now: remove it from NOT_YET"


def test_every_dated_record_shows_its_date():
    for page in page_figures.pages(ROOT):
        for heading, first in page_figures.history_sections(page.read_text()):
            assert re.search(r"\b20\d\d-\d\d-\d\d\b", heading + "\n" + first), \
                f"{page.name}: the section {heading!r} is left out as history but shows no date"


# The rule itself, on made-up pages: what fails and what does not.

BENCH = """# Benchmarks

| metric | measured |
|---|---|
| CPU vs RocketMQ's | 11.8 vs 6.5 % of a core (1.81×) |

| brokers | | ours | RocketMQ |
|---|---|---|---|
| 1,000 | PSS summed, MiB | 1742 | 203 |
"""


def _unheld(text: str, page: str = "docs/x.md") -> list[str]:
    return [f.text for f in page_figures.unheld(page, text, page_figures.held_figures(BENCH))]


def test_a_figure_the_run_holds_passes_and_one_it_does_not_fails():
    assert _unheld("All of it: 11.8 % of a core, 1.81× RocketMQ's, 1742 MiB PSS.") == []
    assert _unheld("All of it: 11.7 % of a core.") == ["11.7 % of a core"]
    assert _unheld("It took 11.8 s.") == ["11.8 s"], "a number held as a CPU share is not a duration"
    assert _unheld("From 25.5 to 11.8 % of a core.") == ["25.5 to 11.8 % of a core"]


def test_code_blocks_settings_history_and_products_are_not_figures():
    text = """Set `NAMESRV_X=2.5 s`; a broker times out after 120 s; 4 × the cores; 100,000 × 10.

```
./run.sh bench   # 9.9 minutes
```

<!-- bench:sizing-fleets -->
3.3 % of a core
<!-- /bench:sizing-fleets -->

## History: what a change gave (2026-11-20)

From 70 % to 9.9 % of a core.

### Still history

77 ms.

## Today

9.9 ms.
"""
    assert _unheld(text) == ["9.9 ms"]


def test_a_pages_own_settings_hold_only_there():
    assert _unheld("A 10-topic registration is about 1.5 KB.", "docs/operations.md") == []
    assert _unheld("A 10-topic registration is about 1.5 KB.") == ["1.5 KB"]


def test_a_page_generated_whole_by_another_command_is_its_own():
    assert _unheld("# C\n\n<!-- generated by the tests -->\n\nRan in 4.6 minutes.\n") == []
