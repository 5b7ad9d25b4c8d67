"""`namesrv-admin` (also `./run.sh admin`): mqadmin's NameServer commands over our HTTP API, and
what mqadmin cannot do: any read as of a past instant, the change log, the diff between two
instants, the list of cuts.

Commands keep mqadmin's names and short options (-t topic, -c cluster, -b broker, -s namespace,
-k key, -v value). Reads print a table (or `-o json`); writes need the admin token, read from
NAMESRV_ADMIN_TOKEN or the data directory's `admin-token` file, as the server reads it.

Exit codes: 0 done; 1 the NameServer refused or found nothing (its remark is printed); 2 bad
usage; 3 the NameServer cannot be reached or failed; 4 no or wrong admin token.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import requests

from admin import kv_import, render
from admin.client import REFUSED, UNAUTHORIZED, UNREACHABLE, USAGE, AdminError, ApiClient, seg
from conf import ConfigError, load_config
from conf.tokens import admin_token

AS_OF_HELP = "read the topology as it was at this instant (ISO-8601, naive = UTC, or epoch ms)"


class Ctx:
    def __init__(self, client: ApiClient, output: str) -> None:
        self.client, self.output = client, output

    def show(self, value: Any, text: Callable[[Any], str]) -> None:
        click.echo(render.as_json(value) if self.output == "json" else text(value))


pass_ctx = click.make_pass_decorator(Ctx)


@click.group(help=__doc__, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--url", default=None, metavar="URL",
              help="the NameServer's HTTP API (default: http://NAMESRV_HTTP_HOST:NAMESRV_HTTP_PORT)")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--timeout", type=click.FloatRange(min=0.1), default=40.0, show_default=True,
              help="seconds to wait for an answer (writes wait until they are served)")
@click.pass_context
def cli(ctx: click.Context, url: str | None, output: str, timeout: float) -> None:
    try:
        cfg = load_config()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    base = url or f"http://{cfg.http_host}:{cfg.http_port}"
    ctx.obj = Ctx(ApiClient(base, admin_token(cfg), timeout_s=timeout), output)


# ---------------------------------------------------------------- reads


@cli.command("clusterList", help="Clusters, their broker groups and members, with time since the last heartbeat.")
@click.option("-c", "--cluster", default=None, help="only this cluster")
@click.option("--as-of", default=None, help=AS_OF_HELP)
@pass_ctx
def cluster_list(c: Ctx, cluster: str | None, as_of: str | None) -> None:
    info = c.client.get("/cluster", asOf=as_of)
    live = c.client.get("/brokers/live", asOf=as_of)
    if cluster is not None and cluster not in info["clusterAddrTable"]:
        raise AdminError(f"no cluster {cluster!r} (known: {', '.join(sorted(info['clusterAddrTable'])) or 'none'})", 1)
    beats = {(r["clusterName"], r["brokerAddr"]): r for r in live}
    rows = []
    for name in sorted(info["clusterAddrTable"]):
        if cluster is not None and name != cluster:
            continue
        for broker in info["clusterAddrTable"][name]:
            data = info["brokerAddrTable"].get(broker, {})
            for bid, addr in sorted(data.get("brokerAddrs", {}).items(), key=lambda kv: int(kv[0])):
                beat = beats.get((name, addr))
                rows.append([name, broker, bid, addr, "-" if beat is None else beat["lastUpdateTimestamp"],
                             "-" if beat is None else beat["heartbeatTimeoutMillis"]])
    now = int(time.time() * 1000)
    c.show({"clusters": info, "live": live} if c.output == "json" else rows, lambda rs: render.table(
        ["cluster", "brokerName", "brokerId", "address", "last heartbeat", "timeout ms"],
        [r[:4] + [render.ago(r[4], now) if r[4] != "-" else "- (not live)", r[5]] for r in rs]))


@cli.command("topicRoute", help="A topic's route: queue data and brokers (as of now, or --as-of).")
@click.option("-t", "--topic", required=True)
@click.option("--zone", default=None, help="the client's zone (RocketMQ's zone-aware routes)")
@click.option("--as-of", default=None, help=AS_OF_HELP)
@pass_ctx
def topic_route(c: Ctx, topic: str, zone: str | None, as_of: str | None) -> None:
    route = c.client.get(f"/topics/{seg(topic)}/route", zone=zone, asOf=as_of)
    c.show(route, _route_text)


def _route_text(r: dict[str, Any]) -> str:
    """A TopicRouteData as two tables: its queues and its brokers' addresses."""
    queues = render.table(["brokerName", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag"],
                          [[q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"],
                            q.get("topicSysFlag", 0)] for q in r.get("queueDatas", [])])
    brokers = render.table(["cluster", "brokerName", "brokerId", "address"],
                           [[b["cluster"], b["brokerName"], bid, addr] for b in r.get("brokerDatas", [])
                            for bid, addr in sorted(b["brokerAddrs"].items(), key=lambda kv: int(kv[0]))])
    return f"{queues}\n\n{brokers}"


@cli.command("topicList", help="All topics, or one cluster's (as of now, or --as-of).")
@click.option("-c", "--cluster", default=None)
@click.option("--as-of", default=None, help=AS_OF_HELP)
@pass_ctx
def topic_list(c: Ctx, cluster: str | None, as_of: str | None) -> None:
    path = "/topics" if cluster is None else f"/clusters/{seg(cluster)}/topics"
    body = c.client.get(path, asOf=as_of)
    c.show(body, lambda b: "\n".join(b["topicList"]))


@cli.command("brokerStatus", help="A broker group as the NameServer knows it: members, liveness, data version, "
                                  "topics it hosts.")
@click.option("-b", "--broker", "broker_name", required=True, help="broker name (the group)")
@click.option("--as-of", default=None, help=AS_OF_HELP)
@pass_ctx
def broker_status(c: Ctx, broker_name: str, as_of: str | None) -> None:
    info = c.client.get("/cluster", asOf=as_of)
    data = info["brokerAddrTable"].get(broker_name)
    if data is None:
        raise AdminError(f"no broker group {broker_name!r} is registered"
                         + (f" as of {as_of}" if as_of else ""), 1)
    live = [r for r in c.client.get("/brokers/live", asOf=as_of) if r["brokerName"] == broker_name]
    hosted = _hosted_topics(c, broker_name, data["cluster"], as_of)
    status = {"brokerData": data, "live": live, "topics": hosted}
    now = int(time.time() * 1000)

    def text(s: dict[str, Any]) -> str:
        beats = {r["brokerAddr"]: r for r in s["live"]}
        rows = []
        for bid, addr in sorted(s["brokerData"]["brokerAddrs"].items(), key=lambda kv: int(kv[0])):
            b = beats.get(addr)
            rows.append([bid, addr, "master" if bid == "0" else "slave",
                         "- (not live)" if b is None else render.ago(b["lastUpdateTimestamp"], now),
                         "-" if b is None else b["dataVersion"]])
        head = f"{broker_name} in cluster {s['brokerData']['cluster']}, {len(s['topics'])} topic(s)"
        return head + "\n" + render.table(["brokerId", "address", "role", "last heartbeat", "dataVersion"], rows)
    c.show(status, text)


def _hosted_topics(c: Ctx, broker_name: str, cluster: str, as_of: str | None) -> list[str]:
    """Topics whose route names this broker (one route lookup per topic of its cluster)."""
    try:
        names = c.client.get(f"/clusters/{seg(cluster)}/topics", asOf=as_of)["topicList"]
    except AdminError:  # topic lists switched off (enableTopicList=false): no topic list to show
        return []
    return [t for t in names
            if any(q["brokerName"] == broker_name
                   for q in c.client.get(f"/topics/{seg(t)}/route", asOf=as_of).get("queueDatas", []))]


@cli.command("getKvConfig", help="A KV value, or every key of a namespace when -k is left out.")
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", default=None)
@click.option("--as-of", default=None, help=AS_OF_HELP)
@pass_ctx
def get_kv(c: Ctx, namespace: str, key: str | None, as_of: str | None) -> None:
    if key is None:
        body = c.client.get(f"/kv/{seg(namespace)}", asOf=as_of)
        c.show(body, lambda b: render.table(["key", "value"], sorted((b.get("table") or b).items())))
    else:
        body = c.client.get(f"/kv/{seg(namespace)}/{seg(key)}", asOf=as_of)
        c.show(body, lambda b: str(b.get("value")))


@cli.command("getNamesrvConfig", help="The NameServer's runtime switches and read-only settings.")
@click.option("--as-of", default=None, help=AS_OF_HELP)
@pass_ctx
def get_config(c: Ctx, as_of: str | None) -> None:
    body = c.client.get("/config", asOf=as_of)
    c.show(body, lambda b: render.table(["key", "value", "kind"],
                                        [[k, v, "switch"] for k, v in sorted(b["config"].items())]
                                        + [[k, v, "read-only"] for k, v in sorted(b["readOnly"].items())]))


# ---------------------------------------------------------------- writes


def _written(c: Ctx, body: Any, summary: Callable[[Any], str]) -> None:
    if isinstance(body, dict) and body.get("code") == "ACCEPTED":
        click.echo("accepted but not yet served (the streaming job is behind); it will apply it", err=True)
    c.show(body, summary)


@cli.command("updateKvConfig", help="Put a KV value (waits until it is served).")
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
@pass_ctx
def update_kv(c: Ctx, namespace: str, key: str, value: str) -> None:
    body = c.client.write("PUT", f"/kv/{seg(namespace)}/{seg(key)}", body={"value": value})
    _written(c, body, lambda b: f"{namespace}/{key} = {value}")


@cli.command("deleteKvConfig", help="Delete a KV value (waits until it is served).")
@click.option("-s", "--namespace", required=True)
@click.option("-k", "--key", required=True)
@pass_ctx
def delete_kv(c: Ctx, namespace: str, key: str) -> None:
    body = c.client.write("DELETE", f"/kv/{seg(namespace)}/{seg(key)}")
    _written(c, body, lambda b: f"{namespace}/{key} deleted")


@cli.command("importKvConfig", short_help="Import a RocketMQ NameServer's kvConfig.json (its KV config).",
             help="Import a RocketMQ NameServer's KV config file (its kvConfig.json, by default "
                  "~/namesrv/kvConfig.json): every entry is checked before any is written; keys already holding "
                  "the file's value are left alone, keys not in the file are kept; waits until every entry is "
                  "served and reads each back.")
@click.option("-f", "--file", "path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='the file: {"configTable": {"<namespace>": {"<key>": "<value>"}}}')
@click.option("--dry-run", is_flag=True, help="check the file and show what would change; write nothing")
@pass_ctx
def import_kv_config(c: Ctx, path: Path, dry_run: bool) -> None:
    try:
        table = kv_import.read_kv_config(path.read_text(encoding="utf-8"))
    except (kv_import.KvFileError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="-f/--file") from None
    plan = []  # [namespace, key, value, action]
    for namespace, entries in sorted(table.items()):
        current = _namespace_or_empty(c, namespace)
        for key, value in sorted(entries.items()):
            action = "new" if key not in current else "unchanged" if current[key] == value else "changed"
            plan.append([namespace, key, value, action])
    writes = [row for row in plan if row[3] != "unchanged"]
    if not dry_run:
        _put_all(c, writes)
        served = {ns: _namespace_or_empty(c, ns) for ns in {row[0] for row in writes}}
        wrong = [f"{ns}/{key}" for ns, key, value, _ in writes if served[ns].get(key) != value]
        if wrong:
            raise AdminError(f"written, but {len(wrong)} entr{'y' if len(wrong) == 1 else 'ies'} read back with "
                             f"another value (changed by another writer meanwhile?): {', '.join(wrong[:10])}", 1)
    empty = sorted(ns for ns, entries in table.items() if not entries)
    summary = {"file": str(path), "dryRun": dry_run, "written": 0 if dry_run else len(writes),
               "unchanged": len(plan) - len(writes), "emptyNamespaces": empty,
               "entries": [{"namespace": r[0], "key": r[1], "value": r[2], "action": r[3]} for r in plan]}

    def text(s: dict[str, Any]) -> str:
        head = (f"{'would write' if dry_run else 'wrote'} {len(writes)} of {len(plan)} entr"
                f"{'y' if len(plan) == 1 else 'ies'} from {path} ({s['unchanged']} unchanged)"
                + ("" if dry_run else "; every one read back as served"))
        if empty:
            head += f"\nempty in the file, nothing to import: namespace(s) {', '.join(empty)}"
        return head + "\n" + render.table(["namespace", "key", "value", "action"], plan)
    c.show(summary, text)


def _namespace_or_empty(c: Ctx, namespace: str) -> dict[str, str]:
    """A namespace's served keys and values ({} when the NameServer has no such namespace)."""
    try:
        return dict(c.client.get(f"/kv/{seg(namespace)}")["table"])
    except AdminError as exc:
        if "QUERY_NOT_FOUND" in str(exc):
            return {}
        raise


def _put_all(c: Ctx, writes: list[list[str]]) -> None:
    """Every write published without waiting, but each namespace's last, which waits until it is
    served: a namespace's events share one Kafka key, so they are applied in order and that last
    one is served only after all of its namespace's before it."""
    last = {row[0]: i for i, row in enumerate(writes)}
    for i, (namespace, key, value, _) in enumerate(writes):
        c.client.write("PUT", f"/kv/{seg(namespace)}/{seg(key)}", body={"value": value},
                       wait=None if last[namespace] == i else "false")


@cli.command("wipeWritePerm", help="Take write permission away from a broker's topics (RocketMQ's 205).")
@click.option("-b", "--broker", "broker_name", required=True)
@pass_ctx
def wipe_write_perm(c: Ctx, broker_name: str) -> None:
    _write_perm(c, broker_name, "wipe")


def _write_perm(c: Ctx, broker_name: str, action: str) -> None:
    """205 / 327: the answer counts the broker's topics whose permission changed."""
    body = c.client.write("POST", f"/brokers/{seg(broker_name)}/{action}-write-perm")
    _written(c, body, lambda b: f"{action} write perm of {broker_name}: {b.get(action + 'TopicCount', '?')} topic(s)")


@cli.command("addWritePerm", help="Give write permission back to a broker's topics (RocketMQ's 327).")
@click.option("-b", "--broker", "broker_name", required=True)
@pass_ctx
def add_write_perm(c: Ctx, broker_name: str) -> None:
    _write_perm(c, broker_name, "add")


@cli.command("deleteTopic", help="Delete a topic's route (everywhere, or in one cluster).")
@click.option("-t", "--topic", required=True)
@click.option("-c", "--cluster", default=None)
@pass_ctx
def delete_topic(c: Ctx, topic: str, cluster: str | None) -> None:
    body = c.client.write("DELETE", f"/topics/{seg(topic)}", cluster=cluster)
    _written(c, body, lambda b: f"deleted {topic} from {', '.join(b.get('brokerNames', [])) or 'no broker'}")


@cli.command("updateNamesrvConfig", help="Set a runtime switch (orderMessageEnable, enableTopicList, ...).")
@click.option("-k", "--key", required=True)
@click.option("-v", "--value", required=True)
@pass_ctx
def update_config(c: Ctx, key: str, value: str) -> None:
    if value.lower() not in ("true", "false"):
        raise click.BadParameter(f"{value!r}: the switches take true or false", param_hint="-v/--value")
    body = c.client.write("PUT", "/config", body={key: value.lower() == "true"})
    _written(c, body, lambda b: f"{key} = {b.get('config', {}).get(key, value)}")


# ---------------------------------------------------------------- history (what mqadmin cannot do)


@cli.command("snapshots", help="The consistent cuts, newest first: id, commit time, events read.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@pass_ctx
def snapshots(c: Ctx, limit: int) -> None:
    body = c.client.get("/history/snapshots", limit=limit)
    c.show(body, lambda b: render.table(["snapshotId", "committed (UTC)", "events"],
                                        [[s["snapshotId"], render.instant(s["commitTime"]), s["eventCount"]]
                                         for s in b["snapshots"]]) + f"\n({b['total']} in all)")


@cli.command("changes", help="The change log: every route, liveness and KV change, oldest first.")
@click.option("--since", default=None, help="from this instant (ISO-8601 or epoch ms)")
@click.option("--until", default=None, help="up to this instant")
@click.option("-t", "--topic", default=None)
@click.option("-b", "--broker", "broker_name", default=None, help="broker name")
@click.option("-c", "--cluster", default=None)
@click.option("--kind", default=None, help="BROKER_REGISTERED, BROKER_EXPIRED, QUEUE_ADDED, KV_PUT, ...")
@click.option("--limit", type=click.IntRange(1, 1000), default=200, show_default=True)
@pass_ctx
def changes(c: Ctx, since: str | None, until: str | None, topic: str | None, broker_name: str | None,
            cluster: str | None, kind: str | None, limit: int) -> None:
    body = c.client.get("/history/changes", since=since, until=until, topic=topic, brokerName=broker_name,
                        cluster=cluster, kind=kind, limit=limit)

    def text(b: dict[str, Any]) -> str:
        rows = [[render.instant(x["time"]), x["snapshotId"], x["kind"], x.get("clusterName") or "",
                 x.get("brokerName") or x.get("namespace") or "", x.get("brokerAddr") or x.get("key") or "",
                 x.get("topic") or ""] for x in b["changes"]]
        more = f"\n({b['total']} matching; showing {len(rows)})" if b["total"] > len(rows) else ""
        return render.table(["time (UTC)", "snapshot", "kind", "cluster", "broker/namespace", "address/key", "topic"],
                            rows) + more
    c.show(body, text)


@cli.command("diff", help="What changed in the topology between two instants.")
@click.option("--from", "from_", required=True, help="the earlier instant")
@click.option("--to", required=True, help="the later instant")
@pass_ctx
def diff(c: Ctx, from_: str, to: str) -> None:
    body = c.client.get("/history/diff", **{"from": from_, "to": to})

    def text(d: dict[str, Any]) -> str:
        lines = [f"from snapshot {d['from']['snapshotId']} ({render.instant(d['from']['commitTime'])}) "
                 f"to snapshot {d['to']['snapshotId']} ({render.instant(d['to']['commitTime'])})"]
        for section in ("topics", "brokers", "clusters", "kv", "config"):
            for what, sign in (("added", "+"), ("removed", "-"), ("changed", "~")):
                for name in d[section][what]:
                    lines.append(f"{sign} {section[:-1] if section not in ('kv', 'config') else section} {name}")
        if len(lines) == 1:
            lines.append("no change")
        return "\n".join(lines)
    c.show(body, text)


# ---------------------------------------------------------------- watch (what mqadmin cannot do)


@cli.command("watch", short_help="Follow a topic's route or the cluster info: each change as it is served.",
             help="Follow a topic's route (-t) or the cluster info (--cluster): the answer now, then again each "
                  "time a served cut changes it (the server's Server-Sent Events, GET /topics/<t>/route/watch or "
                  "/cluster/watch). Every event names its cut; --last-event-id N first prints what changed after "
                  "cut N (from the history). A dropped connection (a server restart) is resumed after the last "
                  "cut printed, for up to --timeout seconds. -o json prints one JSON object a line. Ctrl-C stops.")
@click.option("-t", "--topic", default=None, help="the topic whose route to follow")
@click.option("--cluster", "cluster_info", is_flag=True, help="follow the cluster info instead")
@click.option("--last-event-id", type=click.IntRange(min=0), default=None, metavar="CUT",
              help="resume after this cut (an event's id): print the changes since it first")
@click.option("--max-events", type=click.IntRange(min=1), default=None, metavar="N", help="stop after N events")
@pass_ctx
def watch(c: Ctx, topic: str | None, cluster_info: bool, last_event_id: int | None, max_events: int | None) -> None:
    if (topic is None) == (not cluster_info):
        raise click.UsageError("give either -t/--topic or --cluster")
    path = "/cluster/watch" if cluster_info else f"/topics/{seg(topic or '')}/route/watch"
    printed = 0
    try:
        for event in _follow(c.client, path, last_event_id):
            click.echo(json.dumps(event["data"], sort_keys=True, separators=(",", ":")) if c.output == "json"
                       else _event_text(event))
            printed += 1
            if max_events is not None and printed >= max_events:
                return
    except KeyboardInterrupt:
        return


def _follow(client: ApiClient, path: str, last_id: int | None) -> Iterator[dict[str, Any]]:
    """The stream's events, its connection opened again after the last event's cut when it drops,
    until it has stayed down for the client's timeout (AdminError, exit 3)."""
    down_since: float | None = None
    while True:
        try:
            with _open_stream(client, path, last_id) as response:
                down_since = None
                for event in sse_events(_stream_lines(response), ids_only=True):
                    if event.get("id"):
                        last_id = int(event["id"])
                    if event["data"] is not None:  # an id alone: where the server ended the stream
                        yield {**event, "data": json.loads(event["data"])}
        except AdminError as exc:
            if exc.exit_code != UNREACHABLE or last_id is None:
                raise
            if down_since is not None and time.monotonic() - down_since > client.timeout_s:
                raise
        if down_since is None:
            down_since = time.monotonic()
            click.echo(f"namesrv-admin: the stream ended; resuming after cut {last_id}", err=True)
        time.sleep(1.0)


def _open_stream(client: ApiClient, path: str, last_id: int | None) -> requests.Response:
    """A watch stream's response; errors as the other commands raise them (the server's remark,
    exit 1 for a refusal, 3 when it cannot be reached or is unavailable)."""
    headers = {"Accept": "text/event-stream"} | ({} if last_id is None else {"Last-Event-ID": str(last_id)})
    try:
        r = client.http.get(client.url + path, headers=headers, stream=True, timeout=client.timeout_s)
    except requests.RequestException as exc:
        raise AdminError(f"cannot reach the NameServer's HTTP API at {client.url}: {type(exc).__name__} "
                         "(is it running? './run.sh' starts it; --url names another)", UNREACHABLE) from None
    if r.status_code >= 400:
        with r:
            try:
                payload = r.json()
            except ValueError:
                payload = {"remark": r.text[:200]}
        message = f"{r.status_code} {payload.get('code', '')}: {payload.get('remark', '')}".strip()
        raise AdminError(message, UNAUTHORIZED if r.status_code == 401 else
                         UNREACHABLE if r.status_code >= 500 else REFUSED)
    return r


def _stream_lines(response: requests.Response) -> Iterator[str]:
    """A stream's lines as they arrive (chunk_size None), split at CR/LF only (bytes' splitlines:
    str's would split at U+2028, which a name may hold); AdminError (exit 3) when it breaks off."""
    try:
        for line in response.iter_lines(chunk_size=None):  # type: ignore[call-overload]  # None: as they arrive
            yield line.decode("utf-8", "replace")
    except requests.RequestException:  # dropped mid-stream (or silent past the timeout: keep-alives stopped)
        raise AdminError("the watch stream broke off", UNREACHABLE) from None


def sse_events(lines: Iterable[str], *, ids_only: bool = False) -> Iterator[dict[str, Any]]:
    """Server-Sent Events from a stream's lines, as the HTML standard parses them: `field: value`
    lines up to a blank line make an event (data lines joined by newlines), comments (`:`) and
    events without data are skipped. `ids_only`: a message with an id and no data is yielded too,
    with `data` None: it dispatches no event, but it moves a browser's last event id, which is how
    the server says where a stream it ends left off (serving.watch)."""
    event: dict[str, str] = {}
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield {"event": event.get("event", "message"), "id": event.get("id", ""), "data": "\n".join(data)}
            elif ids_only and event.get("id"):
                yield {"event": "", "id": event["id"], "data": None}
            event, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name in ("event", "id"):
            event[name] = value


def _event_text(event: dict[str, Any]) -> str:
    """An event for people: its cut and time, then the answer's tables."""
    d = event["data"]
    head = f"cut {d['snapshotId']} ({render.instant(d['commitTime'])})"
    if "cluster" in d:
        info = d["cluster"]
        rows = [[name, broker, bid, addr] for name in sorted(info["clusterAddrTable"])
                for broker in info["clusterAddrTable"][name]
                for bid, addr in sorted(info["brokerAddrTable"].get(broker, {}).get("brokerAddrs", {}).items(),
                                        key=lambda kv: int(kv[0]))]
        return f"{head}: cluster info\n" + render.table(["cluster", "brokerName", "brokerId", "address"], rows) + "\n"
    if d["route"] is None:
        return f"{head}: {d['topic']} has no route (TOPIC_NOT_EXIST)\n"
    return f"{head}: {d['topic']}\n{_route_text(d['route'])}\n"


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="namesrv-admin", standalone_mode=False)
    except AdminError as exc:
        click.echo(f"namesrv-admin: {exc}", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
