// Replay: choose what to run again (a job type's fire-time window, or partition offsets, or
// both; optionally one job), see it in a dry run, then confirm.

import { api } from "./api.js";
import { clearErrors, field, fieldError, h, notice, show, table, time } from "./ui.js";

const toIso = (v) => (v ? new Date(v).toISOString() : undefined);

/** `0:10-20, 3:0-5` → [{partition, from_offset, to_offset}]; throws naming the bad part. */
function ranges(text) {
  return text
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean)
    .map((p) => {
      const m = p.match(/^(\d+)\s*:\s*(\d+)\s*-\s*(\d+)$/);
      if (!m) throw Object.assign(new Error(`“${p}” is not partition:from-to, such as 0:10-20`), { field: "partitions" });
      return { partition: Number(m[1]), from_offset: Number(m[2]), to_offset: Number(m[3]) };
    });
}

export function replayPage(canWrite) {
  const jobType = h("input", { required: true, placeholder: "billing.invoices" });
  const from = h("input", { type: "datetime-local", step: 1 });
  const to = h("input", { type: "datetime-local", step: 1 });
  const partitions = h("input", { placeholder: "0:10-20, 3:0-5" });
  const jobId = h("input", { inputmode: "numeric", placeholder: "any job of the type" });
  const result = h("div", { "aria-live": "polite" });
  let planned = null;

  function request(dryRun) {
    const body = { job_type: jobType.value, dry_run: dryRun };
    if (from.value) body.from = toIso(from.value);
    if (to.value) body.to = toIso(to.value);
    if (partitions.value.trim()) body.partitions = ranges(partitions.value);
    if (jobId.value) body.job_id = Number(jobId.value);
    return body;
  }

  async function send(dryRun) {
    clearErrors(form);
    result.replaceChildren();
    try {
      const body = request(dryRun);
      const outcome = await api("POST", "/api/replay", body);
      if (dryRun) {
        planned = body;
        result.replaceChildren(
          h("h2", {}, `${outcome.count} run${outcome.count === 1 ? "" : "s"} would run again`),
          runs(outcome.runs),
          canWrite && outcome.count
            ? h("button", { type: "button", class: "primary", onclick: confirm }, `Replay ${outcome.count} run${outcome.count === 1 ? "" : "s"}`)
            : null,
        );
      } else {
        result.replaceChildren(
          notice(`Replayed ${outcome.replayed} run${outcome.replayed === 1 ? "" : "s"}.`, "info"),
          runs(outcome.runs),
        );
      }
    } catch (e) {
      if (!(e.field && fieldError(form, e.field, e.message))) result.replaceChildren(notice(e.message));
    }
  }

  async function confirm() {
    // Exactly what the dry run listed: the form may have been edited since.
    clearErrors(form);
    try {
      const outcome = await api("POST", "/api/replay", { ...planned, dry_run: false });
      result.replaceChildren(notice(`Replayed ${outcome.replayed} run${outcome.replayed === 1 ? "" : "s"}.`, "info"), runs(outcome.runs));
    } catch (e) {
      result.replaceChildren(notice(e.message));
    }
  }

  const runs = (list) =>
    table(
      [
        ["Original run", (r) => h("a", { href: `#/runs/${r.original_id}` }, r.original_id)],
        ["Job", (r) => h("a", { href: `#/jobs/${r.job_id}` }, r.job_id)],
        ["Fire time", (r) => time(r.fire_time)],
        ["Partition / offset", (r) => `${r.partition} / ${r.offset}`],
        ["New run", (r) => (r.trigger_id ? h("a", { href: `#/runs/${r.trigger_id}` }, r.trigger_id) : "—")],
      ],
      list,
      "Nothing.",
    );

  const form = h(
    "form",
    {
      class: "card",
      onsubmit: (ev) => {
        ev.preventDefault();
        send(true);
      },
    },
    h("p", { class: "muted" }, "Runs again the triggers read back from the job type's topic, by fire time, by offsets, or both."),
    field("Job type", "job_type", jobType),
    field("Fired from (your time)", "from", from),
    field("Fired before (your time)", "to", to),
    field("Partition offsets", "partitions", partitions, "partition:from-to, both ends included; comma-separated."),
    field("Only job", "job_id", jobId),
    h("button", { type: "submit" }, "Dry run"),
  );
  show(h("h1", {}, "Replay"), form, result);
}
