"""docs/deploy-topology.png is drawn from the bed's one description (ops/cluster.TOPOLOGY) and
carries it; a picture drawn from another description is stale (`./run.sh cluster draw`)."""

from __future__ import annotations

import struct

from ops import cluster


def _png_text(data: bytes) -> dict[str, str]:
    out, i = {}, 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        if data[i + 4:i + 8] == b"tEXt":
            key, _, value = data[i + 8:i + 8 + n].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        i += 12 + n
    return out


def test_the_topology_picture_shows_the_bed_as_described():
    assert _png_text(cluster.PICTURE.read_bytes()).get("Description") == cluster.description(), \
        "docs/deploy-topology.png is stale: run ./run.sh cluster draw"


def test_a_drawn_picture_carries_its_description(tmp_path):
    path = cluster.draw(tmp_path / "t.png")
    assert _png_text(path.read_bytes())["Description"] == cluster.description()
