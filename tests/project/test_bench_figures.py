"""Pages quote the bench's figures only through blocks the bench writes (README's headline,
docs/scaling.md's per-unit costs here; sizing's and the scan of every page in
test_page_figures.py), and each block is what the last run's figures (bench/last-run.json)
render today: a re-run that moves a figure, or a hand edit, shows here."""

from __future__ import annotations

from bench import headline, units
from bench.report import ROOT
from tests.project.figures import between, last_raw


def test_readmes_headline_is_the_last_runs():
    readme = (ROOT / "README.md").read_text()
    assert between(readme, headline.BEGIN, headline.END) == between(headline.block(last_raw()), headline.BEGIN,
                                                                       headline.END)
    # on the first screen: within the first 40 lines
    assert readme.index(headline.BEGIN) < len("\n".join(readme.splitlines()[:40]))


def test_the_headline_says_cost_speed_and_where_the_numbers_are():
    text = "\n".join(headline.lines(last_raw()))
    for said in ("**Cost**", "**Route lookups**", "RocketMQ", "[BENCHMARKS.md](BENCHMARKS.md)"):
        assert said in text


def test_scalings_per_unit_block_is_the_last_runs():
    block = between((ROOT / "docs" / "scaling.md").read_text(), units.BEGIN, units.END)
    for line in [*units.table(last_raw()), *units.arithmetic(last_raw())]:
        assert line in block, f"docs/scaling.md's generated block lacks {line!r}: run ./run.sh bench --render"


def test_the_sites_benchmarks_page_is_benchmarks_md():
    from bench.site_copy import site_copy
    assert (ROOT / "docs" / "benchmarks.md").read_text() == site_copy((ROOT / "BENCHMARKS.md").read_text()), \
        "docs/benchmarks.md differs from BENCHMARKS.md: run ./run.sh bench --render"


def test_the_site_copy_links_pages_and_keeps_code_and_paths():
    from bench.site_copy import site_copy
    text = site_copy("# B\nsee docs/scaling.md, `docs/latency.md` and ![p](docs/x.png) and bench/docs/y.md\n")
    assert "[scaling](scaling.md)" in text and "`docs/latency.md`" in text and "![p](x.png)" in text
    assert "bench/docs/y.md" in text and text.startswith("# B\n\n_The site's copy")
