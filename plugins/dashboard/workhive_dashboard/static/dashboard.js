// The dashboard page: polls the JSON API and renders it. Every value from the
// hive goes in through textContent, never as HTML.
"use strict";

const CSRF = document.querySelector('meta[name="workhive-csrf"]').content;
const REFRESH_MS = Number(document.querySelector('meta[name="workhive-refresh-ms"]').content) || 2000;
let selectedPool = null;

const $ = (id) => document.getElementById(id);

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  if (seconds < 1) return seconds.toFixed(1) + "s";
  if (seconds < 60) return Math.round(seconds) + "s";
  const m = Math.floor(seconds / 60);
  if (m < 60) return m + "m" + String(Math.floor(seconds % 60)).padStart(2, "0") + "s";
  return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
}

function cell(row, value, cls) {
  const td = row.insertCell();
  td.textContent = value === null || value === undefined ? "-" : String(value);
  if (cls) td.className = cls;
  return td;
}

function fill(tableId, rows, render) {
  const body = $(tableId).tBodies[0];
  const fresh = document.createElement("tbody");
  for (const r of rows) render(fresh.insertRow(), r);
  body.replaceWith(fresh);
}

function banner(message) {
  const b = $("banner");
  b.hidden = !message;
  b.textContent = message || "";
}

function notice(message) {
  const n = $("notice");
  n.hidden = !message;
  n.textContent = message || "";
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  let body = null;
  try { body = await response.json(); } catch (e) { body = { error: "unreadable answer (HTTP " + response.status + ")" }; }
  if (!response.ok) throw new Error((body && body.error) || "HTTP " + response.status);
  return body;
}

function post(path, payload) {
  return api(path, {
    method: "POST",
    headers: { "content-type": "application/json", "x-workhive-csrf": CSRF },
    body: JSON.stringify(payload),
  });
}

