// Alarms and the audit: read-only lists with filters, newest first, a page at a time.

import { api, query } from "./api.js";
import { badge, field, h, localInput, show, table, time } from "./ui.js";

/** Filters as a search form that rewrites the hash (so a filtered page can be bookmarked). */
function filters(route, inputs) {
  return h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (ev) => {
        ev.preventDefault();
        const values = Object.fromEntries(Object.entries(inputs).map(([k, [, el, toQuery]]) => [k, toQuery ? toQuery(el.value) : el.value]));
        window.location.hash = `${route}${query(values)}`;
      },
    },
    Object.entries(inputs).map(([name, [label, el]]) => field(label, name, el)),
    h("button", { type: "submit" }, "Filter"),
  );
}

function pager(route, f, next) {
  return h(
    "div",
    { class: "pager" },
    f.before_id ? h("a", { href: `${route}${query({ ...f, before_id: "" })}` }, "← Newest") : null,
    next ? h("a", { class: "button", href: `${route}${query({ ...f, before_id: next })}` }, "Older →") : null,
  );
}

const fromLocalInput = (v) => (v ? new Date(v).toISOString() : "");

export async function alarmsPage(params) {
  const f = Object.fromEntries(["job_id", "status", "before_id"].map((k) => [k, params.get(k) || ""]));
  const page = await api("GET", `/api/alarms${query({ ...f, limit: 50 })}`);
  const status = h("select", {}, ["", "pending", "sent", "failed"].map((v) => h("option", { value: v, selected: v === f.status }, v || "any")));
  show(
    h("h1", {}, "Alarms"),
    h("p", { class: "muted" }, "Webhook and e-mail alarms of failed, timed-out and lost runs, and how their delivery went."),
    filters("#/alarms", {
      job_id: ["Job id", h("input", { inputmode: "numeric", value: f.job_id, placeholder: "any" })],
      status: ["Delivery", status],
    }),
    table(
      [
        ["Run", (a) => h("a", { href: `#/runs/${a.trigger_id}` }, a.trigger_id)],
        ["Job", (a) => h("a", { href: `#/jobs/${a.job_id}` }, a.job_id)],
        ["Channel", (a) => a.channel],
        ["To", (a) => h("span", { class: "message" }, a.target)],
        ["Delivery", (a) => badge(a.status)],
        ["Attempts", (a) => a.attempts],
        ["Last error", (a) => h("span", { class: "message" }, a.last_error || "")],
        ["Raised", (a) => time(a.created_at)],
      ],
      page.alarms,
      "No alarm.",
    ),
    pager("#/alarms", f, page.next_before_id),
  );
}

export async function auditPage(params) {
  const f = Object.fromEntries(["actor", "job_id", "from", "to", "before_id"].map((k) => [k, params.get(k) || ""]));
  const page = await api("GET", `/api/audit${query({ ...f, limit: 50 })}`);
  const change = (r) => {
    if (!r.before && !r.after) return "";
    const keys = new Set([...Object.keys(r.before || {}), ...Object.keys(r.after || {})]);
    const changed = [...keys].filter((k) => JSON.stringify((r.before || {})[k]) !== JSON.stringify((r.after || {})[k]) && !["updated_at"].includes(k));
    if (!r.before) return "created";
    if (!r.after) return "deleted";
    return changed.length ? `changed ${changed.join(", ")}` : "";
  };
  show(
    h("h1", {}, "Audit"),
    filters("#/audit", {
      actor: ["Actor", h("input", { value: f.actor, placeholder: "any" })],
      job_id: ["Job id", h("input", { inputmode: "numeric", value: f.job_id, placeholder: "any" })],
      from: ["From", h("input", { type: "datetime-local", value: localInput(f.from) }), fromLocalInput],
      to: ["Before", h("input", { type: "datetime-local", value: localInput(f.to) }), fromLocalInput],
    }),
    table(
      [
        ["When", (r) => time(r.at)],
        ["Actor", (r) => [r.actor, r.source ? h("span", { class: "muted" }, ` from ${r.source}`) : null]],
        ["Action", (r) => h("code", {}, r.action)],
        ["Outcome", (r) => badge(r.outcome)],
        ["Job", (r) => (r.job_id ? h("a", { href: `#/jobs/${r.job_id}` }, `${r.job_id} (${r.job_type})`) : "")],
        ["What", (r) => h("span", { class: "message" }, [r.target, change(r), r.detail].filter(Boolean).join(" — "))],
      ],
      page.audit,
      "Nothing recorded.",
    ),
    pager("#/audit", f, page.next_before_id),
  );
}
