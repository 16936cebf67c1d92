// The dashboard: runs per day stacked by status (the daily report, kept as runs end, so it is
// cheap with millions of runs), the success ratio, what runs now, what failed in the last 24 h,
// the live workers per group, and the scheduler's health (admins, shards, publication lateness).

import { api, query } from "./api.js";
import { badge, h, show, table, time } from "./ui.js";

/** Statuses in the order they stack, bottom up, with their colour. */
const STACK = [
  ["succeeded", "#2e9d57"],
  ["failed", "#d64535"],
  ["timed_out", "#a8322a"],
  ["lost", "#7d1f19"],
  ["cancelled", "#e0a13a"],
  ["discarded", "#c9b27a"],
  ["misfired", "#8d6e63"],
];
const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function isoDay(d) {
  return d.toISOString().slice(0, 10);
}

/** A stacked bar chart of `days` ([{day, by_status}]) from `from` to `to`, every day shown. */
function chart(report) {
  const days = [];
  for (let d = new Date(`${report.from}T00:00:00Z`); isoDay(d) <= report.to; d.setUTCDate(d.getUTCDate() + 1)) days.push(isoDay(d));
  const byDay = new Map(report.days.map((d) => [d.day, d.by_status]));
  const totals = days.map((d) => Object.values(byDay.get(d) || {}).reduce((a, b) => a + b, 0));
  const max = Math.max(1, ...totals);
  const W = 720;
  const H = 220;
  const left = 44;
  const bottom = 24;
  const plotH = H - bottom - 8;
  const step = (W - left) / days.length;
  const barW = Math.max(2, step * 0.7);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `Runs per day from ${report.from} to ${report.to}` });
  for (const frac of [0, 0.5, 1]) {
    const y = 8 + plotH * (1 - frac);
    root.append(svg("line", { x1: left, x2: W, y1: y, y2: y, class: "grid" }));
    root.append(svg("text", { x: left - 6, y: y + 4, "text-anchor": "end", class: "axis" }, Math.round(max * frac)));
  }
  days.forEach((day, i) => {
    const by = byDay.get(day) || {};
    let y = 8 + plotH;
    const x = left + i * step + (step - barW) / 2;
    const g = svg("g", {});
    const title = [`${day}: ${totals[i]} runs`];
    for (const [status, colour] of STACK) {
      const n = by[status] || 0;
      if (!n) continue;
      const hgt = (n / max) * plotH;
      y -= hgt;
      g.append(svg("rect", { x, y, width: barW, height: Math.max(hgt, 0.5), fill: colour }));
      title.push(`${status}: ${n}`);
    }
    g.append(svg("title", {}, title.join("\n")));
    root.append(g);
    if (days.length <= 10 || i % Math.ceil(days.length / 10) === 0) {
      root.append(svg("text", { x: x + barW / 2, y: H - 6, "text-anchor": "middle", class: "axis" }, day.slice(5)));
    }
  });
  const legend = h(
    "ul",
    { class: "legend" },
    STACK.map(([status, colour]) => h("li", {}, h("span", { class: "swatch", "data-colour": colour }), status)),
  );
  // Colours through the DOM, not inline style attributes (the CSP allows no inline styles).
  for (const sw of legend.querySelectorAll(".swatch")) sw.style.background = sw.dataset.colour;
  return h("div", { class: "chart-wrap" }, root, legend);
}

/** Shards held by each admin, as bars out of the shard count, with its publication figures. */
function scheduler(health) {
  const alive = health.admins.filter((a) => a.alive);
  const W = 720;
  const rowH = 26;
  const left = 170;
  const root = svg("svg", { viewBox: `0 0 ${W} ${Math.max(1, alive.length) * rowH + 4}`, class: "chart bars", role: "img", "aria-label": `Shards held by each admin, of ${health.shard_count}` });
  alive.forEach((a, i) => {
    const y = i * rowH + 4;
    const w = ((W - left - 60) * a.shards.length) / Math.max(1, health.shard_count);
    root.append(svg("text", { x: left - 8, y: y + 15, "text-anchor": "end", class: "axis" }, a.admin_id));
    const bar = svg("rect", { x: left, y, width: Math.max(w, 1), height: rowH - 8, fill: "#3b6fd4" });
    bar.append(svg("title", {}, `${a.admin_id}: shards ${a.shards.join(", ") || "none"}`));
    root.append(bar);
    root.append(svg("text", { x: left + w + 6, y: y + 15, class: "axis" }, a.shards.length));
  });
  const lateness = (a) => (a.published_last_minute ? `${a.lateness_p50_ms} / ${a.lateness_p99_ms} / ${a.lateness_max_ms} ms` : "—");
  return [
    alive.length ? h("div", { class: "chart-wrap" }, root) : h("p", { class: "notice error", role: "alert" }, "No admin is alive: no job fires."),
    health.unheld_shards.length
      ? h("p", { class: "notice error", role: "alert" }, `${health.unheld_shards.length} of ${health.shard_count} shards have no admin (${health.unheld_shards.join(", ")}): their jobs do not fire until one takes them.`)
      : null,
    table(
      [
        ["Admin", (a) => a.admin_id],
        ["State", (a) => badge(a.alive ? "alive" : "dead")],
        ["Shards", (a) => String(a.shards.length)],
        ["Published, last minute", (a) => a.published_last_minute.toLocaleString()],
        ["Lateness p50 / p99 / max", lateness],
        ["Takes runs ahead", (a) => `${a.publish_ahead_ms} ms`],
        ["Last seen", (a) => time(a.last_seen)],
        ["Started", (a) => time(a.started_at)],
      ],
      health.admins,
      "No admin has run in the last hour.",
    ),
  ];
}

