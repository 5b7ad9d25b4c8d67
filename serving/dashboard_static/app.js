// namesrv-stream dashboard: read-only views over the HTTP API, each at the instant picked in the
// header ("as of"; empty = the served cut). Plain JavaScript, no build step; state lives in the URL
// hash (#/view?asOf=ms) so a view at an instant can be bookmarked and shared.
"use strict";

const PAGE = 100;
const $ = (sel) => document.querySelector(sel);
const state = { view: "clusters", asOf: null, groupOffset: 0, changeOffset: 0, riskOffset: 0, topic: null, range: null };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

async function api(path, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") query.set(k, v);
  const url = query.toString() ? `${path}?${query}` : path;
  const r = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`${r.status} ${body.code || ""}: ${body.remark || r.statusText}`);
  return body;
}

function showError(err) {
  const box = $("#error");
  box.hidden = !err;
  box.textContent = err ? String(err.message || err) : "";
}

// ---------------------------------------------------------------- instants (UTC)

const iso = (ms) => new Date(ms).toISOString().slice(0, 19);          // for datetime-local inputs
const fromInput = (v) => (v ? Date.parse(v.length === 16 ? v + ":00Z" : v + "Z") : null);
const shown = (ms) => (ms === null || ms === undefined ? "-" : new Date(ms).toISOString().replace(".000", ""));

function ago(ms, now) {
  if (ms === null || ms === undefined) return "not live";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  return s < 120 ? `${s} s` : s < 7200 ? `${Math.floor(s / 60)} min` : `${Math.floor(s / 3600)} h`;
}

async function loadRange() {
  const body = await api("/history/snapshots", { limit: 1000 });
  const times = body.snapshots.map((s) => s.commitTime);
  state.range = times.length ? [Math.min(...times), Math.max(...times, Date.now())] : null;
}

function setAsOf(ms, { push = true } = {}) {
  state.asOf = ms;
  $("#as-of").value = ms === null ? "" : iso(ms);
  const slider = $("#as-of-slider");
  if (state.range) {
    const [lo, hi] = state.range;
    slider.value = ms === null ? 1000 : Math.round((1000 * (ms - lo)) / Math.max(1, hi - lo));
  }
  if (push) writeHash();
}

function writeHash() {
  const q = state.asOf === null ? "" : `?asOf=${state.asOf}`;
  const next = `#/${state.view}${q}`;
  if (location.hash !== next) history.replaceState(null, "", next);
  render();
}

