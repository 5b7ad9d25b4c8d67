"""HTTP load with wrk (Debian's package), and etcd (Debian's etcd-server) as the peer registry."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from ops.net import free_port, wait_for_port


def require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} is not installed; on Debian: apt-get install {package}")
    return path


def wrk(url: str, lua: str, *, connections: int = 64, threads: int = 2, seconds: int = 10) -> dict[str, Any]:
    """Run wrk with a request script; returns requests/s, latency percentiles (ms), errors."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua)
    out = subprocess.run([require("wrk", "wrk"), f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency",
                          "-s", f.name, url], capture_output=True, text=True, timeout=seconds + 60).stdout
    Path(f.name).unlink(missing_ok=True)

    def ms(label: str) -> float | None:
        m = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return None
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": float(rps.group(1)) if rps else 0.0, "p50_ms": ms("50%"), "p99_ms": ms("99%"),
            "non2xx": int(non2xx.group(1)) if non2xx else 0, "socket_errors": errors.group(1) if errors else "",
            "raw": out}


def route_script(topics: list[str], *, delay_ms: float | None = None) -> str:
    """A wrk script asking for random topics' routes (seeded, so runs compare). `delay_ms`
    makes each connection pause between requests: 64 connections × 1 request per 7 ms plus the
    answer's time offer about 8,000 req/s, so latency is measured at that load rather than at saturation."""
    names = ",".join(f'"{t}"' for t in topics)
    pause = f"delay = function()\n  return {delay_ms}\nend\n" if delay_ms else ""
    return (f"local topics = {{{names}}}\nmath.randomseed(7)\n{pause}"
            "request = function()\n  return wrk.format('GET', '/topics/' .. topics[math.random(#topics)] .. '/route')\nend\n")


class Etcd:
    """A single-member etcd on 127.0.0.1 with a scratch data directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-etcd-"))
        self.port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "etcd.log", "wb")  # noqa: SIM115  (etcd writes to it until close())
        self.proc = subprocess.Popen([
            require("etcd", "etcd-server"), "--name", "bench", "--data-dir", str(self.dir / "data"),
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"bench=http://127.0.0.1:{peer}", "--log-level", "error"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for_port(self.port, 30)
        self.http = requests.Session()
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.http.get(self.url + "/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not become healthy; see {self.dir / 'etcd.log'}")
            time.sleep(0.2)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(self.url + path, data=json.dumps(body), timeout=10)
        r.raise_for_status()
        answer: dict[str, Any] = r.json()
        return answer

    def put(self, key: str, value: str, lease: str | None = None) -> None:
        body = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = lease
        self.call("/v3/kv/put", body)

    def exists(self, key: str) -> bool:
        return int(self.call("/v3/kv/range", {"key": _b64(key)}).get("count", 0)) > 0

    def grant(self, ttl_s: int) -> str:
        return str(self.call("/v3/lease/grant", {"TTL": ttl_s})["ID"])

    def keepalive(self, lease: str) -> None:
        subprocess.run([require("etcdctl", "etcd-client"), f"--endpoints={self.url}", "lease", "keep-alive", "--once",
                        format(int(lease), "x")], check=True, capture_output=True, timeout=10)

    def range_script(self, keys: list[str]) -> str:
        bodies = ",".join("'" + json.dumps({"key": _b64(k)}) + "'" for k in keys)
        return (f"local bodies = {{{bodies}}}\nmath.randomseed(7)\nwrk.method = 'POST'\n"
                "request = function()\n  return wrk.format('POST', '/v3/kv/range', nil, bodies[math.random(#bodies)])\nend\n")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def etcd_lease_expiry(etcd: Etcd, keys: int, ttl_s: int = 5) -> dict[str, Any]:
    """Same shape as our expiry probe: one lease per key, one keep-alive, then silence."""
    leases = [etcd.grant(ttl_s) for _ in range(keys)]
    for i, lease in enumerate(leases):
        etcd.put(f"/brokers/exp-{i}", "127.0.0.1:1", lease)
    last: dict[int, float] = {}
    for i, lease in enumerate(leases):
        etcd.keepalive(lease)
        last[i] = time.monotonic()  # acknowledged, as our probe takes the heartbeat's acknowledgement
    gone: dict[int, float] = {}
    deadline = time.monotonic() + ttl_s + 60
    while len(gone) < keys and time.monotonic() < deadline:
        for i in range(keys):
            if i not in gone and not etcd.exists(f"/brokers/exp-{i}"):
                gone[i] = time.monotonic()
        time.sleep(0.02)
    over = [gone[i] - last[i] - ttl_s for i in gone]
    return {"p50_s": sorted(over)[len(over) // 2], "max_s": max(over), "n": len(over), "ttl_s": ttl_s}
