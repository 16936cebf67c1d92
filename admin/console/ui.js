// DOM helpers. Text always goes in as text nodes (never innerHTML), so nothing an API answer
// holds (a job name, a run's log) can become markup.

/** An element: h("a", {href: "#/jobs", class: "x"}, "text", child, …). `on*` attributes that are
 *  functions become listeners; `null`/`false` attributes and children are skipped. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the view's content and moves focus there (keyboard and screen-reader users land on
 *  the new page). */
export function show(...children) {
  const view = document.getElementById("view");
  view.replaceChildren();
  append(view, children);
  view.focus({ preventScroll: true });
}

const local = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "2-digit",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

/** A time in the viewer's zone, with UTC on hover. */
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return h("span", {}, iso);
  return h("time", { datetime: iso, title: `${d.toISOString().replace(".000Z", "Z")} UTC` }, local.format(d));
}

/** The value of a `datetime-local` input for an instant: the viewer's local wall time (what
 *  the input shows and `new Date(value)` reads back). */
export function localInput(iso, seconds = false) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  const base = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return seconds ? `${base}:${pad(d.getSeconds())}` : base;
}

/** A run or job status as a coloured badge. */
export function badge(status) {
  return h("span", { class: `badge s-${status}` }, status);
}

/** A message shown at the top of the view (errors in red). */
export function notice(text, kind = "error") {
  return h("p", { class: `notice ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

/** A table: columns are [header, row => cell]. */
export function table(columns, rows, empty = "Nothing here yet.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(r)))))),
    ),
  );
}

/** A label and its input, with a place for the API's message about that field. */
let fieldIds = 0;

export function field(label, name, input, help) {
  // Unique, so that two forms on one page (a new user, a new token) keep their labels apart.
  input.id = input.id || `f-${name.replace(/[^\w-]/g, "-")}-${++fieldIds}`;
  input.name = name;
  return h(
    "div",
    { class: "field", "data-field": name },
    h("label", { for: input.id }, label),
    input,
    help ? h("small", { class: "help" }, help) : null,
    h("small", { class: "field-error", role: "alert", "aria-live": "polite" }),
  );
}

/** Shows `message` at the field named `name` in `form` (the API's `field`, such as
 *  `schedule.expr`); false when the form has no such field. */
export function fieldError(form, name, message) {
  let box = null;
  for (const n of enclosing(name)) {
    box = form.querySelector(`[data-field="${CSS.escape(n)}"]`);
    if (box) break;
  }
  if (!box) return false;
  box.classList.add("invalid");
  box.querySelector(".field-error").textContent = message;
  const input = box.querySelector("input, select, textarea");
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.focus();
  }
  return true;
}

/** `alarm_emails[2]`, then `alarm_emails`; `schedule.expr`, then `schedule`. */
function* enclosing(name) {
  let n = name;
  while (n) {
    yield n;
    const stripped = n.replace(/\[\d+\]$/, "");
    if (stripped !== n) {
      n = stripped;
      continue;
    }
    const dot = n.lastIndexOf(".");
    n = dot > 0 ? n.slice(0, dot) : "";
  }
}

export function clearErrors(form) {
  for (const box of form.querySelectorAll(".field.invalid")) {
    box.classList.remove("invalid");
    box.querySelector(".field-error").textContent = "";
    box.querySelector("[aria-invalid]")?.removeAttribute("aria-invalid");
  }
}

/** A schedule in a few words. */
export function scheduleText(s) {
  switch (s.kind) {
    case "cron":
      return `cron ${s.expr}${s.timezone ? ` (${s.timezone})` : ""}`;
    case "fix_rate":
      return `every ${duration(s.every_ms)}`;
    case "fix_delay":
      return `${duration(s.delay_ms)} after each run`;
    case "once":
      return `once`;
    default:
      return "manual only";
  }
}

export function duration(ms) {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000} d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  if (ms % 1000 === 0) return `${ms / 1000} s`;
  return `${ms} ms`;
}

/** A term and its value in a `dl.facts`. */
export function fact(label, value) {
  return [h("dt", {}, label), h("dd", {}, value)];
}

/** How long something took, in a few words: `850 ms`, `4.2 s`, `3 min 5 s`, `2 h 10 min`. */
export function elapsed(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** A form whose submit sends `body()` with `send` and shows the API's errors at their fields. */
export function apiForm(attrs, children, body, send) {
  const status = h("div");
  // The API's checks and messages, at their fields, rather than the browser's.
  const form = h("form", { ...attrs, novalidate: true, onsubmit: submit }, children, status);
  async function submit(ev) {
    ev.preventDefault();
    clearErrors(form);
    status.replaceChildren();
    try {
      await send(body(), status);
    } catch (e) {
      if (!(e.field && fieldError(form, e.field, e.message))) status.replaceChildren(notice(e.message));
    }
  }
  return form;
}