function readHash() {
  const m = location.hash.match(/^#\/(\w+)(?:\?asOf=(\d+))?/);
  state.view = m && ["clusters", "topics", "changes", "diff", "risks"].includes(m[1]) ? m[1] : "clusters";
  setAsOf(m && m[2] ? Number(m[2]) : null, { push: false });
}

// ---------------------------------------------------------------- views

function cutLine(body) {
  $("#cut").textContent = body.snapshotId === null ? "no cut yet"
    : `snapshot ${body.snapshotId}, committed ${shown(body.commitTime)}`;
}

// Renders overlap (a keystroke, a click and a new instant each start one), so every render reads
// the state it needs before its first await and paints only if no newer render has started since:
// an older render finishing last must neither paint stale rows nor ask for a route at an instant
// other than the one it checked the topic against.
let latest = 0;
const stale = (gen) => gen !== latest;

async function renderClusters(gen) {
  const asOf = state.asOf;
  const body = await api("/dashboard/api/groups", { q: $("#group-filter").value, offset: state.groupOffset,
                                                    limit: PAGE, asOf });
  if (stale(gen)) return;
  cutLine(body);
  const now = asOf ?? Date.now();
  const rows = body.groups.map((g) => {
    const beats = g.members.map((m) => m.lastUpdateTimestamp).filter((t) => t !== null);
    const newest = beats.length ? Math.max(...beats) : null;
    const timeout = Math.max(...g.members.map((m) => m.heartbeatTimeoutMillis || 0));
    const old = newest === null || now - newest > timeout;
    return el("tr", {},
      el("td", {}, g.cluster),
      el("td", {}, g.brokerName + (g.zoneName ? ` (zone ${g.zoneName})` : "")),
      el("td", {}, g.members.map((m) => `${m.brokerId} → ${m.addr}`).join(", ")),
      el("td", { class: old ? "stale" : "fresh" }, ago(newest, now)));
  });
  $("#groups tbody").replaceChildren(...rows);
  const last = Math.min(body.total, state.groupOffset + PAGE);
  $("#group-count").textContent = `${body.total.toLocaleString("en")} broker group(s) in ${body.clusters} cluster(s)`
    + (body.total ? `; showing ${state.groupOffset + 1}–${last}` : "");
  $("#group-prev").disabled = state.groupOffset === 0;
  $("#group-next").disabled = last >= body.total;
  if (window.__firstPaintMs === undefined) window.__firstPaintMs = performance.now();
}

async function renderTopics(gen) {
  const { asOf, topic } = state;
  const body = await api("/dashboard/api/topics", { q: $("#topic-search").value, limit: 200, asOf });
  if (stale(gen)) return;
  cutLine(body);
  $("#topic-count").textContent = `${body.total.toLocaleString("en")} topic(s)` + (body.total > 200 ? ", first 200" : "");
  $("#topic-list").replaceChildren(...body.topics.map((t) => el("li", {
    class: t === topic ? "selected" : "", onclick: () => { state.topic = t; render(); },
  }, t)));
  const panel = $("#route");
  if (!topic) return;
  const present = body.topics.includes(topic)
    || (await api("/dashboard/api/topics", { exact: topic, asOf })).total === 1;
  if (stale(gen)) return;
  if (!present) {
    panel.replaceChildren(el("h2", {}, topic), el("p", { class: "muted" }, "no route at this instant"));
    return;
  }
  const route = await api(`/topics/${encodeURIComponent(topic)}/route`, { asOf });
  if (stale(gen)) return;
  panel.replaceChildren(
    el("h2", {}, topic),
    el("table", { id: "queue-datas" },
      el("thead", {}, el("tr", {}, ...["broker", "read queues", "write queues", "perm", "sys flag"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...route.queueDatas.map((q) => el("tr", {}, el("td", {}, q.brokerName), el("td", {}, q.readQueueNums),
        el("td", {}, q.writeQueueNums), el("td", {}, q.perm), el("td", {}, q.topicSysFlag))))),
    el("h3", {}, "brokers"),
    el("table", {},
      el("thead", {}, el("tr", {}, ...["cluster", "broker", "id", "address"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...route.brokerDatas.flatMap((b) => Object.entries(b.brokerAddrs).map(([id, addr]) =>
        el("tr", {}, el("td", {}, b.cluster), el("td", {}, b.brokerName), el("td", {}, id), el("td", {}, addr)))))));
}

async function renderChanges(gen) {
  const form = new FormData($("#change-filters"));
  const until = fromInput(form.get("until")) ?? state.asOf;
  const offset = state.changeOffset;
  const since = fromInput(form.get("since")) ?? (until ?? Date.now()) - 3600 * 1000;
  const body = await api("/history/changes", { kind: form.get("kind"), brokerName: form.get("brokerName"),
                                               topic: form.get("topic"), since, until, limit: PAGE,
                                               offset });
  if (stale(gen)) return;
  const items = body.changes.map((c) => el("li", {},
    el("span", { class: "muted" }, `${shown(c.time)} · snapshot ${c.snapshotId} · `),
    el("span", { class: "kind" }, c.kind),
    [c.clusterName, c.brokerName, c.brokerAddr, c.topic, c.namespace && `${c.namespace}/${c.key}`]
      .filter(Boolean).join(" · ")));
  if (offset === 0) $("#timeline").replaceChildren(...items); else $("#timeline").append(...items);
  $("#change-count").textContent = `${body.total.toLocaleString("en")} change(s) from ${shown(since)}`
    + (until ? ` to ${shown(until)}` : "");
  $("#change-more").hidden = !body.next;
}

async function renderDiff(gen) {
  const form = new FormData($("#diff-form"));
  const from = fromInput(form.get("from")), to = fromInput(form.get("to"));
  if (from === null || to === null) { $("#diff").replaceChildren(el("p", { class: "muted" }, "Pick two instants.")); return; }
  const d = await api("/history/diff", { from, to });
  if (stale(gen)) return;
  const parts = [el("p", {}, `snapshot ${d.from.snapshotId} (${shown(d.from.commitTime)}) → snapshot ${d.to.snapshotId} (${shown(d.to.commitTime)})`)];
  for (const section of ["topics", "brokers", "clusters", "kv", "config"]) {
    for (const what of ["added", "removed", "changed"]) {
      const names = Object.keys(d[section][what]);
      if (!names.length) continue;
      parts.push(el("h3", { class: what }, `${section}: ${names.length} ${what}`),
                 el("p", { class: what }, names.slice(0, 200).join(", ") + (names.length > 200 ? " …" : "")));
    }
  }
  if (parts.length === 1) parts.push(el("p", { class: "muted" }, "no change"));
  $("#diff").replaceChildren(...parts);
}

// The risks of the cut at the instant picked (GET /risks answers them by severity, critical first),
// one page at a time, filtered by kind; since is when each began to hold, read from the history
// ("or before": it already held at the oldest cut the server read).
async function renderRisks(gen) {
  const { asOf, riskOffset } = state;
  const kind = $("#risk-kind").value;
  const body = await api("/risks", { kind, offset: riskOffset, limit: PAGE, asOf });
  if (stale(gen)) return;
  cutLine(body);
  const select = $("#risk-kind");
  if (select.options.length === 1) {
    for (const k of Object.keys(body.counts)) select.append(el("option", { value: k }, k));
  }
  for (const option of select.options) {
    if (option.value) option.textContent = `${option.value} (${body.counts[option.value] ?? 0})`;
  }
  $("#risk-summary").replaceChildren(...["critical", "warning", "info"].map((s) =>
    el("span", { class: s }, `${(body.severities[s] ?? 0).toLocaleString("en")} ${s}`)));
  let previous = null;
  const rows = body.risks.map((r) => {
    const subject = r.topic ? `topic ${r.topic}` + (r.brokerName ? ` on ${r.brokerName}` : "")
      : [r.cluster, r.brokerName, r.address].filter(Boolean).join(" · ");
    const since = r.since === null ? "-" : shown(r.since) + (r.sinceAtOrBefore ? " or before" : "");
    const row = el("tr", { class: r.severity !== previous ? "first" : "", "data-id": r.id },
      el("td", { class: r.severity }, r.severity), el("td", {}, r.kind), el("td", {}, subject),
      el("td", { class: "since", title: r.sinceAtOrBefore ? "it already held at the oldest cut read" : "" }, since),
      el("td", {}, r.message));
    previous = r.severity;
    return row;
  });
  $("#risks tbody").replaceChildren(...rows);
  const last = Math.min(body.total, riskOffset + PAGE);
  $("#risk-count").textContent = `${body.total.toLocaleString("en")} risk(s)` + (kind ? ` of kind ${kind}` : "")
    + (body.total ? `; showing ${riskOffset + 1}–${last}` : "");
  $("#risk-prev").disabled = riskOffset === 0;
  $("#risk-next").disabled = last >= body.total;
  const note = $("#risk-history");
  note.hidden = body.historyComplete;
  note.textContent = body.historyComplete ? ""
    : "The server is still reading the history: since is the served cut's time for now.";
}

const RENDER = { clusters: renderClusters, topics: renderTopics, changes: renderChanges, diff: renderDiff,
                 risks: renderRisks };

function render() {
  for (const v of Object.keys(RENDER)) $(`#view-${v}`).hidden = v !== state.view;
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.view === state.view));
  showError(null);
  const gen = ++latest;
  return RENDER[state.view](gen).catch((err) => { if (!stale(gen)) showError(err); });
}

function debounce(fn, ms) {
  let t = null;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}

window.addEventListener("hashchange", () => { readHash(); render(); });
document.querySelectorAll("nav a").forEach((a) => a.addEventListener("click", (e) => {
  e.preventDefault();  // switching views keeps the instant picked
  state.view = a.dataset.view;
  writeHash();
}));
$("#as-of").addEventListener("change", (e) => setAsOf(fromInput(e.target.value)));
$("#now").addEventListener("click", () => setAsOf(null));
$("#as-of-slider").addEventListener("input", debounce((e) => {
  if (!state.range) return;
  const [lo, hi] = state.range, v = Number(e.target.value);
  setAsOf(v >= 1000 ? null : Math.round(lo + ((hi - lo) * v) / 1000));
}, 150));
$("#group-filter").addEventListener("input", debounce(() => { state.groupOffset = 0; render(); }, 200));
$("#group-prev").addEventListener("click", () => { state.groupOffset = Math.max(0, state.groupOffset - PAGE); render(); });
$("#group-next").addEventListener("click", () => { state.groupOffset += PAGE; render(); });
$("#topic-search").addEventListener("input", debounce(() => render(), 200));
$("#change-filters").addEventListener("submit", (e) => { e.preventDefault(); state.changeOffset = 0; render(); });
$("#change-more").addEventListener("click", () => { state.changeOffset += PAGE; render(); });
$("#diff-form").addEventListener("submit", (e) => { e.preventDefault(); render(); });
$("#risk-kind").addEventListener("change", () => { state.riskOffset = 0; render(); });
$("#risk-prev").addEventListener("click", () => { state.riskOffset = Math.max(0, state.riskOffset - PAGE); render(); });
$("#risk-next").addEventListener("click", () => { state.riskOffset += PAGE; render(); });

readHash();
render();
loadRange().then(() => setAsOf(state.asOf, { push: false })).catch(showError);
