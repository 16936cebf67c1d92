// The Cadenza console: a small single-page app over the admin's HTTP API (the same API, rules and
// audit as the CLI). Hash routes: #/dashboard, #/jobs, #/jobs/new, #/jobs/{id}, #/jobs/{id}/edit, #/runs,
// #/runs/{id}, #/workflows, #/workflows/{id}, #/workflow-runs/{id}, #/groups, #/groups/{name},
// #/workers, #/replay, #/alarms, #/audit, #/access.

import { api, ApiError, onSignedOut, query, rememberCsrf } from "./api.js";
import { badge, clearErrors, duration, fact, field, fieldError, h, localInput, notice, scheduleText, show, table, time } from "./ui.js";
import { dashboardPage } from "./dashboard.js";
import { jobForm } from "./job_form.js";
import { alarmsPage, auditPage } from "./records.js";
import { replayPage } from "./replay.js";
import { accessPage } from "./access.js";
import { workflowPage, workflowRunPage, workflowsPage } from "./workflows.js";
import { groupPage, groupsPage } from "./groups.js";

/** Who is signed in (GET /api/session), or null. */
let me = null;

const canWrite = () => me && (me.role === "operator" || me.role === "admin");

// --- routing --------------------------------------------------------------------------------

const routes = [
  [/^#\/dashboard$/, () => dashboardPage(location().params)],
  [/^#\/jobs$/, () => jobsPage()],
  [/^#\/jobs\/new$/, () => jobEditPage(null)],
  [/^#\/jobs\/(\d+)$/, (id) => jobPage(id)],
  [/^#\/jobs\/(\d+)\/edit$/, (id) => jobEditPage(id)],
  [/^#\/runs$/, () => runsPage()],
  [/^#\/runs\/(\d+)$/, (id) => runPage(id)],
  [/^#\/workflows$/, () => workflowsPage(location().params, canWrite())],
  [/^#\/workflows\/(\d+)$/, (id) => workflowPage(id, location().params, canWrite(), route)],
  [
    /^#\/workflow-runs\/(\d+)$/,
    (id) =>
      workflowRunPage(id, canWrite(), (stop) => {
        stopPage = stop;
      }),
  ],
  [/^#\/groups$/, () => groupsPage(canWrite())],
  [
    /^#\/groups\/([^/?]+)$/,
    (name) =>
      groupPage(decodeURIComponent(name), canWrite(), (stop) => {
        stopPage = stop;
      }),
  ],
  [/^#\/workers$/, () => workersPage()],
  [/^#\/alarms$/, () => alarmsPage(location().params)],
  [/^#\/replay$/, () => replayPage(canWrite())],
  [/^#\/access$/, () => accessPage(me)],
  [/^#\/audit$/, () => auditPage(location().params)],
];

/** The hash without its query (`#/runs?job_id=3` → `#/runs`) and the query's parameters. */
function location() {
  const [path, q] = (window.location.hash || "#/dashboard").split("?");
  return { path, params: new URLSearchParams(q || "") };
}

let stopPage = () => {};

async function route() {
  stopPage();
  stopPage = () => {};
  if (!me) return;
  const { path } = location();
  // A workflow run is under Workflows.
  const section = path.split("/")[1] === "workflow-runs" ? "workflows" : path.split("/")[1];
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.section === section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  for (const [re, page] of routes) {
    const m = path.match(re);
    if (m) {
      // The last page goes at once: nothing typed now lands in it.
      show(h("p", { class: "muted" }, "Loading…"));
      try {
        await page(...m.slice(1));
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) return;
        show(notice(e.message));
      }
      return;
    }
  }
  window.location.hash = "#/dashboard";
}

window.addEventListener("hashchange", route);

// --- session --------------------------------------------------------------------------------

async function start() {
  onSignedOut(() => {
    me = null;
    signInPage("Your session has ended; sign in again.");
  });
  try {
    me = await api("GET", "/api/session");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return signInPage();
    return show(notice(e.message));
  }
  signedIn();
}

function signedIn() {
  document.getElementById("nav").hidden = false;
  // Replay writes (a dry run too): only for those who may.
  document.querySelector('#nav [data-section="replay"]').hidden = !canWrite();
  document.querySelector('#nav [data-section="access"]').textContent = me.role === "admin" ? "Users" : "Tokens";
  const who = document.getElementById("who");
  who.replaceChildren(
    h("span", { class: "actor" }, me.actor),
    " ",
    h("span", { class: "role" }, me.role),
    me.via === "session" ? h("button", { type: "button", class: "link", onclick: signOut }, "Sign out") : null,
  );
  route();
}

async function signOut() {
  try {
    await api("DELETE", "/api/session");
  } finally {
    me = null;
    rememberCsrf(null);
    signInPage("Signed out.", "info");
  }
}

function signInPage(message, kind = "error") {
  document.getElementById("nav").hidden = true;
  document.getElementById("who").replaceChildren();
  const name = h("input", { autocomplete: "username", required: true });
  const password = h("input", { type: "password", autocomplete: "current-password", required: true });
  const status = h("div");
  const form = h(
    "form",
    { class: "card narrow", onsubmit: submit },
    h("h1", {}, "Sign in"),
    field("Name", "name", name),
    field("Password", "password", password),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    status,
  );
  async function submit(ev) {
    ev.preventDefault();
    status.replaceChildren();
    try {
      const session = await api("POST", "/api/session", { name: name.value, password: password.value });
      rememberCsrf(session.csrf_token);
      me = await api("GET", "/api/session");
      signedIn();
    } catch (e) {
      status.replaceChildren(notice(e.message));
      password.select();
    }
  }
  show(message ? notice(message, kind) : null, form);
  name.focus();
}

// --- jobs -----------------------------------------------------------------------------------

async function jobsPage() {
  const { params } = location();
  const filters = {
    name: params.get("name") || "",
    job_type: params.get("job_type") || "",
    enabled: params.get("enabled") || "",
    after_id: params.get("after_id") || "",
  };
  const page = await api("GET", `/api/jobs${query({ ...filters, limit: 50 })}`);
  const name = h("input", { type: "search", value: filters.name, placeholder: "part of the name" });
  const jobType = h("input", { type: "search", value: filters.job_type, placeholder: "exact job type" });
  const enabled = h(
    "select",
    {},
    [["", "any"], ["true", "enabled"], ["false", "disabled"]].map(([v, t]) =>
      h("option", { value: v, selected: v === filters.enabled }, t),
    ),
  );
  const search = h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (ev) => {
        ev.preventDefault();
        window.location.hash = `#/jobs${query({ name: name.value, job_type: jobType.value, enabled: enabled.value })}`;
      },
    },
    field("Name", "name", name),
    field("Job type", "job_type", jobType),
    field("State", "enabled", enabled),
    h("button", { type: "submit" }, "Search"),
  );
  const next = page.next_after_id
    ? h("a", { class: "button", href: `#/jobs${query({ ...filters, after_id: page.next_after_id })}` }, "Next page →")
    : null;
  show(
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, "Jobs"),
      canWrite() ? h("a", { class: "button primary", href: "#/jobs/new" }, "New job") : null,
    ),
    search,
    table(
      [
        ["ID", (j) => j.id],
        ["Name", (j) => h("a", { href: `#/jobs/${j.id}` }, j.name)],
        ["Job type", (j) => h("code", {}, j.job_type)],
        ["Schedule", (j) => scheduleText(j.schedule)],
        ["Route", (j) => j.route],
        ["State", (j) => badge(j.enabled ? "enabled" : "disabled")],
        ["Next fire", (j) => time(j.next_fire_at)],
      ],
      page.jobs,
      "No job matches.",
    ),
    h("div", { class: "pager" }, filters.after_id ? h("a", { href: "#/jobs" }, "← First page") : null, next),
  );
}

async function jobPage(id) {
  const [job, runs, misfires] = await Promise.all([
    api("GET", `/api/jobs/${id}`),
    api("GET", `/api/triggers${query({ job_id: id, limit: 20 })}`),
    api("GET", `/api/misfires${query({ job_id: id, limit: 20 })}`),
  ]);
  const status = h("div");
  const act = (label, run, cls = "") =>
    h(
      "button",
      {
        type: "button",
        class: cls,
        onclick: async () => {
          status.replaceChildren();
          try {
            await run();
          } catch (e) {
            status.replaceChildren(notice(e.message));
          }
        },
      },
      label,
    );
  const actions = canWrite()
    ? h(
        "div",
        { class: "actions" },
        h("a", { class: "button", href: `#/jobs/${id}/edit` }, "Edit"),
        job.enabled
          ? act("Disable", async () => {
              await api("POST", `/api/jobs/${id}/disable`);
              route();
            })
          : act("Enable", async () => {
              await api("POST", `/api/jobs/${id}/enable`);
              route();
            }),
        act(
          "Delete",
          async () => {
            if (!window.confirm(`Delete job ${job.id} “${job.name}”? Its runs are deleted with it.`)) return;
            await api("DELETE", `/api/jobs/${id}`);
            window.location.hash = "#/jobs";
          },
          "danger",
        ),
      )
    : null;
  show(
    h("div", { class: "page-head" }, h("h1", {}, job.name, " ", badge(job.enabled ? "enabled" : "disabled")), actions),
    status,
    h(
      "dl",
      { class: "facts" },
      fact("Job type", h("code", {}, job.job_type)),
      fact("Schedule", job.jitter_ms ? `${scheduleText(job.schedule)}, each fire moved by this job's jitter (below ${duration(job.jitter_ms)})` : scheduleText(job.schedule)),
      fact("Next fire", time(job.next_fire_at)),
      fact("Route / block", `${job.route} / ${job.block}`),
      fact(
        "Flow control",
        job.concurrency_group
          ? ["group ", h("a", { href: `#/groups/${encodeURIComponent(job.concurrency_group)}` }, job.concurrency_group), `, priority ${job.priority}, overlap ${job.overlap}`]
          : `no group, overlap ${job.overlap}`,
      ),
      fact("Misfire", `${job.misfire} after ${duration(job.misfire_threshold_ms)}`),
      fact("Timeout", job.timeout_ms ? duration(job.timeout_ms) : "none"),
      fact("Retries", job.retries ? `${job.retries}, ${job.retry_backoff} backoff from ${duration(job.retry_backoff_ms)}` : "none"),
      fact(
        "Children",
        job.children.length ? job.children.map((c, i) => [i ? ", " : "", h("a", { href: `#/jobs/${c}` }, `job ${c}`)]) : "none",
      ),
      fact("Params", job.params ? h("pre", { class: "params" }, job.params) : "none"),
    ),
    canWrite() ? triggerForm(job, status) : null,
    h("h2", {}, "Recent runs"),
    runsTable(runs.triggers),
    h("p", {}, h("a", { href: `#/runs${query({ job_id: id })}` }, "All runs of this job →")),
    misfiresSection(misfires),
  );
}

/** The fire times a job skipped by its misfire strategy: spans, not runs. */
function misfiresSection(m) {
  const spans = [...m.open.map((s) => ({ ...s, open: true })), ...m.closed];
  return h(
    "section",
    { class: "misfires" },
    h("h2", {}, "Skipped fire times"),
    h(
      "p",
      { class: "muted" },
      `${m.total ?? 0} skipped in all. A fire time found later than the misfire threshold is skipped without a run; ` +
        "each span counts the fire times between its first and last that have no run.",
    ),
    table(
      [
        ["First skipped", (s) => time(s.first_fire)],
        ["Last skipped", (s) => time(s.last_fire)],
        ["Skipped", (s) => s.count],
        ["Strategy", (s) => `${s.strategy} after ${duration(s.threshold_ms)}`],
        ["", (s) => (s.open ? badge("open") : `closed ${time(s.closed_at)}`)],
      ],
      spans,
      "No fire time skipped.",
    ),
  );
}

/** "Run once": now, with other params or on a chosen worker. */
function triggerForm(job, status) {
  const params = h("textarea", { rows: 2, placeholder: "the job's params" });
  const worker = h("input", { placeholder: "any live worker" });
  const form = h(
    "form",
    { class: "card", onsubmit: submit },
    h("h2", {}, "Run now"),
    field("Params for this run", "params", params),
    field("Worker", "worker", worker, "A live worker serving the job type (see Workers)."),
    h("button", { type: "submit", class: "primary" }, "Run now"),
  );
  async function submit(ev) {
    ev.preventDefault();
    clearErrors(form);
    status.replaceChildren();
    const body = {};
    if (params.value) body.params = params.value;
    if (worker.value) body.worker = worker.value;
    try {
      const t = await api("POST", `/api/jobs/${job.id}/trigger`, body);
      window.location.hash = `#/runs/${t.trigger_ids[0]}`;
    } catch (e) {
      if (!(e.field && fieldError(form, e.field, e.message))) status.replaceChildren(notice(e.message));
    }
  }
  return form;
}

async function jobEditPage(id) {
  const job = id ? await api("GET", `/api/jobs/${id}`) : null;
  show(
    h("h1", {}, job ? `Edit ${job.name}` : "New job"),
    await jobForm(job, async (body) => {
      const saved = job ? await api("PATCH", `/api/jobs/${id}`, body) : await api("POST", "/api/jobs", body);
      window.location.hash = `#/jobs/${saved.id}`;
    }),
  );
}

// --- runs -----------------------------------------------------------------------------------

const RUN_STATUSES = ["queued", "scheduled", "publishing", "published", "running", "succeeded", "failed", "timed_out", "cancelled", "discarded", "lost", "misfired", "skipped"];
const RUN_KINDS = ["cron", "fix_rate", "fix_delay", "once", "manual", "api", "retry", "child", "replay", "misfire", "workflow"];

function runsTable(runs) {
  return table(
    [
      ["ID", (r) => h("a", { href: `#/runs/${r.id}` }, r.id)],
      ["Job", (r) => h("a", { href: `#/jobs/${r.job_id}` }, r.job_id)],
      ["Kind", (r) => r.kind],
      ["Status", (r) => badge(r.status)],
      ["Fire time", (r) => time(r.fire_time)],
      ["Worker", (r) => r.worker_id || r.routed_worker || h("span", { class: "muted" }, "—")],
      ["Message", (r) => h("span", { class: "message" }, r.waiting || r.message || "")],
    ],
    runs,
    "No runs.",
  );
}

async function runsPage() {
  const { params } = location();
  const f = Object.fromEntries(["job_id", "status", "kind", "from", "to", "before_id"].map((k) => [k, params.get(k) || ""]));
  const page = await api("GET", `/api/triggers${query({ ...f, limit: 50 })}`);
  const jobId = h("input", { inputmode: "numeric", value: f.job_id, placeholder: "any" });
  const select = (values, current) =>
    h("select", {}, h("option", { value: "" }, "any"), values.map((v) => h("option", { value: v, selected: v === current }, v)));
  const status = select(RUN_STATUSES, f.status);
  const kind = select(RUN_KINDS, f.kind);
  const from = h("input", { type: "datetime-local", value: localInput(f.from) });
  const to = h("input", { type: "datetime-local", value: localInput(f.to) });
  const fromLocal = (v) => (v ? new Date(v).toISOString() : "");
  const form = h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (ev) => {
        ev.preventDefault();
        window.location.hash = `#/runs${query({
          job_id: jobId.value,
          status: status.value,
          kind: kind.value,
          from: fromLocal(from.value),
          to: fromLocal(to.value),
        })}`;
      },
    },
    field("Job id", "job_id", jobId),
    field("Status", "status", status),
    field("Kind", "kind", kind),
    field("Fired from", "from", from),
    field("Fired before", "to", to),
    h("button", { type: "submit" }, "Filter"),
  );
  show(
    h("h1", {}, "Runs"),
    form,
    runsTable(page.triggers),
    h(
      "div",
      { class: "pager" },
      f.before_id ? h("a", { href: `#/runs${query({ ...f, before_id: "" })}` }, "← Newest") : null,
      page.next_before_id ? h("a", { class: "button", href: `#/runs${query({ ...f, before_id: page.next_before_id })}` }, "Older →") : null,
    ),
  );
}

const ENDED = new Set(["succeeded", "failed", "timed_out", "cancelled", "discarded", "lost", "misfired", "skipped"]);

/** Statuses a run can be cancelled in (publishing: wait a moment). */
const CANCELLABLE = new Set(["queued", "scheduled", "publishing", "published", "running"]);

async function runPage(id) {
  const run = await api("GET", `/api/triggers/${id}`);
  const log = h("pre", { class: "log", "aria-live": "polite" }, run.log || "");
  const status = h("div", { role: "status" });
  // Offered while the run can be cancelled; a run still publishing gets it once it can.
  const cancel =
    canWrite() && !ENDED.has(run.status)
      ? h(
          "div",
          { class: "actions" },
          h(
            "button",
            {
              type: "button",
              class: "danger",
              onclick: async (ev) => {
                if (!window.confirm(`Cancel run ${run.id} of job ${run.job_id}? A running handler is stopped.`)) return;
                ev.target.disabled = true;
                try {
                  const r = await api("POST", `/api/triggers/${run.id}/cancel`);
                  status.replaceChildren(notice(r.status === "cancelled" ? "Cancelled: it will not run." : "Cancel sent to the worker that holds the run.", "info"));
                  if (r.status === "cancelled") route();
                } catch (e) {
                  ev.target.disabled = false;
                  status.replaceChildren(notice(e.message));
                }
              },
            },
            "Cancel run",
          ),
        )
      : null;
  if (cancel) cancel.hidden = !CANCELLABLE.has(run.status);
  show(
    h("div", { class: "page-head" }, h("h1", {}, `Run ${run.id} `, badge(run.status)), cancel),
    status,
    h(
      "dl",
      { class: "facts" },
      fact("Job", h("a", { href: `#/jobs/${run.job_id}` }, `${run.job_id} (${run.job_type})`)),
      fact("Kind", run.kind),
      fact("Fire time", time(run.fire_time)),
      run.place_in_line ? fact("Place in line", String(run.place_in_line)) : null,
      fact("Published", time(run.published_at)),
      fact("Started", time(run.started_at)),
      fact("Finished", time(run.finished_at)),
      fact("Worker", run.worker_id ? `${run.worker_id} (${run.worker_group})` : run.routed_worker || "—"),
      fact("Partition / offset", run.partition === null ? "—" : `${run.partition} / ${run.offset}`),
      fact("Attempt", run.attempt),
      run.workflow_run_id
        ? fact("Workflow run", [h("a", { href: `#/workflow-runs/${run.workflow_run_id}` }, `workflow run ${run.workflow_run_id}`), ", node ", h("code", {}, run.workflow_node)])
        : null,
      fact("Parent", run.parent_id ? h("a", { href: `#/runs/${run.parent_id}` }, `run ${run.parent_id}`) : "none"),
      fact(
        "Followed by",
        run.follow_ups && run.follow_ups.length
          ? run.follow_ups.map((f, i) => [i ? ", " : "", h("a", { href: `#/runs/${f.id}` }, `${f.kind} run ${f.id}`), " ", badge(f.status)])
          : "none",
      ),
      run.shard_total > 1 ? fact("Shard", `${run.shard_index + 1} of ${run.shard_total}`) : null,
      fact("Route", run.route_note ? `${run.route} — ${run.route_note}` : run.route),
      fact("Message", run.waiting || run.message || "—"),
      fact("Params", run.params ? h("pre", { class: "params" }, run.params) : "none"),
    ),
    h("h2", {}, "Log"),
    log,
  );
  // Until the run ends, its log grows: follow it (server-sent events; only new text arrives).
  if (!ENDED.has(run.status)) {
    log.textContent = "";
    const events = new EventSource(`/api/triggers/${id}/log`);
    events.addEventListener("append", (e) => log.append(e.data));
    events.addEventListener("reset", (e) => {
      log.textContent = e.data;
    });
    events.addEventListener("status", (e) => {
      const badgeNow = document.querySelector("#view h1 .badge");
      if (badgeNow) badgeNow.replaceWith(badge(e.data));
      if (cancel) cancel.hidden = !CANCELLABLE.has(e.data);
    });
    events.addEventListener("end", () => {
      events.close();
      route();
    });
    stopPage = () => events.close();
  }
}

// --- workers --------------------------------------------------------------------------------

async function workersPage() {
  const { workers, dead_after_ms } = await api("GET", "/api/workers");
  show(
    h("h1", {}, "Workers"),
    h("p", { class: "muted" }, `A worker not heard from for ${duration(dead_after_ms)} gets no runs.`),
    table(
      [
        ["Worker", (w) => h("code", {}, w.worker_id)],
        ["Group", (w) => w.group],
        ["State", (w) => badge(w.alive ? "alive" : w.stopped_at ? "stopped" : "dead")],
        ["Job types", (w) => w.job_types.map((t, i) => [i ? ", " : "", h("code", {}, t)])],
        [
          "Partitions",
          (w) =>
            Object.entries(w.assignments)
              .map(([topic, parts]) => `${topic.split(".trigger.").pop()}: ${parts.join(", ")}`)
              .join("; ") || "—",
        ],
        ["Running", (w) => w.running.map((r) => `job ${r.job_id} ×${r.runs}`).join(", ") || "—"],
        ["Capacity", (w) => w.capacity],
        ["Last heartbeat", (w) => time(w.last_seen)],
      ],
      workers,
      "No worker has been seen in the last hour.",
    ),
  );
}

start();
