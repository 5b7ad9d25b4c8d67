"""conf.logs: JSON lines, wrapped foreign lines, and size-based rotation with a header on every file."""

from __future__ import annotations

import json
import logging

from conf import describe, load_config
from conf.logs import JsonFormatter, RotatingLog, as_json_line, header


def test_json_records_carry_context_fields_and_exceptions():
    record = logging.LogRecord("namesrv.job", logging.WARNING, __file__, 1, "batch %d: %s", (7, "x"), None)
    record.batchId, record.brokerName = 7, "broker-a"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "batch 7: x" and line["level"] == "WARNING" and line["logger"] == "namesrv.job"
    assert line["batchId"] == 7 and line["brokerName"] == "broker-a" and line["time"].endswith("Z")
    try:
        raise ValueError("boom")
    except ValueError:
        import sys
        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exception"]


def test_foreign_lines_are_wrapped_and_json_lines_kept():
    kept = b'{"level": "INFO", "message": "ok"}\n'
    assert as_json_line(kept, "x") == kept
    wrapped = json.loads(as_json_line(b"26/11/23 10:00:00 WARN SparkContext: slow\n", "namesrv.job.stdout"))
    assert wrapped["level"] == "WARNING" and wrapped["logger"] == "namesrv.job.stdout"
    assert wrapped["message"] == "26/11/23 10:00:00 WARN SparkContext: slow"
    assert json.loads(as_json_line(b"{not json\n", "s"))["message"] == "{not json"
    assert json.loads(as_json_line(b"\xff\xfe bytes\n", "s"))["message"].endswith("bytes")


def test_header_names_version_and_configuration_with_secrets_masked():
    cfg = load_config({"NAMESRV_ADMIN_TOKEN": "s3cret", "NAMESRV_REMOTING_SECRET_KEY": "sk"})
    text = header("job", "1.2.3", describe(cfg), "text")
    assert "namesrv-stream 1.2.3: job log" in text and "NAMESRV_ADMIN_TOKEN=***" in text and "s3cret" not in text
    doc = json.loads(header("job", "1.2.3", describe(cfg), "json"))
    assert doc["version"] == "1.2.3" and doc["configuration"]["NAMESRV_REMOTING_SECRET_KEY"] == "***"
    assert doc["configuration"]["NAMESRV_HTTP_PORT"] == str(cfg.http_port)


def test_rotation_at_the_configured_size_keeps_backups_and_a_header_on_every_file(tmp_path):
    path = tmp_path / "job.log"
    log = RotatingLog(path, max_bytes=1000, backups=2, header="HEADER")
    lines = [f"line {i:04d} ".encode() + b"x" * 80 for i in range(60)]  # ~5.5 KB
    for line in lines:
        log.write(line)
    log.close()
    files = [path, tmp_path / "job.log.1", tmp_path / "job.log.2"]
    assert not (tmp_path / "job.log.3").exists()  # older ones dropped
    for f in files:
        content = f.read_bytes()
        assert content.startswith(b"HEADER\n") and len(content) <= 1000
    kept = [ln for f in reversed(files) for ln in f.read_bytes().splitlines()[1:]]
    assert kept == lines[-len(kept):]  # the newest lines, in order, none torn
    reopened = RotatingLog(path, max_bytes=1000, backups=2, header="HEADER")  # appends; no second header
    reopened.write(b"after restart")
    reopened.close()
    assert path.read_bytes().count(b"HEADER") == 1 and path.read_bytes().endswith(b"after restart\n")


def test_simulator_progress_line_reports_totals_and_rates_at_most_every_interval():
    from fleet.simulator import ProgressLine
    p = ProgressLine(100.0, every_s=10)
    assert p.update(105.0, {"heartbeats": 500}) is None
    line = p.update(110.0, {"registrations": 10, "heartbeats": 1000})
    assert line == "[    10 s] sent registrations 10 (1/s), heartbeats 1,000 (100/s)"
    assert p.update(115.0, {"registrations": 10, "heartbeats": 2000}) is None
    assert p.update(120.0, {"registrations": 10, "heartbeats": 3000}).endswith("heartbeats 3,000 (200/s)")
