"""The whole system past one machine: a three-broker Kafka cluster, HDFS (a NameNode, two
DataNodes), a Spark standalone master with two workers, the job's driver on one host with its
standby on another, and two serving hosts (HTTP and the remoting front each), all sharing the
tables, the checkpoint and the writer's leases on HDFS (NAMESRV_STORE_URI). Faults are injected on
the hosts; after each, nothing acknowledged is lost, every expiry happens, and both replicas
converge to the same cut and the same answers."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers import hb, reg, topics, unreg, wait

pytestmark = pytest.mark.multihost
KAFKA = ["kafka-1", "kafka-2", "kafka-3"]
SERVING = ["serve-1", "serve-2"]
HOSTS = [*KAFKA, "namenode", "datanode-1", "datanode-2", "spark-master", "worker-1", "worker-2", "driver-a",
         "driver-b", *SERVING]
TOPIC = "namesrv-events"
KEPT_MS = 900_000  # the brokers that stay: longer than the test, since they send no heartbeats


@pytest.fixture(scope="module")
def site(bed_factory, tmp_path_factory):
    from ops.apache_kafka import start_cluster
    from ops.hdfs import start_hdfs
    from ops.programs import Site
    from ops.standalone import start_cluster as start_spark
    bed = bed_factory(HOSTS, "f")
    kafka = start_cluster([bed.hosts[h] for h in KAFKA])
    fs = start_hdfs(bed.hosts["namenode"], [bed.hosts["datanode-1"], bed.hosts["datanode-2"]])
    # two cores and two executors' memory a worker: the active job and its standby each take two cores
    # (spark.cores.max), one executor on each worker
    spark = start_spark(tmp_path_factory.mktemp("spark"), workers=2, cores=2, memory="2g",
                        master_host=bed.hosts["spark-master"],
                        worker_hosts=[bed.hosts["worker-1"], bed.hosts["worker-2"]])
    site = Site(kafka.bootstrap, f"{fs.url}/namesrv", tmp_path_factory.mktemp("hosts"),
                {"NAMESRV_ADMIN_TOKEN": "multihost", "NAMESRV_SPARK_MASTER": spark.master_url})
    programs: list = []
    yield bed, kafka, fs, site, programs, spark
    for p in programs:
        p.kill()
        print(f"== {p.roles} on {p.host.name} ({p.data_dir}):\n{p.tail(40)}")
    spark.stop()
    fs.stop()
    kafka.stop()


def _answers(host) -> tuple[str | None, object, object]:
    """A replica's cut id and its answers to the cluster and topic-list lookups."""
    from ops.programs import http_get
    status, headers, body = http_get(host, "/cluster")
    lower = {k.lower(): v for k, v in headers.items()}
    listing = http_get(host, "/topics")[2]
    return (lower.get("x-namesrv-snapshot"), json.loads(body) if status == 200 else None,
            json.loads(listing) if listing else None)


def _serves(host, topic: str) -> bool:
    from ops.programs import http_get
    return http_get(host, f"/topics/{topic}/route")[0] == 200


def _epoch_commits(store_uri: str) -> dict[str, list[tuple[int, str | None, str | None]]]:
    """Every table's commits: (version, operation, the writer epoch the commit carries)."""
    from deltalake import DeltaTable

    from pipelines.writer_lease import EPOCH_PROPERTY
    from schemas import tables as t
    out = {}
    for table in t.ALL_TABLES:
        history = DeltaTable(f"{store_uri}/delta/{table.name}").history()
        out[table.name] = sorted((int(h["version"]), h.get("operation"), h.get(EPOCH_PROPERTY)) for h in history)
    return out


