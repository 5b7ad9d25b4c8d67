"""The alerting page's example rules (docs/alerting.md, issue 37) name only metrics that exist: each
rule's PromQL expression is read for its metric names, and every one must be a family on the
generated metrics reference (docs/reference/metrics.md), a histogram's `_bucket`, `_sum` and
`_count` series counting as their family. A renamed or removed metric fails here, not in a pager."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "alerting.md"
REFERENCE = ROOT / "docs" / "reference" / "metrics.md"

# PromQL words that are not metric names: aggregation operators and their modifiers, set and
# vector-matching keywords (functions are told by the "(" after them)
KEYWORDS = frozenset({"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
                      "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
                      "and", "or", "unless", "bool", "offset", "inf", "nan"})
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def reference_families() -> dict[str, str]:
    """family -> type, from the reference page's table rows."""
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \|", REFERENCE.read_text(), flags=re.M)
    return dict(rows)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers outside strings, label matchers,
    range and subquery brackets, grouping clauses, that are neither a function call nor a keyword."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings ("503|504", "{{ ... }}")
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", text):  # not the unit of `5m` or `1e3`
        word = m.group(0)
        if word.lower() in KEYWORDS or text[m.end():].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def family_of(name: str, families: dict[str, str]) -> str | None:
    """The reference family a series name belongs to (None: none)."""
    if name in families:
        return name
    for suffix in HISTOGRAM_SERIES:
        if name.endswith(suffix) and families.get(name[: -len(suffix)]) == "histogram":
            return name[: -len(suffix)]
    return None


def rules() -> list[dict]:
    yaml = pytest.importorskip("yaml")
    blocks = re.findall(r"^```yaml\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S)
    assert len(blocks) == 1, "the page holds one YAML block: its rule file"
    doc = yaml.safe_load(blocks[0])
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_rule_is_complete():
    found = rules()
    assert len(found) >= 10
    names = [r["alert"] for r in found]
    assert len(names) == len(set(names)), "alert names repeat"
    for rule in found:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert "for" not in rule or re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]


def test_every_metric_a_rule_reads_is_a_family_on_the_reference_page():
    families = reference_families()
    assert len(families) > 30
    unknown = {}
    for rule in rules():
        names = metric_names(str(rule["expr"]))
        assert names, f"{rule['alert']} reads no metric"
        missing = sorted(n for n in names if family_of(n, families) is None)
        if missing:
            unknown[rule["alert"]] = missing
    assert not unknown, f"metrics not on docs/reference/metrics.md: {unknown}"


def test_every_family_the_page_names_in_text_is_on_the_reference_page():
    families = reference_families()
    named = set(re.findall(r"`(namesrv_\w+)[`{]", PAGE.read_text()))  # a name, not a pattern (`namesrv_job_*`)
    assert named and not {n for n in named if family_of(n, families) is None}


@pytest.mark.parametrize("expr, names", [
    ("namesrv_ready == 0", {"namesrv_ready"}),
    ('increase(namesrv_http_requests_total{method=~"PUT|POST", code=~"50[34]"}[10m]) > 0',
     {"namesrv_http_requests_total"}),
    ("max without (partition) (namesrv_consumer_lag_seconds) > 60", {"namesrv_consumer_lag_seconds"}),
    ("(time() - a_b > 300) and on (instance) (c_d > 0)", {"a_b", "c_d"}),
    ("histogram_quantile(0.99, sum by (instance, le) (rate(x_bucket{request_code=\"105\"}[5m]))) > 1", {"x_bucket"}),
    ("y < 0.9 * max_over_time(y[30m:1m] offset 5m)", {"y"}),
])
def test_the_expression_reader_finds_the_metrics(expr, names):
    assert metric_names(expr) == names


def test_a_name_not_on_the_reference_page_is_caught():
    families = reference_families()
    assert family_of("namesrv_job_batch_duration_seconds_bucket", families) == "namesrv_job_batch_duration_seconds"
    assert family_of("namesrv_ready_bucket", families) is None  # a gauge has no buckets
    assert family_of("namesrv_no_such_thing", families) is None
