"""The soak's memory report: its samples kept as JSON, drawn as a PNG, and the flat-memory verdict.

A sample (one dict of `fleet.soak`) holds, among others, `min` (minutes since the fleet started),
`pss_mib` and `rss_mib` (role -> MiB, summed over the role's processes), `log_records` (records
the events topic holds: end minus beginning offsets, summed over partitions) and `log_disk_mib`
(the embedded Apache Kafka's `<data dir>/kafka` on disk; None with Tansu or an external broker).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAT = 0.10  # memory is flat when the end third's median is at most 10 % above the warm reference
WARM_FROM_MIN, WARM_TO_MIN = 10.0, 15.0  # the warm reference of a run of 20 minutes or more
SHORT_RUN_MIN = 20.0

Sample = dict[str, Any]


def total(mem: dict[str, float]) -> float:
    return sum(mem.values())


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def warm_samples(samples: list[Sample], minutes: float) -> tuple[list[Sample], str]:
    """The warm reference and how it was chosen: the samples between minute 10 and minute 15; a
    run shorter than 20 minutes has no such window, so the first sample after a third of the run."""
    if minutes >= SHORT_RUN_MIN:
        window = [s for s in samples if WARM_FROM_MIN <= s["min"] <= WARM_TO_MIN]
        if window:
            return window, f"median of the {len(window)} samples between minute 10 and minute 15"
        later = [s for s in samples if s["min"] >= WARM_FROM_MIN][:1]
        if later:
            return later, f"no sample between minute 10 and 15: the first after minute 10 (minute {later[0]['min']:.1f})"
    first = [s for s in samples if s["min"] >= minutes / 3][:1] or samples[-1:]
    at = first[0]["min"] if first else float("nan")
    return first, (f"run shorter than {SHORT_RUN_MIN:.0f} min: the first sample after a third of the run "
                   f"(minute {at:.1f}) instead of minutes 10-15")


def end_samples(samples: list[Sample], minutes: float) -> list[Sample]:
    """The samples of the run's last third (at least the last sample)."""
    return [s for s in samples if s["min"] >= 2 * minutes / 3] or samples[-1:]


@dataclass
class MemoryVerdict:
    """Per role and in all: the warm reference's and the end third's median PSS (MiB)."""

    reference: str
    rows: list[tuple[str, float, float]] = field(default_factory=list)  # (role or "total", warm, end)

    @staticmethod
    def row_passes(warm: float, end: float) -> bool:
        return end <= warm * (1 + FLAT) if warm > 0 else end <= 0

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(self.row_passes(w, e) for _, w, e in self.rows)

    def lines(self) -> list[str]:
        out = [f"memory, PSS MiB   warm      end   change   (warm: {self.reference}; end: the last third's median)"]
        for role, warm, end in self.rows:
            change = f"{100 * (end - warm) / warm:+7.1f} %" if warm > 0 else "    new"
            mark = "" if self.row_passes(warm, end) else "   <- grew more than 10 %"
            if warm > 0 and end < warm * (1 - FLAT):
                mark = "   (fell)"
            out.append(f"{role:<15} {warm:8.0f} {end:8.0f} {change}{mark}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "passed": self.passed,
                "rows": [{"role": r, "warm_mib": round(w, 1), "end_mib": round(e, 1)} for r, w, e in self.rows]}