def test_the_active_drivers_host_cut_off_the_standby_takes_over_and_the_old_one_never_commits(site, figures):
    from conf.store import store_path
    from eventlog.publisher import EventPublisher
    from ops.programs import wait_ready
    from pipelines import writer_lease
    bed, kafka, _fs, site_, programs, _spark = site
    h = bed.hosts
    job_a = site_.start("job", h["driver-a"])
    programs.append(job_a)
    for s in SERVING:
        programs.append(site_.start("serving", h[s]))
    started = time.monotonic()
    for s in SERVING:
        wait_ready(h[s], 420)
    ready_s = time.monotonic() - started
    job_b = site_.start("job", h["driver-b"])  # the standby: its session up, waiting for the lease
    programs.append(job_b)
    wait(lambda: "standby: job" in job_b.log("job"), 300, "the standby on driver-b")
    leases = store_path(site_.store_uri)
    first = writer_lease.newest(leases)
    assert first is not None and "standby: job" not in job_a.log("job")

    groups = [f"mh-{i}" for i in range(12)]
    with EventPublisher(kafka.bootstrap, TOPIC, max_message_bytes=1 << 20) as pub:
        acked = pub.publish([reg(g, 0, f"10.9.0.{i + 1}:10911", tps=topics(f"MhTopic{i}", "MhBase"), timeout_ms=KEPT_MS)
                             for i, g in enumerate(groups[:6])])
        # a broker that registers once and never heartbeats: expired 20 s later, whoever writes then
        acked += pub.publish([reg("mh-brief", 0, "10.9.1.1:10911", tps=topics("MhBrief", "MhBase"), timeout_ms=20_000)])
        for s in SERVING:
            wait(lambda s=s: all(_serves(h[s], f"MhTopic{i}") for i in range(6)), 120, f"{s}: the first routes")

        bed.cut("driver-a")
        cut_at = time.time()
        acked += pub.publish([reg(g, 0, f"10.9.0.{i + 7}:10911", tps=topics(f"MhTopic{i + 6}", "MhBase"),
                                  timeout_ms=KEPT_MS) for i, g in enumerate(groups[6:])])
        acked += pub.publish([unreg("mh-0", 0, "10.9.0.1:10911")])
        for s in SERVING:
            wait(lambda s=s: all(_serves(h[s], f"MhTopic{i}") for i in range(6, 12)), 300,
                  f"{s}: routes published while driver-a is cut off (the standby's takeover)")
        lease = writer_lease.newest(leases)
        assert lease is not None
        taken_s = lease[1]["takenAt"] / 1000 - cut_at
        assert lease[0] > first[0], "the standby did not take a newer epoch"
        assert taken_s >= writer_lease.STALE_S - 1, f"taken over {taken_s:.1f} s after the cut: too soon"
        served_s = time.time() - cut_at
        fenced_at = {name: max(v for v, op, _ in commits if op == "SET TBLPROPERTIES")
                     for name, commits in _epoch_commits(site_.store_uri).items()}

        bed.heal("driver-a")
        healed = time.monotonic()
        fenced = f"writer epoch {first[0]} was taken over by epoch {lease[0]}"
        wait(lambda: fenced in job_a.log("job"), 180, "the old driver to leave once it sees the newer lease")
        left_s = time.monotonic() - healed
        # its launcher starts it again, as the standby now
        wait(lambda: "standby: job" in job_a.log("job").split(fenced, 1)[1], 300, "the old driver's restart")
        acked += pub.publish([reg("mh-late", 0, "10.9.2.1:10911", tps=topics("MhLate", "MhBase"), timeout_ms=KEPT_MS)])

    # nothing lost: every acknowledged registration is served (mh-0's removal too) on both replicas
    for s in SERVING:
        wait(lambda s=s: _serves(h[s], "MhLate") and not _serves(h[s], "MhTopic0"), 120, f"{s}: the late route")
        wait(lambda s=s: not _serves(h[s], "MhBrief"), 120, f"{s}: mh-brief's expiry")
        assert all(_serves(h[s], f"MhTopic{i}") for i in range(1, 12))
    # the resumed old writer committed nothing: every commit after the takeover is the new epoch's
    for name, commits in _epoch_commits(site_.store_uri).items():
        wrong = [(v, op, epoch) for v, op, epoch in commits
                 if v > fenced_at[name] and op != "SET TBLPROPERTIES" and epoch != str(lease[0])]
        assert not wrong, f"{name}: commits after the takeover not by epoch {lease[0]}: {wrong}"
    assert writer_lease.newest(leases)[0] == lease[0]
    # the replicas agree: the same cut, the same answers
    agreed = wait(lambda: (lambda a, b: a if a == b and a[0] else None)(*(_answers(h[s]) for s in SERVING)), 60,
                   "the two replicas to serve the same cut")
    figures(f"failover across hosts (HDFS store, Kafka RF 3): ready in {ready_s:.0f} s; driver-a cut off, the "
            f"standby on driver-b took epoch {lease[0]} {taken_s:.1f} s after the cut and served the writes of the "
            f"cut {served_s:.1f} s after it; healed, the old driver left in {left_s:.1f} s having committed nothing "
            f"and came back as the standby; {len(acked)} events acknowledged, none lost; both "
            f"replicas at cut {agreed[0]}")


