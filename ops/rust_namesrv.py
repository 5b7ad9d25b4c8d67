"""rocketmq-rust's NameServer (crates.io `rocketmq-namesrv`), the third peer of the remoting
bench: built once with cargo into .rust/ (about 18 minutes on 2 cores, so only the bench asks for
it, never set-up or the tests), started on a free loopback port with its files in a temp home.

It speaks RocketMQ's remoting protocol as 5.x does, with two strictures of its own (seen on the
wire): a JSON header must carry `serializeTypeCurrentRPC`, and a RegisterBrokerBody must have the
whole 5.x shape (attributes, stateVersion, the static-topic maps); our client sends both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from ops.net import free_port, wait_for_port
from ops.rocketmq_software import JavaProcess, spawn

# 1.0.0: the newest on crates.io (2026-11); it needs rustc 1.95 or later, which this machine has
VERSION = "1.0.0"
ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".rust" / f"rocketmq-namesrv-{VERSION}"
BINARY = HOME / "bin" / "rocketmq-namesrv-rust"


def cargo() -> str | None:
    found = shutil.which("cargo")
    home_cargo = Path.home() / ".cargo" / "bin" / "cargo"
    return found or (str(home_cargo) if home_cargo.exists() else None)


def ensure(*, log: Callable[[str], None] = print) -> Path | str:
    """The binary, built if missing; or why it cannot be had (a sentence for BENCHMARKS.md)."""
    if BINARY.exists():
        return BINARY
    exe = cargo()
    if exe is None:
        return "cargo is not installed here, so rocketmq-rust's NameServer cannot be built"
    HOME.parent.mkdir(parents=True, exist_ok=True)
    build_log = HOME.parent / f"rocketmq-namesrv-{VERSION}.build.log"
    log(f"building rocketmq-rust's NameServer {VERSION} with cargo (once; about 18 minutes on 2 cores; "
        f"log: {build_log})")
    with tempfile.TemporaryDirectory(prefix="rocketmq-rust-target-") as target, open(build_log, "wb") as out:
        done = subprocess.run([exe, "install", "--locked", "--root", str(HOME), "rocketmq-namesrv",
                               "--version", VERSION], stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "CARGO_TARGET_DIR": target})
    if done.returncode != 0 or not BINARY.exists():
        tail = build_log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"`cargo install rocketmq-namesrv --version {VERSION}` failed here: {tail[0][:200]}"
    return BINARY


def start(binary: Path, *, timeout_s: float = 30.0) -> JavaProcess:
    """Its NameServer on 127.0.0.1 (free port); `cleanup()` kills it and removes its home."""
    home = Path(tempfile.mkdtemp(prefix="rmq-rust-namesrv-"))
    port = free_port()
    p = spawn("rust-namesrv", [str(binary), "--listenPort", str(port), "--bindAddress", "127.0.0.1",
                               "--rocketmqHome", str(home), "--kvConfigPath", str(home / "kvConfig.json")], home)
    p.addr, p.extra = f"127.0.0.1:{port}", {"version": VERSION}
    try:
        wait_for_port(port, timeout_s)
        if not p.alive():
            raise RuntimeError(f"rocketmq-rust's NameServer exited: {p.log_text()[-2000:]}")
    except BaseException:
        p.cleanup()
        raise
    return p