def memory_verdict(samples: list[Sample], minutes: float) -> MemoryVerdict:
    """Memory flat within 10 % after the first 10 minutes: for each role and the total, the median
    PSS of the last third against the warm reference's median (`warm_samples`)."""
    warm, reference = warm_samples(samples, minutes)
    end = end_samples(samples, minutes)
    roles = sorted({r for s in samples for r in s["pss_mib"]})
    verdict = MemoryVerdict(reference)
    for role in roles:
        verdict.rows.append((role, median([s["pss_mib"].get(role, 0.0) for s in warm]),
                             median([s["pss_mib"].get(role, 0.0) for s in end])))
    verdict.rows.append(("total", median([total(s["pss_mib"]) for s in warm]),
                         median([total(s["pss_mib"]) for s in end])))
    return verdict


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Write `record` whole or not at all (a run stopped mid-write keeps the previous samples)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def plot(samples: list[Sample], path: Path, *, title: str, minutes: float) -> None:
    """PSS of each role over time plus the total (top), the events topic's size (bottom), as a PNG;
    the warm reference and the end third the verdict compares are shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax_log) = plt.subplots(2, 1, figsize=(8.4, 6.3), dpi=110, sharex=True,
                                     gridspec_kw={"height_ratios": [2.2, 1]})
    xs = [s["min"] for s in samples]
    last = samples[-1]["pss_mib"] if samples else {}
    roles = sorted({r for s in samples for r in s["pss_mib"]}, key=lambda r: -last.get(r, 0.0))
    for role in roles:
        ax.plot(xs, [s["pss_mib"].get(role, 0.0) for s in samples], marker=".", markersize=3, label=role)
    ax.plot(xs, [total(s["pss_mib"]) for s in samples], color="black", linewidth=2, label="total")
    warm, _ = warm_samples(samples, minutes)
    end = end_samples(samples, minutes)
    if warm:
        lo, hi = warm[0]["min"], warm[-1]["min"]
        ax.axvspan(lo - 0.05, hi + 0.05, color="tab:green", alpha=0.12, label="warm reference")
    if end:
        ax.axvspan(end[0]["min"], end[-1]["min"], color="grey", alpha=0.12, label="last third")
    ax.set_ylabel("PSS, MiB (summed per role)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the lines fill the panel
    records = [s.get("log_records") for s in samples]
    ax_log.plot([x for x, r in zip(xs, records, strict=True) if r is not None],
                [r / 1000 for r in records if r is not None], color="tab:blue", label="records held, thousands")
    ax_log.set_ylabel("records, thousands", color="tab:blue")
    ax_log.set_ylim(bottom=0)
    ax_log.grid(True, alpha=0.3)
    disk = [s.get("log_disk_mib") for s in samples]
    handles, labels = ax_log.get_legend_handles_labels()
    if any(d is not None for d in disk):
        ax_disk = ax_log.twinx()
        ax_disk.plot([x for x, d in zip(xs, disk, strict=True) if d is not None], [d for d in disk if d is not None],
                     color="tab:orange", linestyle="--", label="on disk, MiB")
        ax_disk.set_ylabel("on disk, MiB", color="tab:orange")
        ax_disk.set_ylim(bottom=0)
        more_h, more_l = ax_disk.get_legend_handles_labels()
        handles, labels = handles + more_h, labels + more_l
    ax_log.legend(handles, labels, fontsize=7, loc="upper left")
    ax_log.set_title("the events topic (Kafka's log)", fontsize=9)
    ax_log.set_xlabel("minutes since the fleet started")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


EMBEDDED = {"kafka": "the embedded Apache Kafka", "tansu": "the embedded Tansu"}


def benchmark_section(path: Path, image: str) -> tuple[str, list[str]] | None:
    """BENCHMARKS.md's section on the newest soak whose samples are at `path` (None: no soak ran):
    its fleet, the memory verdict per process, the log's size, the checks, and the plot (`image`,
    as the report links it). The soak is its own command (an hour), so the bench shows its last run."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    samples: list[Sample] = record.get("samples") or []
    if not samples:
        return None
    s = record["settings"]
    fleet = (f"{s['brokers']:,} brokers × {s['topics']} topics re-registering every {s['period_s']:g} s"
             if s["topics"] else f"{s['brokers']:,} brokers heartbeating every {s['period_s']:g} s, with churn")
    ran = samples[-1]["min"]
    command = f"./run.sh soak --minutes {s['minutes']:g} --brokers {s['brokers']} --topics {s['topics']} " \
              f"--period {s['period_s']:g} --sample {s['sample_s']:g}"
    lines = [f"`{command}`, started {record['started']}: {fleet} for {ran:.0f} minutes "
             f"(of {s['minutes']:g} asked), straight into the events topic, against what `./run.sh` starts "
             f"({EMBEDDED.get(s['kafka'], 'an external Kafka')}). Memory is PSS: shared pages divided among the "
             "processes that map them.", ""]
    memory = record.get("memory")
    if memory:
        lines += [f"Memory flat within 10 % after the first 10 minutes: warm is the {memory['reference']}; end is "
                  "the last third's median.", "", "| process | warm, MiB | end, MiB | change | flat |",
                  "|---|---|---|---|---|"]
        for row in memory["rows"]:
            role, warm, end = row["role"], row["warm_mib"], row["end_mib"]
            change = f"{100 * (end - warm) / warm:+.1f} %" if warm > 0 else "new"
            lines.append(f"| {role} | {warm:,.0f} | {end:,.0f} | {change} | "
                         f"{'yes' if MemoryVerdict.row_passes(warm, end) else '**no**'} |")
        lines.append("")
    disk = [x["log_disk_mib"] for x in samples if x.get("log_disk_mib") is not None]
    records = [x["log_records"] for x in samples if x.get("log_records") is not None]
    if records:
        lines.append(f"The events topic held at most {max(records):,} records"
                     + (f", {max(disk):,.0f} MiB on disk at most ({disk[-1]:,.0f} MiB at the end)" if disk else "")
                     + "; at the default settings the topic's retention bounds it to 2.1 GiB plus two minutes of "
                       "the fleet's traffic on disk (docs/operations.md, The event log's retention).")
        lines.append("")
    checks = record.get("checks") or {}
    lines += [f"- {'ok' if passed else '**failed**'}: {name}" for name, passed in checks.items()]
    lines += ["", f"![Memory of every process and the log's size during the soak]({image})"]
    return "Soak: memory over time", lines