def _publish_and_serve(site, tag: str, count: int, timeout_s: float, pub=None) -> tuple[int, int, float]:
    """Publish `count` registrations one by one (acks=all; a refused one is not retried: nothing
    is promised for it) and wait until both replicas serve every acknowledged one: (acknowledged,
    refused, seconds until served). `pub`: a publisher connected before (a broker cut off now
    may be the one a new publisher's bootstrap tries, and time out on)."""
    from contextlib import nullcontext

    from eventlog.publisher import EventPublisher
    bed, kafka = site[0], site[1]
    started = time.monotonic()
    served_topics, refused = [], 0
    with nullcontext(pub) if pub is not None else EventPublisher(kafka.bootstrap, TOPIC,
                                                                  max_message_bytes=1 << 20) as pub:
        for i in range(count):  # bounded: `count` events, each within the publisher's timeouts
            event = reg(f"{tag}-{i}", 0, f"10.8.{len(tag)}.{i + 1}:10911", tps=topics(f"{tag}Topic{i}", "MhBase"),
                        timeout_ms=KEPT_MS)
            try:
                pub.publish([event])
                served_topics.append(f"{tag}Topic{i}")
            except Exception:
                refused += 1
    for s in SERVING:
        wait(lambda s=s: all(_serves(bed.hosts[s], t) for t in served_topics), timeout_s,
              f"{s}: every acknowledged {tag} registration")
    return len(served_topics), refused, time.monotonic() - started


def _agreed(site) -> str:
    bed = site[0]
    agreed = wait(lambda: (lambda a, b: a if a == b and a[0] else None)(*(_answers(bed.hosts[s]) for s in SERVING)),
                   60, "the two replicas to serve the same cut")
    return str(agreed[0])


def test_a_kafka_broker_cut_off_and_healed_loses_nothing(site, figures):
    from eventlog.publisher import EventPublisher
    bed, kafka, *_ = site
    leader = kafka.leader(TOPIC)
    with EventPublisher(kafka.bootstrap, TOPIC, max_message_bytes=1 << 20) as pub:
        pub.warm()
        bed.cut(leader)
        try:
            acked, refused, served_s = _publish_and_serve(site, "KCut", 8, 240, pub)
        finally:
            bed.heal(leader)
    after, _, served2_s = _publish_and_serve(site, "KHeal", 4, 180)
    assert acked >= 6 and after == 4
    figures(f"failover across hosts: Kafka leader {leader} cut off: {acked} of 8 registrations acknowledged "
            f"({refused} refused while leadership moved), all served on both replicas {served_s:.1f} s after the "
            f"cut; healed, 4 more served in {served2_s:.1f} s; replicas agree at cut {_agreed(site)}")


def test_a_datanode_killed_loses_nothing(site, figures):
    _bed, _kafka, fs, *_ = site
    fs.kill("datanode-2")
    try:
        acked, _, served_s = _publish_and_serve(site, "DnKill", 6, 300)
    finally:
        fs.start("datanode-2")
    assert acked == 6
    figures(f"failover across hosts: DataNode datanode-2 SIGKILLed: 6 registrations acknowledged and served on both "
            f"replicas {served_s:.1f} s after the kill (the store refuses writes until the NameNode declares the "
            f"DataNode dead; the job's launcher restarts it or the standby takes over); replicas agree at cut "
            f"{_agreed(site)}")


