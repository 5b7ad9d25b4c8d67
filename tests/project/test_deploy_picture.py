"""docs/deploy-topology.png is drawn from the bed's one description (ops/cluster.TOPOLOGY) and
carries it; a picture drawn from another description is stale (`./run.sh cluster draw`)."""

from __future__ import annotations

from docgen import png_description
from ops import cluster


def test_the_topology_picture_shows_the_bed_as_described():
    assert png_description(cluster.PICTURE) == cluster.description(), \
        "docs/deploy-topology.png is stale: run ./run.sh cluster draw"


def test_a_drawn_picture_carries_its_description(tmp_path):
    assert png_description(cluster.draw(tmp_path / "t.png")) == cluster.description()
