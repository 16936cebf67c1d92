// The job form: every field of the API's JobSpec, the choices read from the API's own OpenAPI
// document (so they cannot drift from the server), the next fire times of the schedule as you
// type (GET /api/schedules/preview), and the API's validation messages at the field they name.

import { api, query } from "./api.js";
import { clearErrors, field, fieldError, h, localInput, notice, time } from "./ui.js";

let enums = null;

/** The values of the OpenAPI schema `name` (an enum), from /api/openapi.json. */
export async function choices(name) {
  if (!enums) {
    const doc = await api("GET", "/api/openapi.json");
    enums = doc.components.schemas;
  }
  return (enums[name] && enums[name].enum) || [];
}

const KINDS = [
  ["cron", "Cron expression"],
  ["fix_rate", "Every N ms (fix rate)"],
  ["fix_delay", "N ms after each run (fix delay)"],
  ["once", "Once, at an instant"],
  ["none", "Manual only"],
];

function select(values, current) {
  return h(
    "select",
    {},
    values.map((v) => (Array.isArray(v) ? v : [v, v])).map(([v, t]) => h("option", { value: v, selected: v === current }, t)),
  );
}

function number(value, attrs = {}) {
  return h("input", { type: "number", inputmode: "numeric", value: value ?? "", ...attrs });
}