function tile(label, value, note) {
  return h("div", { class: "tile" }, h("div", { class: "tile-value" }, value), h("div", { class: "tile-label" }, label), note ? h("div", { class: "muted" }, note) : null);
}

export async function dashboardPage(params) {
  const span = params.get("days") === "30" ? 30 : 7;
  const today = new Date();
  const from = new Date(today.getTime() - (span - 1) * 86_400_000);
  const since = new Date(today.getTime() - 86_400_000).toISOString();
  const [report, running, failed, workers, health] = await Promise.all([
    api("GET", `/api/report${query({ from: isoDay(from), to: isoDay(today), rows: "false" })}`),
    api("GET", `/api/triggers${query({ status: "running", limit: 100 })}`),
    api("GET", `/api/triggers${query({ status: "failed", from: since, limit: 20 })}`),
    api("GET", "/api/workers"),
    api("GET", "/api/scheduler"),
  ]);
  const total = report.days.reduce((a, d) => a + d.runs, 0);
  const ok = report.days.reduce((a, d) => a + (d.by_status.succeeded || 0), 0);
  const adminsAlive = health.admins.filter((a) => a.alive);
  const worstP99 = Math.max(0, ...adminsAlive.filter((a) => a.published_last_minute).map((a) => a.lateness_p99_ms));
  const groups = new Map();
  for (const w of workers.workers) {
    const g = groups.get(w.group) || { alive: 0, all: 0 };
    g.all += 1;
    if (w.alive) g.alive += 1;
    groups.set(w.group, g);
  }
  show(
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Dashboard"),
      h(
        "div",
        { class: "actions", role: "group", "aria-label": "Span" },
        [7, 30].map((n) => h("a", { class: `button${n === span ? " primary" : ""}`, href: `#/dashboard${query({ days: n })}`, "aria-current": n === span ? "true" : null }, `${n} days`)),
      ),
    ),
    h(
      "div",
      { class: "tiles" },
      tile(`Runs, ${span} days`, total.toLocaleString()),
      tile("Succeeded", total ? `${((100 * ok) / total).toFixed(1)} %` : "—", `${ok.toLocaleString()} of ${total.toLocaleString()}`),
      tile("Running now", running.triggers.length === 100 ? "100+" : String(running.triggers.length)),
      tile("Failed, last 24 h", failed.next_before_id ? "20+" : String(failed.triggers.length)),
      tile("Live workers", String(workers.workers.filter((w) => w.alive).length), [...groups].map(([g, c]) => `${g}: ${c.alive}/${c.all}`).join(", ")),
      tile(
        "Admins alive",
        String(adminsAlive.length),
        health.unheld_shards.length ? `${health.unheld_shards.length} shards unheld` : `all ${health.shard_count} shards held`,
      ),
      tile("Publication p99, last minute", adminsAlive.some((a) => a.published_last_minute) ? `${worstP99} ms` : "—", `${adminsAlive.reduce((n, a) => n + a.published_last_minute, 0).toLocaleString()} published`),
    ),
    h("h2", {}, "Runs per day (UTC)"),
    chart(report),
    h("h2", {}, "Failed in the last 24 hours"),
    table(
      [
        ["Run", (r) => h("a", { href: `#/runs/${r.id}` }, r.id)],
        ["Job", (r) => h("a", { href: `#/jobs/${r.job_id}` }, `${r.job_id} (${r.job_type})`)],
        ["Status", (r) => badge(r.status)],
        ["Fire time", (r) => time(r.fire_time)],
        ["Message", (r) => h("span", { class: "message" }, r.message || "")],
      ],
      failed.triggers,
      "No run failed in the last 24 hours.",
    ),
    failed.next_before_id ? h("p", {}, h("a", { href: `#/runs${query({ status: "failed", from: since })}` }, "All failed runs →")) : null,
    h("h2", {}, "Scheduler"),
    scheduler(health),
  );
}
