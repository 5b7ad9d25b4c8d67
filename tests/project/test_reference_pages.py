"""The generated reference pages (docgen) are what their sources say today: a page that differs
from its regeneration is stale (`python -m docgen` rewrites them)."""

from __future__ import annotations

import pytest

import docgen


@pytest.mark.parametrize("name", sorted(docgen.PAGES))
def test_a_reference_page_matches_its_source(name):
    page = docgen.DIRECTORY / name
    assert page.is_file(), f"{page} is missing: run python -m docgen"
    assert page.read_text() == docgen.PAGES[name](), f"{page} is stale: run python -m docgen"


def test_every_request_code_and_metric_family_is_on_its_page():
    from remoting.codes import REQUEST_CODES
    codes_page = docgen.remoting_page()
    assert all(f"| {code} |" in codes_page for code in REQUEST_CODES)
    assert "| ? |" not in codes_page  # every code is read, liveness or write


def test_the_data_flow_picture_shows_the_stages_as_declared():
    assert docgen.png_description(docgen.DATA_FLOW_PICTURE) == docgen.data_flow_description(), \
        "docs/dataflow.png is stale: run python -m docgen"


def test_the_watch_picture_shows_the_story_as_declared():
    assert docgen.png_description(docgen.WATCH_PICTURE) == docgen.watch_story_description(), \
        "docs/img/watch-stream.png is stale: run python -m docgen"
