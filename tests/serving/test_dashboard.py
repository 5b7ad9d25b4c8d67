"""Issue 14: the web dashboard in a real browser (Debian's chromium, driven by Playwright through
its executable path), over a warehouse of 10,000 broker groups written by the real sink.

Screenshots of every page are written to build/screenshots/ for a person to look at.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from pathlib import Path

import pytest
import requests

from conf import load_config
from ops.net import free_port
from schemas import events as ev
from tests.delta_history import SinkDriver
from tests.helpers import reg, topics

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps calling Google's hosts, which this
# machine refuses; a fresh profile per run.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
GROUPS = 10_000


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """A warehouse with two cuts — 10,000 groups, then a new topic on five of them and one group
    gone — served by the HTTP app on 127.0.0.1."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (./run.sh test installs it: apt-get install chromium)")
    data = tmp_path_factory.mktemp("dashboard")
    d = SinkDriver(data / "delta")
    now = int(time.time() * 1000)
    d.run_batch([reg(f"dash-{g}", 0, f"10.{g // 250 % 250}.{g % 250}.1:10911", cluster=f"DashCluster{g % 3}",
                     tps=topics(f"DashTopic-{g}", "DashBase")) for g in range(GROUPS)], now)
    time.sleep(2.1)  # the two cuts' commit times lie seconds apart, so an instant between them exists
    d.run_batch([reg(f"dash-{g}", 0, f"10.{g // 250 % 250}.{g % 250}.1:10911", cluster=f"DashCluster{g % 3}",
                     counter=2, tps=topics(f"DashTopic-{g}", "DashBase", "DashNew")) for g in range(5)]
                + [ev.unregister_broker_event(cluster=f"DashCluster{(GROUPS - 1) % 3}", broker_name=f"dash-{GROUPS - 1}",
                                              broker_id=0, addr=f"10.{(GROUPS - 1) // 250 % 250}.{(GROUPS - 1) % 250}.1:10911")],
                now + 2100)
    from waitress import create_server

    from serving import lifecycle
    from serving.app import create_app
    cfg = load_config({"NAMESRV_DATA_DIR": str(data), "NAMESRV_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"})
    with lifecycle.running(create_app(cfg)) as app:
        server = create_server(app, host="127.0.0.1", port=0, threads=4)
        threading.Thread(target=server.run, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.effective_port}"
            cuts = requests.get(url + "/history/snapshots", timeout=10).json()["snapshots"]
            first = min(c["commitTime"] for c in cuts)
            between = math.ceil(first / 1000) * 1000  # whole seconds (what the instant picker sets)
            assert between < max(c["commitTime"] for c in cuts)
            SHOTS.mkdir(parents=True, exist_ok=True)
            yield url, between
        finally:
            server.close()


def utc_input(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000))


def test_dashboard_in_headless_chromium(dashboard, figures):
    from playwright.sync_api import sync_playwright
    url, between = dashboard
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)

            # clusters: one page of 10,000 groups, painted fast
            page.goto(url + "/dashboard#/clusters")
            page.wait_for_function("window.__firstPaintMs !== undefined", timeout=15_000)
            first_paint = page.evaluate("window.__firstPaintMs")
            assert page.locator("#groups tbody tr").count() == 100
            assert "9,999 broker group(s) in 3 cluster(s)" in page.inner_text("#group-count")
            page.screenshot(path=str(SHOTS / "clusters.png"), full_page=False)
            page.fill("#group-filter", "dash-42")
            page.wait_for_function("document.querySelector('#group-count').textContent.startsWith('111 broker')")
            page.click("#now")  # re-render clears nothing the filter set; back to the served cut
            page.fill("#group-filter", "")

            # topics: search finds a topic, its route is shown
            page.click("nav a[data-view=topics]")
            page.fill("#topic-search", "DashNew")
            page.wait_for_selector("#topic-list li:text-is('DashNew')")
            page.click("#topic-list li:text-is('DashNew')")
            page.wait_for_selector("#queue-datas tbody tr")
            assert sorted(page.locator("#queue-datas tbody td:first-child").all_inner_texts()) == \
                [f"dash-{g}" for g in range(5)]
            page.screenshot(path=str(SHOTS / "topic-route.png"))

            # moving the instant back: the topic did not exist, the group had not left. The click
            # starts a render at the served cut that is still in flight when the instant moves: it
            # must neither ask for the route at the new instant (a 404) nor paint over the newer one.
            page.click("#topic-list li:text-is('DashNew')")
            page.fill("#as-of", utc_input(between))
            page.dispatch_event("#as-of", "change")
            page.wait_for_selector("#route :text('no route at this instant')")
            page.wait_for_timeout(500)
            assert page.locator("#queue-datas").count() == 0
            assert page.locator("#topic-list li").count() == 0
            assert f"asOf={between}" in page.url
            page.screenshot(path=str(SHOTS / "topic-as-of.png"))
            page.click("nav a[data-view=clusters]")
            page.wait_for_function("document.querySelector('#group-count').textContent.startsWith('10,000 broker')")
            page.screenshot(path=str(SHOTS / "clusters-as-of.png"))
            page.click("#now")
            page.wait_for_function("document.querySelector('#group-count').textContent.startsWith('9,999 broker')")

            # the change log as a timeline, filtered
            page.click("nav a[data-view=changes]")
            page.select_option("#change-filters select[name=kind]", "BROKER_UNREGISTERED")
            page.click("#change-filters button[type=submit]")
            page.wait_for_selector(f"#timeline li:has-text('dash-{GROUPS - 1}')")
            assert page.locator("#timeline li").count() == 1
            page.screenshot(path=str(SHOTS / "changes.png"))

            # the diff between two instants
            page.click("nav a[data-view=diff]")
            page.fill("#diff-form input[name=from]", utc_input(between))
            page.fill("#diff-form input[name=to]", utc_input(int(time.time() * 1000) + 1000))
            page.click("#diff-form button[type=submit]")
            page.wait_for_selector("#diff h3.added")
            text = page.inner_text("#diff")
            assert "topics: 1 added" in text and "DashNew" in text and "brokers: 1 removed" in text
            page.screenshot(path=str(SHOTS / "diff.png"))
        finally:
            browser.close()
    figures(f"dashboard (headless chromium, {GROUPS:,} broker groups): first paint of the clusters page "
            f"{first_paint:.0f} ms after navigation; screenshots in {SHOTS.relative_to(ROOT)}/")
    assert not errors, errors
    assert first_paint < 1000, f"first paint {first_paint:.0f} ms"
