"""Issue 5, bad input (fast variant): 10,000 malformed records interleaved with valid events.
The job stays up, every malformed record lands in dead_letter with a reason, and every valid
event is applied."""

from __future__ import annotations

import json
import random

import pytest
from deltalake import DeltaTable

from tests.harness import Pipeline
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
MALFORMED = 10_000


def malformed(rnd: random.Random, i: int) -> tuple[bytes | None, bytes | None]:
    base = reg(f"fz-{i % 50}", 0, f"127.0.0.1:{40000 + i % 50}", tps=topics("FzTopic", "FzBase"))
    key = base["brokerName"].encode()
    kind = i % 12
    if kind == 0:
        return key, bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40)))      # not JSON / not UTF-8
    if kind == 1:
        return key, json.dumps({**base, "brokerId": rnd.choice(["0", 1.5, None, [], {}])}).encode()  # wrong type
    if kind == 2:
        drop = rnd.choice(["type", "brokerName", "clusterName", "brokerAddr", "brokerId"])
        return key, json.dumps({k: v for k, v in base.items() if k != drop}).encode()   # missing field
    if kind == 3:
        return key, json.dumps({**base, f"extra{i}": 1}).encode()                        # extra field
    if kind == 4:
        return key, json.dumps({**base, "type": rnd.choice(["REGISTER", "", "DROP_ALL", 7])}).encode()
    if kind == 5:
        bad = rnd.choice(["bad\ttopic", "new\nline", "x" * 256, " "])  # what no broker registers
        return key, json.dumps({**base, "topicConfigTable": {bad: {}}}).encode()           # invalid topic
    if kind == 6:
        bad = rnd.choice(["has space", "", "x" * 200, "semi;colon"])
        return key, json.dumps({**base, "brokerName": bad}).encode()                      # invalid broker name
    if kind == 7:
        return key, json.dumps({**base, "brokerId": -rnd.randrange(1, 99)}).encode()      # negative id
    if kind == 8:
        return key, json.dumps({**base, "topicConfigTable": {"FzTopic": {"readQueueNums": -3}}}).encode()
    if kind == 9:
        return key, json.dumps({**base, "topicConfigTable": {"FzTopic": {"perm": rnd.choice([8, -1, 99])}}}).encode()
    if kind == 10:
        return key, json.dumps({**base, "timestamp": rnd.choice([0, 2**62, -5, 10**15])}).encode()  # absurd time
    return rnd.choice([b"wrong-key", None]), json.dumps(base).encode()                  # key != brokerName


def test_ten_thousand_malformed_records_are_quarantined(spark, kafka_bootstrap, tmp_path, figures):
    p = Pipeline(spark, kafka_bootstrap, tmp_path).start_job().start_http()
    try:
        rnd = random.Random(5)
        bad_coords, good, good_coords = [], [], []
        big = json.dumps({**reg("fz-big", 0, "127.0.0.1:40999"), "pad": "x" * (1024 * 1024 + 10)}).encode()
        for chunk in range(0, MALFORMED, 1000):
            records = [malformed(rnd, i) for i in range(chunk, chunk + 1000)]
            if chunk == 0:
                records[:5] = [(b"fz-big", big)] * 5  # oversize, over 1 MiB
            bad_coords += p.publisher.publish_raw(records)
            valid = [reg(f"fz-good-{chunk // 1000}", 0, f"127.0.0.1:{41000 + chunk // 1000}",
                         tps=topics(f"FzGood{chunk // 1000}", "FzBase"))]
            good += valid
            good_coords += p.publish(valid)
        p.wait_served(bad_coords + good_coords, timeout=240)
        p.check_job()
        for e in good:
            topic = next(t for t in e["topicConfigTable"] if t.startswith("FzGood"))
            assert p.get(f"/topics/{topic}/route")[0] == 200, topic
        dead = DeltaTable(str(p.cfg.warehouse / "dead_letter")).to_pyarrow_table(
            columns=["partition", "offset", "reason"]).to_pylist()
        quarantined = {(r["partition"], r["offset"]): r["reason"] for r in dead}
        missing = [c for c in bad_coords if c not in quarantined]
        assert not missing, f"{len(missing)} malformed records were not quarantined, e.g. {missing[:3]}"
        assert all(quarantined[c] for c in bad_coords)
        assert not any(c in quarantined for c in good_coords)
        reasons = {quarantined[c].split(":")[0][:40] for c in bad_coords}
        figures(f"fuzzer: {len(bad_coords)} malformed records sent, {len(bad_coords) - len(missing)} quarantined "
                f"with a reason ({len(reasons)} distinct reason prefixes), {len(good)} valid events applied")
    finally:
        p.close()