function confirmAction(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

function renderOverview(data) {
  fill("pools", data.pools, (row, p) => {
    row.className = "pool";
    row.dataset.pool = p.pool;
    cell(row, p.pool);
    for (const k of ["pending", "delayed", "claimed", "done"]) cell(row, p[k], "num");
    cell(row, p.poisoned, "num" + (p.poisoned ? " poisoned" : ""));
    cell(row, p.cancelled, "num");
    cell(row, p.done_per_second === null ? "-" : p.done_per_second.toFixed(1), "num");
    cell(row, age(p.oldest_pending_age), "num");
    row.addEventListener("click", () => selectPool(p.pool));
  });
  // One row per group of every pool that uses groups (the figures of `workhive group list`).
  const groups = [];
  for (const p of data.pools) for (const g of (p.groups ? p.groups.groups : [])) groups.push([p.pool, g]);
  $("groups-section").hidden = groups.length === 0;
  fill("groups", groups, (row, [pool, g]) => {
    cell(row, pool);
    cell(row, g.group === null ? "(ungrouped)" : g.group);
    cell(row, g.weight, "num");
    cell(row, g.in_flight + (g.effective_limit === null ? "" : " / " + g.effective_limit), "num");
    cell(row, g.ready, "num");
    cell(row, g.waiting, "num");
    cell(row, g.paused_for === null ? "-" : age(g.paused_for), "num");
    cell(row, g.tpd === null ? "-" : Math.round(g.spent).toLocaleString() + " / " + g.tpd.toLocaleString(), "num");
  });
  $("no-credentials").hidden = data.credentials.length > 0;
  fill("credentials", data.credentials, (row, c) => {
    cell(row, c.name);
    cell(row, c.state, "state-" + c.state);
    cell(row, c.cooldown_remaining === null ? "-" : age(c.cooldown_remaining), "num");
    cell(row, c.learned_rpm === undefined ? "-" : c.learned_rpm + "/min", "num");
    cell(row, c.reason);
  });
  const wc = data.worker_counts;
  $("worker-counts").textContent =
    `${wc.active} active, ${wc.stale} stale, ${wc.lost} lost, ${wc.stopped} stopped` +
    (data.workers_total > data.workers.length ? ` (showing ${data.workers.length} of ${data.workers_total})` : "");
  fill("workers", data.workers, (row, w) => {
    cell(row, w.worker_id);
    cell(row, w.health, "health-" + w.health);
    cell(row, w.status);
    cell(row, w.host);
    cell(row, w.pid, "num");
    cell(row, age(w.heartbeat_age) + " ago", "num");
    cell(row, w.pools.join(", "));
  });
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  // For bench/dashboard.py: navigation start → the first data on screen.
  if (!performance.getEntriesByName("workhive-first-render").length) performance.mark("workhive-first-render");
}

async function refreshDead() {
  if (selectedPool === null) return;
  const data = await api(`/api/pools/${encodeURIComponent(selectedPool)}/dead?limit=50`);
  $("dead-section").hidden = false;
  $("dead-pool").textContent = data.pool;
  $("dead-total").textContent = `(${data.total})`;
  fill("dead", data.items, (row, item) => {
    const idCell = cell(row, item.id, "item-link");
    idCell.addEventListener("click", () => showItem(data.pool, item.id));
    cell(row, `${item.attempts}/${item.max_attempts}`, "num");
    cell(row, age(item.age), "num");
    cell(row, item.error, "error");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "Requeue…";
    button.className = "requeue";
    button.dataset.item = item.id;
    button.addEventListener("click", () => requeue(data.pool, item.id));
    row.insertCell().appendChild(button);
  });
}

async function showItem(pool, id) {
  try {
    const item = await api(`/api/pools/${encodeURIComponent(pool)}/items/${encodeURIComponent(id)}`);
    const dl = document.createElement("dl");
    dl.id = "item";
    for (const key of ["state", "attempts", "max_attempts", "token", "priority", "claimed_by", "dedup_key",
                       "releases", "error", "data", "result", "progress", "trace"]) {
      const dt = document.createElement("dt");
      dt.textContent = key;
      const dd = document.createElement("dd");
      dd.textContent = item[key] === null || item[key] === undefined ? "-" : String(item[key]);
      dl.append(dt, dd);
    }
    if (item.steps) {  // durable steps (ctx.step), in the order they were stored; text only, never HTML
      const dt = document.createElement("dt");
      dt.textContent = "steps";
      const dd = document.createElement("dd");
      if (!item.steps.length) dd.textContent = "-";
      const list = document.createElement("ol");
      list.className = "steps";
      for (const step of item.steps) {
        const li = document.createElement("li");
        const value = step.value.length > 300 ? step.value.slice(0, 299) + "…" : step.value;
        li.textContent = `${step.key} (claim ${step.token})${step.failed ? " failed permanently" : ""}: ${value}`;
        list.append(li);
      }
      if (item.steps.length) dd.append(list);
      dl.append(dt, dd);
    }
    $("item").replaceWith(dl);
    $("item-id").textContent = item.id;
    $("item-section").hidden = false;
  } catch (e) { notice(e.message); }
}

async function requeue(pool, id) {
  if (!(await confirmAction(`Requeue item ${id} of pool ${pool}? It gets fresh attempts and runs again.`))) return;
  try {
    const result = await post(`/api/pools/${encodeURIComponent(pool)}/requeue`, { ids: [id] });
    notice(`requeued ${result.requeued} item(s) of ${pool}`);
  } catch (e) { notice(e.message); }
  await tick();
}

async function purge() {
  const older = Number($("purge-age").value);
  if (!Number.isFinite(older) || older < 0) { notice("purge age must be a number of seconds, 0 or more"); return; }
  if (!(await confirmAction(`Delete done and poisoned items of ${selectedPool} finished more than ${older} s ago?`))) return;
  try {
    const result = await post(`/api/pools/${encodeURIComponent(selectedPool)}/purge`, { older_than: older });
    notice(`purged ${result.purged} item(s) of ${selectedPool}`);
  } catch (e) { notice(e.message); }
  await tick();
}

function selectPool(pool) {
  selectedPool = pool;
  refreshDead().catch((e) => banner(e.message));
}

async function tick() {
  try {
    renderOverview(await api("/api/overview"));
    await refreshCharts();
    await refreshDead();
    banner("");
  } catch (e) {
    banner(e.message);
  }
}

// -- charts (uPlot, served from /static/uplot.min.js) -------------------------------------------
// Each chart is one uPlot instance: x is the sample time, one series per line. Kept in
// window.workhiveCharts by element id, so a test can read what is plotted (chart.data).
const charts = {};
window.workhiveCharts = charts;
const PALETTE = ["#1f6feb", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a7d8c", "#57606a"];
const POOL_CHARTS = { "chart-done": "done_per_s", "chart-failed": "failed_per_s", "chart-depth": "depth",
                      "chart-oldest": "oldest_pending_age" };
const KEY_CHARTS = { "chart-calls": "calls_per_s", "chart-429": "rate_limited_per_s", "chart-budget": "budget_use" };

function plot(id, labels, columns) {
  const el = $(id);
  const existing = charts[id];
  const same = existing && existing.series.length === labels.length + 1 &&
    labels.every((label, i) => existing.series[i + 1].label === label);
  const data = [columns.t, ...columns.values];
  if (same) { existing.setData(data); return; }
  if (existing) existing.destroy();
  const width = Math.max(260, el.clientWidth || 300);
  charts[id] = new uPlot({
    width, height: 160,
    legend: { show: labels.length > 1 },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true } },
    axes: [{ size: 30 }, { size: 50 }],
    series: [{}, ...labels.map((label, i) => ({ label, stroke: PALETTE[i % PALETTE.length], width: 1.5,
                                                 spanGaps: false, points: { show: false } }))],
  }, data, el);
}

function renderHistory(h) {
  const scope = $("chart-scope");
  const pools = Object.keys(h.pools);
  const offered = Array.from(scope.options).slice(1).map((o) => o.value);
  if (offered.join("\n") !== pools.join("\n")) {
    const chosen = scope.value;
    while (scope.options.length > 1) scope.remove(1);
    for (const name of pools) {
      const option = document.createElement("option");
      option.value = name;
      option.textContent = "pool " + name;
      scope.append(option);
    }
    scope.value = pools.includes(chosen) ? chosen : "";
  }
  const shown = scope.value ? h.pools[scope.value] : h.hive;
  const label = scope.value || "hive";
  for (const [id, key] of Object.entries(POOL_CHARTS)) {
    if (shown) plot(id, [label], { t: h.t, values: [shown[key]] });
  }
  const keys = Object.keys(h.credentials);
  $("no-key-charts").hidden = keys.length > 0;
  $("key-charts").hidden = keys.length === 0;
  if (keys.length) {
    for (const [id, key] of Object.entries(KEY_CHARTS)) {
      plot(id, keys, { t: h.t, values: keys.map((k) => h.credentials[k][key]) });
    }
  }
}

let lastHistory = null;
async function refreshCharts() {
  lastHistory = await api("/api/history");
  renderHistory(lastHistory);
}

$("chart-scope").addEventListener("change", () => { if (lastHistory) renderHistory(lastHistory); });
$("purge").addEventListener("click", purge);
tick();
setInterval(tick, REFRESH_MS);