/** A job form for `job` (null: a new job); `save(body)` sends it and may throw the API's error. */
export async function jobForm(job, save) {
  const [routes, blocks, misfires, backoffs, overlaps] = await Promise.all(
    ["RouteStrategy", "BlockStrategy", "MisfireStrategy", "Backoff", "Overlap"].map(choices),
  );
  const { groups } = await api("GET", "/api/concurrency-groups");
  const j = job || {
    name: "",
    job_type: "",
    schedule: { kind: "cron", expr: "0 * * * * ?" },
    route: "round",
    block: "serial_execution",
    misfire: "do_nothing",
    misfire_threshold_ms: 5000,
    params: "",
    timeout_ms: 0,
    retries: 0,
    retry_backoff_ms: 0,
    retry_backoff: "fixed",
    retry_backoff_max_ms: 3600000,
    children: [],
    alarm_webhook: null,
    alarm_emails: [],
    enabled: true,
    concurrency_group: null,
    priority: 0,
    overlap: "allow",
    jitter_ms: 0,
  };
  const s = j.schedule;
  const inputs = {
    name: h("input", { value: j.name, required: true, maxlength: 200 }),
    job_type: h("input", { value: j.job_type, required: true, pattern: "[A-Za-z0-9._\\-]+", placeholder: "billing.invoices" }),
    kind: select(KINDS, s.kind),
    expr: h("input", { value: s.expr || "", placeholder: "0 0 10 * * MON-FRI", spellcheck: "false" }),
    timezone: h("input", {
      value: s.timezone || "",
      placeholder: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC",
      list: "zones",
    }),
    every_ms: number(s.every_ms, { min: 1 }),
    delay_ms: number(s.delay_ms, { min: 1 }),
    at: h("input", { type: "datetime-local", step: 1, value: localInput(s.at, true) }),
    jitter_ms: number(j.jitter_ms, { min: 0, max: 86400000 }),
    route: select(routes, j.route),
    block: select(blocks, j.block),
    misfire: select(misfires, j.misfire),
    misfire_threshold_ms: number(j.misfire_threshold_ms, { min: 0 }),
    params: h("textarea", { rows: 3 }, j.params),
    timeout_ms: number(j.timeout_ms, { min: 0 }),
    retries: number(j.retries, { min: 0, max: 100 }),
    retry_backoff_ms: number(j.retry_backoff_ms, { min: 0 }),
    retry_backoff: select(backoffs, j.retry_backoff),
    retry_backoff_max_ms: number(j.retry_backoff_max_ms, { min: 0 }),
    children: h("input", { value: j.children.join(", "), placeholder: "job ids, such as 4, 7" }),
    alarm_webhook: h("input", { type: "url", value: j.alarm_webhook || "", placeholder: "https://…" }),
    alarm_emails: h("input", { value: j.alarm_emails.join(", "), placeholder: "ops@example.com, …" }),
    enabled: h("input", { type: "checkbox", checked: j.enabled }),
    concurrency_group: select(
      [["", "none"], ...groups.map((g) => [g.name, `${g.name} (limit ${g.limit})`])],
      j.concurrency_group || "",
    ),
    priority: number(j.priority, { min: -1000, max: 1000 }),
    overlap: select(overlaps, j.overlap),
  };
  const preview = h("div", { class: "preview", "aria-live": "polite" });
  const zones = h("datalist", { id: "zones" }, (Intl.supportedValuesOf ? Intl.supportedValuesOf("timeZone") : []).map((z) => h("option", { value: z })));
  const byKind = {
    cron: [
      field("Cron expression", "schedule.expr", inputs.expr, "Quartz, as in XXL-JOB: sec min hour day month weekday [year]; ? in one day field; L, W, 6#3. Weekday 1 = Sunday, or MON-FRI."),
      field("Time zone", "schedule.timezone", inputs.timezone, "IANA name; empty: UTC."),
      field("Jitter (ms)", "jitter_ms", inputs.jitter_ms, "Every fire moves by one offset below this, fixed per job, so that jobs of one expression fire apart. 0: none."),
    ],
    fix_rate: [field("Every (ms)", "schedule.every_ms", inputs.every_ms)],
    fix_delay: [field("Delay after each run (ms)", "schedule.delay_ms", inputs.delay_ms)],
    once: [field("At (your time zone)", "schedule.at", inputs.at)],
    none: [],
  };
  const kindFields = h("div", { class: "kind-fields" });
  const status = h("div");

  function schedule() {
    const kind = inputs.kind.value;
    switch (kind) {
      case "cron":
        return { kind, expr: inputs.expr.value, ...(inputs.timezone.value ? { timezone: inputs.timezone.value } : {}) };
      case "fix_rate":
        return { kind, every_ms: Number(inputs.every_ms.value) };
      case "fix_delay":
        return { kind, delay_ms: Number(inputs.delay_ms.value) };
      case "once":
        return { kind, at: inputs.at.value ? new Date(inputs.at.value).toISOString() : "" };
      default:
        return { kind };
    }
  }

  let previewTimer = null;
  let previewSeq = 0;
  function schedulePreview() {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(async () => {
      const seq = ++previewSeq;
      const sch = schedule();
      if (sch.kind === "none") return preview.replaceChildren(h("p", { class: "muted" }, "Fires only when run by hand or through the API."));
      try {
        const jitter = sch.kind === "cron" && Number(inputs.jitter_ms.value) > 0 ? { jitter_ms: inputs.jitter_ms.value, job_id: job ? job.id : "" } : {};
        const p = await api("GET", `/api/schedules/preview${query({ ...sch, ...jitter, count: 5 })}`);
        if (seq !== previewSeq) return;
        const moved = jitter.jitter_ms ? (job ? ", with this job's jitter" : "; each moves by the new job's jitter offset") : "";
        preview.replaceChildren(
          h("p", { class: "muted" }, `Next fire times (${p.timezone}${moved}):`),
          h(
            "ol",
            {},
            p.local.map((l, i) => h("li", {}, h("code", {}, l.replace("T", " ")), " — ", time(p.fire_times[i]), " here")),
          ),
        );
      } catch (e) {
        if (seq !== previewSeq) return;
        preview.replaceChildren(h("p", { class: "preview-error" }, e.message));
      }
    }, 250);
  }

  function showKind() {
    kindFields.replaceChildren(...byKind[inputs.kind.value]);
    schedulePreview();
  }
  inputs.kind.addEventListener("change", showKind);
  for (const k of ["expr", "timezone", "every_ms", "delay_ms", "at", "jitter_ms"]) inputs[k].addEventListener("input", schedulePreview);

  const list = (v) =>
    v
      .split(/[,\s]+/)
      .map((x) => x.trim())
      .filter(Boolean);

  function body() {
    const b = {
      name: inputs.name.value,
      job_type: inputs.job_type.value,
      schedule: schedule(),
      route: inputs.route.value,
      block: inputs.block.value,
      misfire: inputs.misfire.value,
      misfire_threshold_ms: Number(inputs.misfire_threshold_ms.value || 0),
      params: inputs.params.value,
      timeout_ms: Number(inputs.timeout_ms.value || 0),
      retries: Number(inputs.retries.value || 0),
      retry_backoff_ms: Number(inputs.retry_backoff_ms.value || 0),
      retry_backoff: inputs.retry_backoff.value,
      retry_backoff_max_ms: Number(inputs.retry_backoff_max_ms.value || 0),
      children: list(inputs.children.value).map(Number),
      alarm_webhook: inputs.alarm_webhook.value || null,
      alarm_emails: list(inputs.alarm_emails.value),
      enabled: inputs.enabled.checked,
      concurrency_group: inputs.concurrency_group.value || null,
      priority: Number(inputs.priority.value || 0),
      overlap: inputs.overlap.value,
      jitter_ms: inputs.kind.value === "cron" ? Number(inputs.jitter_ms.value || 0) : 0,
    };
    return b;
  }

  const form = h(
    "form",
    { class: "job-form", novalidate: true, onsubmit: submit },
    zones,
    h(
      "fieldset",
      {},
      h("legend", {}, "Job"),
      field("Name", "name", inputs.name),
      field("Job type", "job_type", inputs.job_type, "The handler family; workers serve job types."),
      field("Params", "params", inputs.params, "Given to the handler as they are."),
      h("div", { class: "field checkbox", "data-field": "enabled" }, h("label", {}, inputs.enabled, " Enabled"), h("small", { class: "field-error" })),
    ),
    h("fieldset", {}, h("legend", {}, "Schedule"), field("Kind", "schedule", inputs.kind), kindFields, preview),
    h(
      "fieldset",
      {},
      h("legend", {}, "Running"),
      field("Route", "route", inputs.route, "Which worker runs each fire."),
      field("Block", "block", inputs.block, "When the previous run is still running."),
      field("Misfire", "misfire", inputs.misfire),
      field("Misfire after (ms)", "misfire_threshold_ms", inputs.misfire_threshold_ms),
      field("Timeout (ms, 0: none)", "timeout_ms", inputs.timeout_ms),
      field("Retries", "retries", inputs.retries),
      field("Retry backoff (ms)", "retry_backoff_ms", inputs.retry_backoff_ms),
      field("Backoff", "retry_backoff", inputs.retry_backoff),
      field("Longest backoff (ms)", "retry_backoff_max_ms", inputs.retry_backoff_max_ms),
      field("Children", "children", inputs.children, "Jobs fired when a run succeeds."),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Flow control"),
      field("Concurrency group", "concurrency_group", inputs.concurrency_group, "Its runs take the group's slots; over its limit they wait queued."),
      field("Priority", "priority", inputs.priority, "In the group's queue, higher goes first (−1000 to 1000)."),
      field("Overlap", "overlap", inputs.overlap, "A fire while a run of this job is in flight anywhere: allow, skip it, keep one (buffer_one) or all waiting, or cancel the running one."),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Alarms"),
      field("Webhook", "alarm_webhook", inputs.alarm_webhook),
      field("E-mails", "alarm_emails", inputs.alarm_emails),
    ),
    status,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, job ? "Save" : "Create job"), h("a", { href: job ? `#/jobs/${job.id}` : "#/jobs" }, "Cancel")),
  );

  async function submit(ev) {
    ev.preventDefault();
    clearErrors(form);
    status.replaceChildren();
    try {
      await save(body());
    } catch (e) {
      if (!(e.field && fieldError(form, e.field, e.message))) status.replaceChildren(notice(e.message));
    }
  }

  showKind();
  return form;
}
