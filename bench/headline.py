"""README's first-screen figures: what the system costs and how fast it answers next to RocketMQ's
NameServer, rendered from the last bench run's raw figures (bench/last-run.json) into a marked
block, so a re-run rewrites them and no page carries a number the bench did not measure
(tests/project/test_bench_figures.py renders the block again and compares)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import units

BEGIN, END = "<!-- bench:headline -->", "<!-- /bench:headline -->"
JAVA = "RocketMQ NameServer (Java 5.3.3)"


def lines(raw: dict[str, Any]) -> list[str]:
    """The block's bullets; a part the run did not measure leaves its bullet out."""
    out: list[str] = []
    fleet = raw.get("fleet", {})
    ours, theirs = fleet.get("ours", {}).get("1000"), fleet.get("rocketmq", {}).get("1000")
    if ours and theirs:
        def ratio(phase: str) -> str:
            return (f"{ours[phase]['cpu_pct']:.1f} against {theirs[phase]['cpu_pct']:.1f} % of a core, "
                    f"{ours[phase]['cpu_pct'] / theirs[phase]['cpu_pct']:.2f}×")
        out.append(f"- **Cost**, all of `./run.sh` (embedded Kafka included) against RocketMQ 5.3.3's NameServer as "
                   f"shipped, 1,000 brokers with default settings: re-registering every 30 s {ratio('register')}; "
                   f"also asking for the cluster info every 5 s, as 5.x brokers do, {ratio('register+106')}; "
                   f"memory {ours['register']['pss_mib'] / 1024:.1f} GiB against "
                   f"{theirs['register']['pss_mib']:.0f} MiB (PSS).")
        out.append(f"- **First registrations** of those 1,000 brokers served in {ours['registered_s']:.1f} s "
                   f"(RocketMQ {theirs['registered_s']:.1f} s); a change reaches the routes asynchronously, "
                   "within about a second.")
    remoting = raw.get("remoting", {})
    mine, java = remoting.get("ours"), remoting.get(JAVA, {}).get("saturated")
    if mine and java:
        out.append(f"- **Route lookups** over RocketMQ's protocol, 64 connections: {mine['rps']:,.0f} a second "
                   f"against {java['rps']:,.0f} ({mine['rps'] / java['rps']:.2f}×), p99 {mine['p99_us'] / 1000:.1f} "
                   f"against {java['p99_us'] / 1000:.1f} ms.")
    if out:
        out.append("- Every figure, its target and where it was not reached: [BENCHMARKS.md](BENCHMARKS.md).")
    return out


def block(raw: dict[str, Any]) -> str:
    return "\n".join([BEGIN, *lines(raw), END])


def update(doc: Path, raw: dict[str, Any]) -> bool:
    """Replace the doc's headline block; False when the markers are missing."""
    return units.replace_block(doc, BEGIN, END, block(raw))