def _heartbeats(bootstrap: str, beating: list[tuple[str, str]], stop, sent: dict[str, int]) -> None:
    """A heartbeat of each broker every 5 s, as far as the log takes them (bounded: 60 rounds)."""
    from eventlog.publisher import EventPublisher
    with EventPublisher(bootstrap, TOPIC, max_message_bytes=1 << 20) as beat:
        for _ in range(60):
            if stop.wait(5.0):
                return
            try:
                beat.publish([hb(n, 0, a) for n, a in beating])
                sent["ok"] += 1
            except Exception:
                sent["failed"] += 1


def _watch(bed, watched: list[str], seconds: float, missing: list[tuple[float, str, str]]) -> None:
    """Every second for `seconds`: each replica serves each watched topic (else noted in `missing`)."""
    from ops.programs import http_get
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for s in SERVING:
            for topic in watched:
                status = http_get(bed.hosts[s], f"/topics/{topic}/route")[0]
                if status != 200:
                    missing.append((round(time.time(), 1), s, f"{topic}: {status}"))
        time.sleep(1.0)


def test_a_kafka_outage_longer_than_the_broker_timeout_expires_no_one(site, figures):
    """Every Kafka host cut off for 45 s, more than twice the brokers' 20 s timeout: no heartbeat
    can reach the log meanwhile, and that is not silence (the source's outage floor,
    docs/semantics.md §15.6). Brokers that heartbeat every 5 s (as far as they can) never leave
    the routes on either replica; a broker that stopped heartbeating before the outage still
    expires, a full timeout after the log is back."""
    import threading

    from eventlog.publisher import EventPublisher
    bed, kafka, *_ = site
    beating = [(f"out-{i}", f"10.7.0.{i + 1}:10911") for i in range(3)]
    with EventPublisher(kafka.bootstrap, TOPIC, max_message_bytes=1 << 20) as pub:
        pub.publish([reg(n, 0, a, tps=topics(f"Out{i}", "OutBase"), timeout_ms=20_000)
                     for i, (n, a) in enumerate(beating)])
        pub.publish([reg("out-dead", 0, "10.7.1.1:10911", tps=topics("OutDead", "OutBase"), timeout_ms=20_000)])
    for s in SERVING:
        wait(lambda s=s: all(_serves(bed.hosts[s], t) for t in ("Out0", "Out1", "Out2", "OutDead")), 120,
              f"{s}: the outage test's brokers")
    stop = threading.Event()
    sent = {"ok": 0, "failed": 0}
    beater = threading.Thread(target=_heartbeats, args=(kafka.bootstrap, beating, stop, sent), daemon=True)
    beater.start()
    missing: list[tuple[float, str, str]] = []
    watched = ["Out0", "Out1", "Out2"]
    try:
        _watch(bed, watched, 10, missing)
        for k in KAFKA:
            bed.cut(k)
        try:
            _watch(bed, watched, 45, missing)
        finally:
            for k in KAFKA:
                bed.heal(k)
        healed = time.monotonic()
        _watch(bed, watched, 50, missing)  # two and a half timeouts after the log is back
        for s in SERVING:
            wait(lambda s=s: not _serves(bed.hosts[s], "OutDead"), 60, f"{s}: out-dead's expiry")
        expired_s = time.monotonic() - healed
    finally:
        stop.set()
        beater.join(timeout=60)
    assert not missing, f"brokers that kept heartbeating left the routes: {missing[:10]}"
    assert sent["ok"] >= 4, sent
    figures(f"failover across hosts: every Kafka host cut off for 45 s (brokers' timeout 20 s): the 3 heartbeating "
            f"brokers never left the routes on either replica ({sent['ok']} heartbeat rounds acknowledged, "
            f"{sent['failed']} refused during the outage); the silent one expired {expired_s:.0f} s after the heal; "
            f"replicas agree at cut {_agreed(site)}")


