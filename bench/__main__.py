"""`./run.sh bench [--quick]`: the benchmark suite; prints a table and writes BENCHMARKS.md.

Everything runs on 127.0.0.1 with bounded loops: the whole system (launcher: Tansu, job, HTTP
server) under a heartbeating fleet for freshness, expiry, idle cost, ingestion and memory; wrk
against the route lookups with 100,000 topics served; the serving side's snapshot refresh over
a warehouse written by the real sink; the state step's cost across a scale sweep; etcd
(Debian's etcd-server) side by side for lease expiry and read throughput; and 10,000 open watch
streams on one HTTP server (their idle cost, a served cut's latency to them).
"""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench import headline, load, page_figures, pure, site_copy, units
from bench.fleet_report import fleet_report
from bench.parts_broker import broker_benchmark
from bench.parts_engines import sources_benchmark, stateapi_benchmark, writers_benchmark
from bench.parts_peers import fleet_benchmark, remoting_benchmark, versus_benchmark
from bench.parts_system import (
    cluster_benchmark,
    ingestion_benchmark,
    memory_benchmark,
    offline_benchmarks,
    scale_benchmark,
    serving_benchmarks,
    system_benchmarks,
)
from bench.parts_watch import watch_benchmark
from bench.report import PARTS, ROOT, SCALING, Report
from conf.version import argument_parser

README = ROOT / "README.md"  # its first screen holds the headline figures (bench/headline.py)


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    ap = argument_parser("./run.sh bench", __doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and shorter runs (under 10 minutes)")
    ap.add_argument("--only", choices=PARTS, action="append",
                    help="run only these parts (repeatable); their rows replace those of the last run in BENCHMARKS.md")
    ap.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument("--versus-sizes", default="", help="fleet sizes of the versus part, e.g. 1000,10000")
    ap.add_argument("--fleet-sizes", default="",
                    help="fleet sizes of the fleet part, e.g. 1000,10000,100000 (100 topics each from 1,001 to "
                         "10,000 brokers, else 10); sizes not given keep the last run's figures")
    ap.add_argument("--render", action="store_true",
                    help="run nothing: write BENCHMARKS.md and the pages' generated blocks again from the last run's figures")
    args = ap.parse_args(args_list)
    # A bench stopped by SIGTERM still leaves through the `with System()` blocks, which stop
    # the launcher it started (killed without them, the launcher kept its children running).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"bench: stopped by signal {signum}"))
    if args.render:
        rep = Report(args.quick)
        rep.load_previous()
        _fleet_from_saved(rep)
        args.output.write_text(_machine_kept(rep.markdown(["--quick"] * args.quick), args.output))
        site_copy.write(args.output, ROOT / "docs")
        newest = max(part["time"] for part in rep.parts.values())
        units.update_doc(SCALING, rep.raw, f"run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(newest))}")
        headline.update(README, rep.raw)
        missing = page_figures.update(ROOT, rep.raw)
        if missing:
            raise SystemExit(f"bench: the pages lack the blocks {', '.join(missing)} (bench/page_figures.py)")
        print(f"wrote {args.output}, the figures of {SCALING.relative_to(ROOT)}, README's and the pages'", flush=True)
        return 0
    for tool, package in (("wrk", "wrk"), ("etcd", "etcd-server"), ("etcdctl", "etcd-client")):
        load.require(tool, package)
    rep = Report(args.quick)
    if args.only:
        rep.load_previous()
        if "fleet" not in args.only:
            _fleet_from_saved(rep)  # its rows and section are kept as the other parts' are
    parts: dict[str, Callable[[Report, bool], None]] = {
        "system": system_benchmarks, "ingestion": ingestion_benchmark, "serving": serving_benchmarks,
        "offline": offline_benchmarks,
        "memory": memory_benchmark, "scale": scale_benchmark, "cluster": cluster_benchmark,
        "stateapi": stateapi_benchmark,
        "sources": sources_benchmark, "writers": writers_benchmark,
        "remoting": remoting_benchmark,
        "versus": partial(versus_benchmark, sizes=tuple(int(x) for x in args.versus_sizes.split(",") if x)),
        "fleet": partial(fleet_benchmark, sizes=tuple(int(x) for x in args.fleet_sizes.split(",") if x)),
        "broker": broker_benchmark, "watch": watch_benchmark}
    chosen = [name for name in parts if not args.only or name in args.only]
    began = time.monotonic()
    for i, name in enumerate(chosen, 1):
        print(f"\n== {name} (part {i} of {len(chosen)}; {time.monotonic() - began:.0f} s so far)", flush=True)
        started = time.monotonic()
        rep.begin(name, pure.host_speed())
        parts[name](rep, args.quick)
        print(f"== {name} done in {time.monotonic() - started:.0f} s", flush=True)
        rep.save()  # what ran so far is kept even if a later part fails (`--render` writes it out)
    args.output.write_text(rep.markdown(args_list if not args.only else ["--quick"] * args.quick))
    site_copy.write(args.output, ROOT / "docs")
    rep.save()
    print(f"\nwrote {args.output}", flush=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(max(part["time"] for part in rep.parts.values())))
    if not units.update_doc(SCALING, rep.raw, f"run of {when}{', --quick' if rep.quick else ''}"):
        raise SystemExit(f"bench: {SCALING} lacks the {units.BEGIN} … {units.END} block")
    if not headline.update(README, rep.raw):
        raise SystemExit(f"bench: {README} lacks the {headline.BEGIN} … {headline.END} block")
    missing = page_figures.update(ROOT, rep.raw)
    if missing:
        raise SystemExit(f"bench: the pages lack the blocks {', '.join(missing)} (bench/page_figures.py)")
    print(f"wrote the figures of {SCALING.relative_to(ROOT)}, README's and the pages'", flush=True)
    return 0


def _machine_kept(markdown: str, output: Path) -> str:
    """--render runs nothing, so the machine the figures were measured on is the one the file
    already names (its "## Machine" section), not the one rendering it."""
    section = re.compile(r"(## Machine\n\n)(.*?)(\n\n)", re.S)
    before = section.search(output.read_text()) if output.exists() else None
    return section.sub(lambda m: m.group(1) + before.group(2) + m.group(3), markdown, count=1) if before else markdown


def _fleet_from_saved(rep: Report) -> None:
    """The fleet part's rows and section from its saved figures (they are built by the part, not
    kept as text): a size saved before a later size failed is reported too."""
    if "fleet" not in rep.parts or not rep.raw.get("fleet", {}).get("ours"):
        return
    saved = rep.raw["fleet"]
    results = {side: {int(n): v for n, v in saved[side].items()} for side in ("ours", "rocketmq")}
    rep.begin("fleet", rep.parts["fleet"].get("host_ms", 0.0))
    rep.parts["fleet"]["time"] = max((v["measured"] for v in results["ours"].values() if "measured" in v),
                                    default=rep.parts["fleet"]["time"])
    fleet_report(rep, results, saved["seconds"])


if __name__ == "__main__":
    sys.exit(main())
