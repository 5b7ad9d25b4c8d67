"""The front processes of one port as one exposition: their metrics files summed (pure, no I/O).

The HTTP server appends one front's exposition per port to its `/metrics` (`schemas.metrics`), and
one exposition cannot hold a family twice. With several front processes on a port
(NAMESRV_REMOTING_PROCESSES, `remoting.processes`) each writes its own file and their supervisor
writes their sum under the port's name: counters and histograms (buckets, counts and sums) add
up, so rates and quantiles over the sum are those of the port; a gauge adds up too (open
connections), except the ones `LOWEST` names, whose sum means nothing: the served cut's id is
the lowest any process serves (-1 while one serves none yet), so an alert on a stale or missing
cut fires when one process lags.

A process that died leaves what it had counted (`retired`): kept in the sum after it is gone, so
a restarted process's counters starting again at zero never make the port's counters go back (a
counter that goes back is read by Prometheus as a reset, and its rate as the whole new total).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

# Gauges whose sum over processes means nothing: the port's value is the lowest process's.
LOWEST = frozenset({"namesrv_remoting_snapshot_id"})
# Families whose values only grow in a process's life: kept from a process that died.
CUMULATIVE = frozenset({"counter", "histogram", "summary"})

SampleKey = tuple[str, tuple[tuple[str, str], ...]]  # (sample name, its labels sorted)


@dataclass
class Family:
    """One metric family: its type and help, and its samples in first-seen order."""

    name: str
    type: str
    documentation: str
    samples: dict[SampleKey, tuple[dict[str, str], float]] = field(default_factory=dict)

    def fold(self, other: Family) -> None:
        for key, (labels, value) in other.samples.items():
            held = self.samples.get(key)
            if held is None:
                self.samples[key] = (labels, value)
            elif self.name in LOWEST:
                self.samples[key] = (held[0], min(held[1], value))
            else:
                self.samples[key] = (held[0], held[1] + value)


Families = dict[str, Family]


def parse(text: str) -> Families:
    """A Prometheus text exposition as families (an unreadable one: nothing)."""
    out: Families = {}
    try:
        for parsed in text_string_to_metric_families(text):
            fam = out.setdefault(parsed.name, Family(parsed.name, parsed.type, parsed.documentation))
            fam.fold(Family(parsed.name, parsed.type, parsed.documentation,
                            {(s.name, tuple(sorted(s.labels.items()))): (dict(s.labels), s.value)
                             for s in parsed.samples}))
    except ValueError:  # a file cut short cannot be: they are renamed whole; but never fail a scrape on one
        return {}
    return out


def total(parts: Iterable[Families]) -> Families:
    """The families of `parts` summed (`LOWEST`: the lowest), in the order they first appear."""
    out: Families = {}
    for part in parts:
        for name, fam in part.items():
            held = out.get(name)
            if held is None:
                held = out[name] = Family(name, fam.type, fam.documentation)
            held.fold(fam)
    return out


def cumulative(families: Families) -> Families:
    """What a process that ended leaves to the sum: its counters and histograms, not its gauges."""
    return {name: fam for name, fam in families.items() if fam.type in CUMULATIVE}


class _Fixed(Collector):
    def __init__(self, families: Families) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for fam in self.families.values():
            metric = Metric(fam.name, fam.documentation, fam.type)
            for (sample_name, _), (labels, value) in fam.samples.items():
                metric.add_sample(sample_name, labels, value)
            yield metric


def render(families: Families) -> bytes:
    """The families in Prometheus' text format, as `generate_latest` writes a registry's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)


def summed(texts: Iterable[str], retired: Families | None = None) -> bytes:
    """The expositions `texts` of a port's live processes, and what its ended ones left, as one."""
    return render(total([*([retired] if retired else []), *(parse(t) for t in texts)]))
