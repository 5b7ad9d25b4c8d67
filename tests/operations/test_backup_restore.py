"""Backup and restore as docs/backup.md says (issue 37): a real system registers brokers and a KV
entry, the job stops, the page's own backup commands copy the store, the store is wiped, the page's
restore commands put it back, the job starts again, and the same routes and KV are served; a
registration published after the restore is served too."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.harness import Pipeline
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
PAGE = Path(__file__).resolve().parents[2] / "docs" / "backup.md"


def page_commands(name: str) -> str:
    """The shell block the page marks `<!-- tested: name -->`."""
    m = re.search(rf"<!-- tested: {name} -->\n```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert m, f"docs/backup.md has no block marked 'tested: {name}'"
    return m.group(1)


def run_page(name: str, store: Path, backup: Path) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", page_commands(name)], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "STORE": str(store), "BACKUP": str(backup)})
    assert done.returncode == 0, f"{name}: {done.stderr}"
    return done.stdout


READS = ("/topics/BackupTopic/route", "/topics/BackupTopic2/route", "/kv/BackupNs", "/cluster")


def served(p: Pipeline, reads: tuple[str, ...] = READS) -> dict[str, object]:
    """What clients read: (status, body) of two routes, a KV namespace and the cluster."""
    return {path: p.get(path) for path in reads}


def test_a_backup_taken_with_the_job_stopped_restores_the_same_routes_and_kv(spark, kafka_bootstrap, tmp_path):
    data, backup = tmp_path / "data", tmp_path / "backup.tar.gz"
    p = Pipeline(spark, kafka_bootstrap, data).start_job().start_http()
    topic = p.cfg.kafka_topic
    try:
        p.wait_served(p.publish([
            reg("backup-a", 0, "127.0.0.1:18911", tps=topics("BackupTopic", "BackupBase"), timeout_ms=600_000),
            reg("backup-a", 1, "127.0.0.1:18912", tps=topics("BackupTopic", "BackupBase"), timeout_ms=600_000),
            reg("backup-b", 0, "127.0.0.1:18921", tps=topics("BackupTopic2", "BackupBase"), timeout_ms=600_000)]))
        assert p.write("PUT", "/kv/BackupNs/answer", {"value": "42"})[0] == 200
        assert p.write("PUT", "/kv/BackupNs/route", {"value": "backup-a:8;backup-b:8"})[0] == 200
        before = served(p)
        assert all(status == 200 for status, _ in before.values()), before
    finally:
        p.close()  # the job and the HTTP server stopped: nothing writes to the store

    assert "backed up to" in run_page("backup", data, backup)
    shutil.rmtree(data)  # the store is lost (the in-process job of the tests takes no lease: no leases/)
    data.mkdir()
    run_page("restore", data, backup)
    assert sorted(p.name for p in data.iterdir()) == ["checkpoint", "delta"]

    q = Pipeline(spark, kafka_bootstrap, data, NAMESRV_KAFKA_TOPIC=topic).start_job().start_http()
    try:
        q.wait_for(lambda: q.get("/readyz")[0] == 200, 60, "the restored system to be ready")
        assert served(q) == before
        q.wait_served(q.publish([reg("backup-c", 0, "127.0.0.1:18931", tps=topics("BackupTopic3", "BackupBase"),
                                     timeout_ms=600_000)]))
        assert q.get("/topics/BackupTopic3/route")[0] == 200
        assert served(q, READS[:3]) == {k: before[k] for k in READS[:3]}  # the restored ones stay as they were
    finally:
        q.close()
