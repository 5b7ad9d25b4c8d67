"""Hosts on one machine: Linux network namespaces joined to one bridge by veth pairs.

Each host has its own network stack and one address on a private /24; the bridge carries an
address of the same subnet, so this (the root) namespace reaches every host and nothing else is
routed: no NAT, no default route inside a host, so a host's traffic stays on the bridge. A host is
cut off by taking its bridge-side veth down, and healed by bringing it up again; processes run in
a host with `ip netns exec`.

Names carry a short per-bed tag (interface names are at most 15 bytes) so that beds of
concurrent runs do not collide, and `sweep()` removes whatever a crashed run left behind.
Everything here needs root (CAP_NET_ADMIN); `missing()` says why a bed cannot be made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

NETNS_PREFIX = "nsrv-"  # every namespace a bed makes starts with this (sweep() removes them)
BRIDGE_PREFIX = "nsrvbr"


def missing() -> str | None:
    """Why no bed can be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); run the multi-host tests as root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"{NETNS_PREFIX}probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    _ip("netns", "delete", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces cannot be made here: {made.stderr.strip()[:200]}"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass(frozen=True)
class Host:
    name: str  # what runs there ("kafka-1", "driver", ...)
    netns: str
    addr: str  # its address on the bed's subnet
    link: str  # the bridge-side end of its veth pair (down = cut off)

    def argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host's network namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


@dataclass
class Bed:
    """A bridge and one namespace per host name; `up()` builds, `down()` removes (idempotent)."""

    names: list[str]
    tag: str  # 1-4 characters, unique among live beds
    subnet: int = 77  # hosts are 10.<subnet>.0.<i + 1>, the bridge 10.<subnet>.0.254
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.tag}"

    @property
    def gateway(self) -> str:
        return f"10.{self.subnet}.0.254"

    def up(self) -> Bed:
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        if len(self.names) > 250 or not 1 <= len(self.tag) <= 4:
            raise ValueError("a bed has at most 250 hosts and a tag of 1-4 characters")
        self.down()
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(self.names):
                host = Host(name, f"{NETNS_PREFIX}{self.tag}-{i}", f"10.{self.subnet}.0.{i + 1}",
                            f"nsv{self.tag}{i}")
                inner = f"nsi{self.tag}{i}"
                _ip("netns", "add", host.netns)
                _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", host.netns)
                _ip("link", "set", host.link, "master", self.bridge)
                _ip("link", "set", host.link, "up")
                _ip("-n", host.netns, "addr", "add", f"{host.addr}/24", "dev", inner)
                _ip("-n", host.netns, "link", "set", inner, "up")
                _ip("-n", host.netns, "link", "set", "lo", "up")
                self.hosts[name] = host
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        for i in range(len(self.names)):
            _ip("netns", "delete", f"{NETNS_PREFIX}{self.tag}-{i}", check=False)  # takes its veth pair along
            _ip("link", "delete", f"nsv{self.tag}{i}", check=False)
        _ip("link", "delete", self.bridge, check=False)
        self.hosts.clear()

    def cut(self, name: str) -> None:
        """Cut the host off the bed (its processes keep running; every packet is dropped)."""
        _ip("link", "set", self.hosts[name].link, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].link, "up")

    def cut_between(self, name: str, others: list[str]) -> None:
        """Cut `name` off from `others` only (blackhole routes in its namespace: what it sends them is
        dropped); the rest of the bed, and this machine, still reach it."""
        for other in others:
            _ip("-n", self.hosts[name].netns, "route", "add", "blackhole", f"{self.hosts[other].addr}/32")

    def heal_between(self, name: str, others: list[str]) -> None:
        for other in others:
            _ip("-n", self.hosts[name].netns, "route", "del", "blackhole", f"{self.hosts[other].addr}/32", check=False)

    def describe(self) -> list[str]:
        return [f"{h.name:<12} {h.addr:<14} netns {h.netns}" for h in self.hosts.values()]

    def __enter__(self) -> Bed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()


def namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def sweep() -> list[str]:
    """Remove every namespace and bridge a bed made (a crashed run's); returns what went."""
    gone = [ns for ns in namespaces() if ns.startswith(NETNS_PREFIX)]
    for ns in gone:
        _ip("netns", "delete", ns, check=False)
    links = _ip("-o", "link", "show", check=False).stdout.splitlines()
    for line in links:
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith((BRIDGE_PREFIX, "nsv")):
            _ip("link", "delete", name, check=False)
            gone.append(name)
    return gone
