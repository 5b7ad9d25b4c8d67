"""Importing a RocketMQ NameServer's KV config (`namesrv-admin importKvConfig`, issue 37): the file
RocketMQ persists (`~/namesrv/kvConfig.json`) is checked whole before anything is written, and every
entry is read back over HTTP once imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from admin.kv_import import KEY_MAX, KvFileError, read_kv_config
from schemas.fields import KV_TEXT_MAX
from tests.harness import ADMIN_TOKEN

ROOT = Path(__file__).resolve().parents[2]
ORDER_NS = "ImportOrderNs"  # the file's ORDER_TOPIC_CONFIG, imported into the shared system

# As RocketMQ 5.3's KVConfigManager.persist writes it (fastjson, pretty): namespaces of
# ORDER_TOPIC_CONFIG and of an application, a value with a non-ASCII character
ROCKETMQ_FILE = """{
\t"configTable":{
\t\t"ORDER_TOPIC_CONFIG":{
\t\t\t"ImportOrderTopic":"broker-a:8;broker-b:8",
\t\t\t"ImportOrderTopic2":"broker-a:4"
\t\t},
\t\t"ImportAppNs":{
\t\t\t"greeting":"grüß dich",
\t\t\t"empty":"",
\t\t\t"path/with spaces":"kept as it is"
\t\t},
\t\t"ImportEmptyNs":{}
\t}
}"""


def test_a_rocketmq_file_is_read_as_its_table():
    table = read_kv_config(ROCKETMQ_FILE)
    assert table == {"ORDER_TOPIC_CONFIG": {"ImportOrderTopic": "broker-a:8;broker-b:8", "ImportOrderTopic2": "broker-a:4"},
                     "ImportAppNs": {"greeting": "grüß dich", "empty": "", "path/with spaces": "kept as it is"},
                     "ImportEmptyNs": {}}


@pytest.mark.parametrize("text, says", [
    ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ("[]", 'not a RocketMQ KV config: expected {"configTable"'),
    ('{"table": {}}', "not a RocketMQ KV config"),
    ('{"configTable": {}, "dataVersion": 1}', "unexpected top-level key(s) 'dataVersion'"),
    ('{"configTable": ["ns"]}', "configTable must be an object of namespaces, not an array"),
    ('{"configTable": {"bad ns": {"k": "v"}}}', "namespace 'bad ns' contains characters outside [a-zA-Z0-9_.:%|-]"),
    ('{"configTable": {"ns": "k=v"}}', "namespace 'ns' must be an object of keys and values, not a string"),
    ('{"configTable": {"ns": {"k": 8}}}', "namespace 'ns' key 'k': the value must be a string, not a number"),
    ('{"configTable": {"ns": {"k": null}}}', "the value must be a string, not null"),
    ('{"configTable": {"ns": {"": "v"}}}', f"namespace 'ns': a key must be 1 to {KEY_MAX} characters (this one has 0)"),
    (json.dumps({"configTable": {"ns": {"k" * (KEY_MAX + 1): "v"}}}), f"this one has {KEY_MAX + 1}"),
    (json.dumps({"configTable": {"ns": {"k": "v" * (KV_TEXT_MAX + 1)}}}),
     f"the value has {KV_TEXT_MAX + 1} characters, at most {KV_TEXT_MAX} are accepted"),
])
def test_a_bad_file_is_refused_with_where_and_why(text, says):
    with pytest.raises(KvFileError) as refused:
        read_kv_config(text)
    assert says in str(refused.value)


def admin(url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NAMESRV_DATA_DIR": str(data_dir), "NAMESRV_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.run([sys.executable, "-m", "admin", "--url", url, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90)


def served(url: str, namespace: str, key: str) -> str | None:
    r = requests.get(f"{url}/kv/{namespace}/{requests.utils.quote(key, safe='')}", timeout=10)
    return r.json()["value"] if r.status_code == 200 else None


@pytest.mark.integration
def test_a_file_is_imported_and_every_entry_read_back_over_http(remoting_system, tmp_path):
    p = remoting_system
    # The system is the session's: ORDER_TOPIC_CONFIG is in every REGISTER_BROKER answer once it
    # exists (RocketMQ's order-topic config; a deleted key leaves the namespace, as in RocketMQ), so
    # the file's order-topic entries are imported under a namespace of this test's own.
    text = ROCKETMQ_FILE.replace("ORDER_TOPIC_CONFIG", ORDER_NS)
    path = tmp_path / "kvConfig.json"
    path.write_text(text, encoding="utf-8")
    expected = read_kv_config(text)
    # one entry already holds the file's value, one another value
    assert p.write("PUT", f"/kv/{ORDER_NS}/ImportOrderTopic2", {"value": "broker-a:4"})[0] == 200
    assert p.write("PUT", "/kv/ImportAppNs/greeting", {"value": "hello"})[0] == 200
    assert p.write("PUT", "/kv/ImportAppNs/not-in-the-file", {"value": "stays"})[0] == 200

    dry = admin(p.url, p.cfg.data_dir, "-o", "json", "importKvConfig", "--file", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    plan = {(e["namespace"], e["key"]): e["action"] for e in json.loads(dry.stdout)["entries"]}
    assert plan[(ORDER_NS, "ImportOrderTopic2")] == "unchanged"
    assert plan[("ImportAppNs", "greeting")] == "changed"
    assert plan[(ORDER_NS, "ImportOrderTopic")] == "new"
    assert served(p.url, ORDER_NS, "ImportOrderTopic") is None  # a dry run writes nothing

    done = admin(p.url, p.cfg.data_dir, "importKvConfig", "-f", str(path))
    assert done.returncode == 0, done.stderr
    assert "wrote 4 of 5 entries" in done.stdout and "1 unchanged" in done.stdout
    assert "nothing to import: namespace(s) ImportEmptyNs" in done.stdout
    for namespace, entries in expected.items():
        for key, value in entries.items():
            assert served(p.url, namespace, key) == value, (namespace, key)
    assert served(p.url, "ImportAppNs", "not-in-the-file") == "stays"

    again = admin(p.url, p.cfg.data_dir, "-o", "json", "importKvConfig", "-f", str(path))
    assert again.returncode == 0 and json.loads(again.stdout)["written"] == 0  # idempotent

    # docs/upgrades.md writes the KV config out again, as a file this command imports
    exported = export_kv(p.cfg.warehouse, tmp_path / "export")
    for namespace, entries in expected.items():
        assert entries.items() <= exported.get(namespace, {}).items(), namespace


def export_kv(warehouse: Path, where: Path) -> dict[str, dict[str, str]]:
    """The block docs/upgrades.md marks `tested: export-kv`, run where it writes kvConfig.json."""
    block = re.search(r"<!-- tested: export-kv -->\n```sh\n(.*?)```", (ROOT / "docs" / "upgrades.md").read_text(),
                      flags=re.S)
    assert block, "docs/upgrades.md has no block marked 'tested: export-kv'"
    where.mkdir()
    (where / ".venv").symlink_to(ROOT / ".venv")  # the block runs from the repository's top
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.group(1)], cwd=where, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "STORE": str(warehouse.parent)})
    assert done.returncode == 0, done.stderr
    return read_kv_config((where / "kvConfig.json").read_text())


@pytest.mark.integration
def test_a_bad_file_writes_nothing_and_says_why(remoting_system, tmp_path):
    p = remoting_system
    path = tmp_path / "kvConfig.json"
    path.write_text('{"configTable": {"ImportBadNs": {"first": "fine", "second": 2}}}')
    bad = admin(p.url, p.cfg.data_dir, "importKvConfig", "-f", str(path))
    assert bad.returncode == 2
    assert "namespace 'ImportBadNs' key 'second': the value must be a string, not a number" in bad.stderr
    assert served(p.url, "ImportBadNs", "first") is None
    missing = admin(p.url, p.cfg.data_dir, "importKvConfig", "-f", str(tmp_path / "nowhere.json"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_the_command_is_declared_with_its_file_option(tmp_path):
    """Its help names the command and its options (run as a shell user runs it: click caches a
    command's help option per first use, so it is not invoked in this process)."""
    out = admin("http://127.0.0.1:9", tmp_path, "importKvConfig", "--help")
    assert out.returncode == 0 and "-f, --file FILE" in out.stdout and "--dry-run" in out.stdout