def test_a_serving_host_cut_off_from_the_store_answers_from_its_last_cut_and_says_how_old(site, figures):
    """serve-1 loses the store (HDFS) but not its clients: it keeps answering lookups from its last
    cut, every answer's X-Namesrv-Staleness-Ms and its staleness metric grow, /readyz turns 503 past
    NAMESRV_MAX_STALENESS_MS (30 s); serve-2 serves what is published meanwhile. Healed, serve-1
    catches up and both agree again."""
    from ops.programs import http_get
    bed = site[0]
    store_hosts = ["namenode", "datanode-1", "datanode-2"]
    one, two = bed.hosts["serve-1"], bed.hosts["serve-2"]
    before = _answers(one)[0]
    bed.cut_between("serve-1", store_hosts)
    cut_at = time.monotonic()
    try:
        from eventlog.publisher import EventPublisher
        with EventPublisher(site[1].bootstrap, TOPIC, max_message_bytes=1 << 20) as pub:
            pub.publish([reg("st-0", 0, "10.6.0.1:10911", tps=topics("StTopic", "StBase"), timeout_ms=KEPT_MS)])
        wait(lambda: _serves(two, "StTopic"), 120, "serve-2: a registration published during serve-1's cut")
        reason = wait(lambda: (lambda r: r[2].decode() if r[0] == 503 else None)(http_get(one, "/readyz")), 120,
                       "serve-1 to report not ready, cut off from the store")
        unready_s = time.monotonic() - cut_at
        status, headers, _ = http_get(one, "/topics/MhTopic1/route")
        staleness = int({k.lower(): v for k, v in headers.items()}["x-namesrv-staleness-ms"])
        metrics = http_get(one, "/metrics")[2].decode()
        gauge = next(float(line.split()[-1]) for line in metrics.splitlines()
                     if line.startswith("namesrv_snapshot_staleness_seconds "))
        still = _answers(one)[0]
        assert status == 200 and not _serves(one, "StTopic")  # answers, from its last cut
        assert "store has not been read" in reason and staleness > 30_000 and gauge > 30 and still == before
    finally:
        bed.heal_between("serve-1", store_hosts)
    healed = time.monotonic()
    wait(lambda: _serves(one, "StTopic") and http_get(one, "/readyz")[0] == 200, 120,
          "serve-1 to catch up once it reaches the store again")
    caught_s = time.monotonic() - healed
    figures(f"failover across hosts: serve-1 cut off from HDFS kept answering from cut {before}; /readyz 503 after "
            f"{unready_s:.0f} s (staleness header {staleness} ms, gauge {gauge:.0f} s); healed, it served the cut's "
            f"writes and was ready again in {caught_s:.1f} s; replicas agree at cut {_agreed(site)}")


def test_a_spark_worker_killed_in_the_middle_of_a_batch_loses_nothing(site, figures):
    """300 registrations published at once (one batch), and one second later worker-2 SIGKILLed
    with its executors: Spark runs the lost tasks again on the other worker (the state is in the
    checkpoint on HDFS), and every registration is served on both replicas."""
    from eventlog.publisher import EventPublisher
    from ops.programs import http_json
    bed, kafka, *_rest, spark = site
    count = 300
    with EventPublisher(kafka.bootstrap, TOPIC, max_message_bytes=1 << 20) as pub:
        pub.publish([reg(f"wk-{i}", 0, f"10.5.{i // 250}.{i % 250 + 1}:10911", tps=topics(f"WkTopic{i}", "WkBase"),
                         timeout_ms=KEPT_MS) for i in range(count)])
    published = time.monotonic()
    time.sleep(1.0)
    spark.kill_worker(1)
    wanted = {f"WkTopic{i}" for i in range(count)}
    for s in SERVING:
        wait(lambda s=s: wanted <= set((http_json(bed.hosts[s], "/topics") or {}).get("topicList", [])), 300,
              f"{s}: all {count} registrations published as worker-2 died")
    served_s = time.monotonic() - published
    figures(f"failover across hosts: worker-2 SIGKILLed (with its executors) 1 s after {count} registrations were "
            f"published: all served on both replicas {served_s:.1f} s after publishing; replicas agree at cut "
            f"{_agreed(site)}")
