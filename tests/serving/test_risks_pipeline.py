"""Issue 39: every risk kind appears and clears on a real pipeline (Tansu, Spark, Delta, the HTTP
server on 127.0.0.1), `?asOf=` answers a past cut, bad input is a 400, and the dashboard's Risks
page shows a real risk in headless chromium and filters by kind.

One pipeline for the module. The flapping and DataVersion kinds are read over a window of time
(a day by default); the server here reads them over WINDOW_MS with a flap threshold of 1, so two
expiries of a 1-second broker make it flap and both kinds clear within the test.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from routeinfo.risks import KINDS, Settings
from schemas import events as ev
from serving import lifecycle
from serving.app import create_app
from serving.risks import EXTENSION
from tests.harness import Pipeline
from tests.helpers import reg, topics
from tests.serving.test_dashboard import CHROMIUM, CHROMIUM_ARGS, SHOTS

pytestmark = pytest.mark.integration
WINDOW_MS = 12_000
SETTINGS = Settings(flap_threshold=1, window_ms=WINDOW_MS)
C = "RiskCluster"
A0, A1, B0, B1, C0, C1, F0 = ("127.0.0.1:26911", "127.0.0.1:26912", "127.0.0.1:26921", "127.0.0.1:26922",
                              "127.0.0.1:26931", "127.0.0.1:26932", "127.0.0.1:26941")
TOPICS = {"ra": ("RiskShared", "RiskBase", "RiskWide"), "rb": ("RiskShared", "RiskSolo", "RiskBase"),
          "rc": ("RiskBase", "RiskWide")}


def broker(name: str, bid: int, addr: str, *, counter: int = 5, zone: str = "z1", extra: tuple[str, ...] = (),
           timeout_ms: int | None = None) -> dict[str, Any]:
    return reg(name, bid, addr, tps=topics(*TOPICS.get(name, ()), *extra), cluster=C, counter=counter, zone=zone,
               timeout_ms=timeout_ms)


@pytest.fixture(scope="module")
def pipe(spark, kafka_bootstrap, tmp_path_factory):
    """The job, and the HTTP server over its warehouse with the test's window (the Pipeline's own
    server, but its risk service told the window before it starts)."""
    from waitress import create_server
    p = Pipeline(spark, kafka_bootstrap, tmp_path_factory.mktemp("risks")).start_job()
    app = create_app(p.cfg)
    app.extensions[EXTENSION].settings = SETTINGS
    server = None
    try:
        with lifecycle.running(app):
            server = create_server(app, host="127.0.0.1", port=0, threads=4)
            threading.Thread(target=server.run, daemon=True).start()
            p.url = f"http://127.0.0.1:{server.effective_port}"
            yield p
    finally:
        if server is not None:
            server.close()
        p.close()


def risks(p: Pipeline, query: str = "") -> dict[str, Any]:
    status, body = p.get("/risks" + query)
    assert status == 200, body
    return body


def served_risks(p: Pipeline, coords: list[tuple[int, int]]) -> dict[str, Any]:
    """The risks of a cut that includes the events at `coords`, once the history is folded."""
    p.wait_served(coords)
    return p.wait_for(lambda: (lambda b: b if b["historyComplete"] else None)(risks(p)), 30, "the risk history")


def expire_f(p: Pipeline) -> None:
    """Broker group rf (a master with a 1-second timeout) registers, and expires."""
    p.wait_served(p.publish([broker("rf", 0, F0, extra=("RiskFlap", "RiskFlapBase"), zone="zf", timeout_ms=1000)]))
    p.wait_for(lambda: p.get("/topics/RiskFlap/route")[0] == 404, 30, "rf to expire")


@pytest.fixture(scope="module")
def appeared(pipe) -> dict[str, Any]:
    """Every kind made to appear: rf flaps, a's slave goes back a DataVersion, c is wiped; b is a
    master alone with a topic of its own, and a and b are in one zone."""
    p = pipe
    # the fleet first: once it is served the job runs, so rf's expiries come a timeout after its
    # registrations (a job still starting would read a registration already a window old)
    p.wait_served(p.publish([broker("ra", 0, A0), broker("ra", 1, A1), broker("rb", 0, B0),
                             broker("rc", 0, C0, zone="z2"), broker("rc", 1, C1, zone="z2")]), timeout=90)
    expire_f(p)
    first_expiry = time.time()
    expire_f(p)
    stepped = time.time()
    coords = p.publish([broker("ra", 1, A1, counter=3), ev.wipe_write_perm_event("rc")])
    body = served_risks(p, coords)
    return {"body": body, "first_expiry": first_expiry, "stepped": stepped}


def test_each_kind_appears(appeared):
    body = appeared["body"]
    assert {k.name for k in KINDS} == {r["kind"] for r in body["risks"]}, body["risks"]
    ids = {r["id"] for r in body["risks"]}
    assert {"write-perm-wiped:rc", "single-group-topic:RiskSolo", "no-live-slave:rb", "single-zone-topic:RiskShared",
            f"flapping-broker:{C}/{F0}", f"data-version-backwards:{C}/ra/{A1}"} <= ids
    assert body["risks"][0]["severity"] == "critical"  # by severity, critical first
    step = next(r for r in body["risks"] if r["kind"] == "data-version-backwards")
    assert step["since"] == body["commitTime"] and not step["sinceAtOrBefore"]
    assert "counter 5" in step["message"] and "counter 3" in step["message"]
    flap = next(r for r in body["risks"] if r["kind"] == "flapping-broker")
    assert "2 times" in flap["message"] and flap["since"] <= body["commitTime"]


def test_risks_page_in_headless_chromium(pipe, appeared):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (./run.sh test installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 700})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("response", lambda r: errors.append(f"HTTP {r.status} for {r.url}") if r.status >= 400 else None)
            page.goto(pipe.url + "/dashboard#/risks")
            page.wait_for_selector("#risks tbody tr[data-id='write-perm-wiped:rc']")
            first = page.locator("#risks tbody tr").first
            assert first.locator("td").first.inner_text() == "critical"
            assert "no queue of broker group rc has write permission" in first.inner_text()
            assert page.locator("#risks tbody tr").count() == appeared["body"]["total"]
            assert "1 critical" in page.inner_text("#risk-summary")
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "risks.png"))
            page.select_option("#risk-kind", "no-live-slave")
            page.wait_for_function("document.querySelector('#risk-count').textContent.includes('of kind no-live-slave')")
            kinds = set(page.locator("#risks tbody td:nth-child(2)").all_inner_texts())
            assert kinds == {"no-live-slave"}
            assert page.locator("#risks tbody tr[data-id='no-live-slave:rb']").count() == 1
        finally:
            browser.close()
    assert not errors, errors


def test_each_kind_clears_and_as_of_answers_the_past(pipe, appeared):
    p = pipe
    before = appeared["body"]
    coords = p.publish([broker("rb", 1, B1),  # b gets a slave
                        # c registers again with a new DataVersion (its permissions back) and two more topics
                        broker("rc", 0, C0, counter=6, zone="z2", extra=("RiskShared", "RiskSolo"))])
    body = served_risks(p, coords)
    gone = {"write-perm-wiped:rc", "single-group-topic:RiskSolo", "no-live-slave:rb", "single-zone-topic:RiskShared"}
    assert not gone & {r["id"] for r in body["risks"]}, body["risks"]
    # the two windowed kinds clear once their window has passed: at the next cut after it
    wait_until = max(appeared["first_expiry"], appeared["stepped"]) + WINDOW_MS / 1000

    def cleared() -> dict[str, Any] | None:
        if time.time() > wait_until:
            p.wait_served(p.publish([ev.put_kv_event("RiskNs", "tick", str(time.time()))]))
        answer = risks(p)
        return answer if answer["total"] == 0 else None
    body = p.wait_for(cleared, WINDOW_MS / 1000 + 40, "every risk to clear")
    assert body["counts"] == {k.name: 0 for k in KINDS}
    metrics = requests.get(p.url + "/metrics", timeout=30).text
    assert 'namesrv_risks{kind="flapping-broker",severity="warning"} 0.0' in metrics

    past = risks(p, f"?asOf={before['commitTime']}")
    assert past["snapshotId"] == before["snapshotId"]
    assert {r["id"] for r in past["risks"]} == {r["id"] for r in before["risks"]}
    # the risks that began at one known cut (the served cuts' report and the history's agree on them;
    # a cut the server skipped could move the others' since)
    began = {"write-perm-wiped:rc", f"flapping-broker:{C}/{F0}", f"data-version-backwards:{C}/ra/{A1}"}
    since = {r["id"]: r["since"] for r in before["risks"] if r["id"] in began}
    assert {r["id"]: r["since"] for r in past["risks"] if r["id"] in began} == since and len(since) == 3
    assert not any(r["sinceAtOrBefore"] for r in past["risks"])  # the history read begins at the first cut
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(before["commitTime"] / 1000)) + \
        f".{before['commitTime'] % 1000:03d}Z"
    assert risks(p, f"?asOf={iso}&kind=flapping-broker")["risks"] == \
        [r for r in past["risks"] if r["kind"] == "flapping-broker"]


@pytest.mark.parametrize("query, code", [("?kind=spof", 400), ("?severity=high", 400), ("?limit=5000", 400),
                                         ("?asOf=last-tuesday", 400), ("?asOf=1", 404)])
def test_bad_input_over_http(pipe, query, code):
    status, body = pipe.get("/risks" + query)
    assert status == code and body["code"] == ("INVALID_PARAMETER" if code == 400 else "SNAPSHOT_NOT_FOUND"), body
