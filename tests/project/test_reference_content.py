"""What the generated reference pages say (issue 37), beyond being fresh
(test_reference_pages.py): the admin CLI's usage lines name the program once, and the metrics
page lists every family a scrape can show, those computed at scrape time included."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import docgen

ROOT = Path(__file__).resolve().parents[2]


def test_each_usage_line_names_the_program_once():
    usages = [line for line in docgen.admin_page().splitlines() if line.startswith("Usage:")]
    assert len(usages) > 1
    assert all(line.count("namesrv-admin") == 1 for line in usages), [u for u in usages if u.count("namesrv-admin") != 1]
    assert "Usage: namesrv-admin addWritePerm [OPTIONS]" in usages


def _families(page: str) -> dict[str, list[str]]:
    """family -> its row's cells (type, labels, process, help)."""
    rows = {}
    for line in page.splitlines():
        m = re.match(r"\| `(namesrv_\w+)` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split(" | ")]
    return rows


def test_the_families_computed_at_scrape_time_are_listed_with_help_and_labels():
    rows = _families(docgen.metrics_page())
    for name in ("namesrv_snapshot_staleness_seconds", "namesrv_snapshot_age_seconds", "namesrv_snapshot_id",
                 "namesrv_ready", "namesrv_kafka_up", "namesrv_topics", "namesrv_brokers_live"):
        kind, labels, process, help_text = rows[name]
        assert (kind, labels, process) == ("gauge", "", "HTTP server, at scrape time") and help_text, name
    for name in ("namesrv_consumer_lag_records", "namesrv_consumer_lag_seconds"):
        assert rows[name][:3] == ["gauge", "`partition`", "HTTP server, at scrape time"], name
    assert rows["namesrv_remoting_requests_total"][1] == "`request_code`, `response_code`"


def test_every_family_the_operations_guide_names_is_on_the_reference_page():
    """The guides name families in their text (the table of them is the reference page itself)."""
    guide = (ROOT / "docs" / "operations.md").read_text() + (ROOT / "docs" / "alerting.md").read_text()
    named = set(re.findall(r"`(namesrv_\w+?)[`{]", guide))
    rows = _families(docgen.metrics_page())
    assert named and not named - set(rows), sorted(named - set(rows))


def test_the_fronts_cut_loading_prefix_is_the_one_it_uses():
    import remoting.__main__ as front_main
    assert f'prefix="{docgen.FRONT_SNAPSHOT_PREFIX}"' in inspect.getsource(front_main.build_front)
