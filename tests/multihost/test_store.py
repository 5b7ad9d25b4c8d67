"""The shared store past one machine: HDFS (a NameNode and two DataNodes on their own hosts,
ops/hdfs.py) holding Delta tables that hosts write and read over HDFS's own protocol (delta-rs'
hdfs-native client). A Delta version is claimed by one writer only, whichever host it runs on
(the fencing primitive the job's single writer is built on), and a DataNode's crash loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.multihost
HOSTS = ["namenode", "datanode-1", "datanode-2", "writer-1", "writer-2"]

# run inside a host: claim versions base+1 .. base+rounds of `uri`, one commit attempt each, no retry
_CLAIM = """
import json, os, sys, time
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
uri, me, base, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for r in range(rounds):
    table = DeltaTable(uri, version=base + r)  # both writers read the same version, then race for the next
    try:
        write_deltalake(table, pa.table({"writer": [me], "round": [r]}), mode="append",
                        commit_properties=CommitProperties(max_commit_retries=0))
        print(json.dumps({"round": r, "won": True}), flush=True)
    except Exception as exc:
        print(json.dumps({"round": r, "won": False, "why": type(exc).__name__}), flush=True)
os._exit(0)  # see _READ
"""

# run inside a host: the table's version and rows, as a serving replica would read them
_READ = """
import json, os, sys
from deltalake import DeltaTable
t = DeltaTable(sys.argv[1])
print(json.dumps({"version": t.version(), "rows": t.to_pyarrow_table().num_rows}), flush=True)
# once in a while the HDFS client's threads abort the interpreter's exit (std::terminate, SIGABRT)
# after the answer is out; the process leaves without that teardown
os._exit(0)
"""


@pytest.fixture(scope="module")
def store(bed_factory):
    from ops.hdfs import start_hdfs
    bed = bed_factory(HOSTS, "s")
    started = time.monotonic()
    fs = start_hdfs(bed.hosts["namenode"], [bed.hosts["datanode-1"], bed.hosts["datanode-2"]])
    fs.started_s = time.monotonic() - started  # type: ignore[attr-defined]
    yield bed, fs
    fs.stop()


def _in_host(host, script: str, *args: str, timeout_s: float = 120) -> subprocess.Popen[str]:
    return subprocess.Popen(host.argv([sys.executable, "-c", script, *args]), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _lines(proc: subprocess.Popen[str], timeout_s: float = 120) -> list[dict]:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err[-2000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_a_delta_version_is_claimed_by_exactly_one_of_two_hosts(store, figures):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    bed, fs = store
    uri = f"{fs.url}/race"
    write_deltalake(uri, pa.table({"writer": ["setup"], "round": [-1]}))
    rounds = 20
    racers = [_in_host(bed.hosts[h], _CLAIM, uri, h, "0", str(rounds)) for h in ("writer-1", "writer-2")]
    results = [_lines(p) for p in racers]
    won = [sum(1 for r in rs if r["won"]) for rs in results]
    per_round = [sum(1 for rs in results for r in rs if r["round"] == i and r["won"]) for i in range(rounds)]
    table = DeltaTable(uri)
    figures(f"HDFS store: up in {fs.started_s:.1f} s (NameNode + 2 DataNodes on 3 hosts); version race from 2 hosts: "
            f"{rounds} versions, won {won[0]} / {won[1]}, every version claimed once")
    assert per_round == [1] * rounds, per_round
    assert table.version() == rounds and table.to_pyarrow_table().num_rows == rounds + 1


def test_the_jobs_own_files_keep_their_local_meaning_on_hdfs(store):
    """What the job and the readers do with their small files (conf/store.py), as pathlib does it
    on a local disk: an exclusive create decides between two creators, a rename replaces, a touch
    renews the modification time, and what is missing is FileNotFoundError."""
    from conf.store import store_path
    _bed, fs = store
    root = store_path(f"{fs.url}/namesrv-files")
    leases = root / "leases"
    leases.mkdir(parents=True, exist_ok=True)
    leases.mkdir(parents=True, exist_ok=True)
    with (leases / "1").open("x") as f:
        f.write('{"pid": 1}')
    with pytest.raises(FileExistsError):
        (leases / "1").open("x")
    assert json.loads((leases / "1").read_text()) == {"pid": 1}
    before = (leases / "1").stat().st_mtime
    time.sleep(0.05)
    (leases / "1").touch()
    assert (leases / "1").stat().st_mtime > before
    tmp = root / "_progress.json.tmp"
    tmp.write_text('{"batchId": 2}')
    tmp.replace(root / "_progress.json")
    tmp.write_text('{"batchId": 3}')
    tmp.replace(root / "_progress.json")
    assert json.loads((root / "_progress.json").read_text()) == {"batchId": 3} and not tmp.exists()
    assert sorted(p.name for p in root.iterdir()) == ["_progress.json", "leases"]
    assert root.is_dir() and not (root / "_progress.json").is_dir()
    (leases / "1").unlink()
    (leases / "1").unlink(missing_ok=True)
    with pytest.raises(FileNotFoundError):
        (leases / "1").read_text()
    with pytest.raises(FileNotFoundError):
        list((root / "none").iterdir())


def test_every_host_reads_what_another_committed_and_a_datanode_crash_loses_nothing(store, figures):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    bed, fs = store
    uri = f"{fs.url}/crash"
    for i in range(5):
        write_deltalake(uri, pa.table({"i": [i]}), mode="append")
    fs.kill("datanode-1")
    started, failures = time.monotonic(), 0
    for i in range(5, 10):  # written while one of the two DataNodes is down
        while True:  # hdfs-native tries the dead DataNode until the NameNode declares it dead (~30 s here)
            try:
                write_deltalake(uri, pa.table({"i": [i]}), mode="append")
                break
            except Exception:
                failures += 1
                assert time.monotonic() - started < 120, "the store did not heal within 120 s"
                time.sleep(1)
    degraded_s = time.monotonic() - started
    seen = [_lines(_in_host(bed.hosts[h], _READ, uri))[0] for h in ("writer-1", "writer-2")]
    assert seen == [{"version": 9, "rows": 10}] * 2, seen
    assert sorted(DeltaTable(uri).to_pyarrow_table().column("i").to_pylist()) == list(range(10))
    fs.start("datanode-1")
    figures(f"HDFS store: a DataNode SIGKILLed; 5 commits went on without it in {degraded_s:.1f} s "
            f"({failures} attempts failed until the NameNode declared it dead); two other hosts read all 10 versions")
