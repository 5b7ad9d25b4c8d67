"""Where the shared state lives (conf/store.py): a local directory is plain pathlib, an hdfs://
location an HdfsPath with pathlib's names; bad locations are refused at start with the variable's
name. (Reading and writing on a real HDFS: tests/multihost/test_store.py.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from conf import ConfigError, load_config
from conf.store import HdfsPath, check_location, store_path


def test_a_local_location_is_a_pathlib_path(tmp_path):
    assert store_path(str(tmp_path)) == tmp_path
    assert isinstance(store_path(tmp_path / "x"), Path)


def test_an_hdfs_location_keeps_pathlibs_names():
    root = store_path("hdfs://10.77.0.4:9000/namesrv/")
    assert isinstance(root, HdfsPath)
    assert str(root) == "hdfs://10.77.0.4:9000/namesrv"
    f = root / "checkpoint" / "offsets" / "7"
    assert str(f) == "hdfs://10.77.0.4:9000/namesrv/checkpoint/offsets/7"
    assert f.name == "7"
    assert str(f.parent) == "hdfs://10.77.0.4:9000/namesrv/checkpoint/offsets"
    assert str(f.with_name(".7.tmp")) == "hdfs://10.77.0.4:9000/namesrv/checkpoint/offsets/.7.tmp"
    assert store_path(f) is f
    assert pickle.loads(pickle.dumps(f)) == f  # travels to Spark's Python workers as its URI


@pytest.mark.parametrize(("location", "why"), [
    ("s3://bucket/namesrv", "scheme 's3' is not supported"),
    ("hdfs://namenode/namesrv", "host and port"),
    ("hdfs://namenode:9000", "absolute path"),
    ("hdfs://namenode:9000/x?y=1", "no query"),
])
def test_a_location_that_cannot_be_the_store_is_refused_with_the_reason(location, why):
    assert why in (check_location(location) or "")
    with pytest.raises(ValueError, match=r"not supported|host and port|absolute path"):
        store_path(location)
    with pytest.raises(ConfigError, match="NAMESRV_STORE_URI"):
        load_config({"NAMESRV_STORE_URI": location})


def test_the_tables_checkpoint_and_leases_follow_the_store(tmp_path):
    local = load_config({"NAMESRV_DATA_DIR": str(tmp_path)})
    assert (local.store_root, local.warehouse, local.checkpoint_dir) == \
        (tmp_path, tmp_path / "delta", tmp_path / "checkpoint")
    shared = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_STORE_URI": "hdfs://nn:9000/ns"})
    assert str(shared.warehouse) == "hdfs://nn:9000/ns/delta"
    assert str(shared.checkpoint_dir) == "hdfs://nn:9000/ns/checkpoint"
    assert shared.log_dir == tmp_path / "logs"  # the host's own files stay on the host
    relative = load_config({"NAMESRV_DATA_DIR": str(tmp_path), "NAMESRV_STORE_URI": "shared"})
    assert relative.store_root == Path("shared").resolve()

