// Concurrency groups: the list with each group's slots in use and queue, a new group, and a
// group's page (its limit and rate to change, its queue in release order, followed live).

import { api, query } from "./api.js";
import { apiForm, fact, field, h, notice, show, table, time } from "./ui.js";

const rateText = (r) => (r ? `${r.per_second}/s${r.burst ? ` + burst ${r.burst}` : ""}` : "none");

/** Slots in use as a meter and words: "2 of 3". */
function use(g) {
  return h(
    "span",
    { class: "use" },
    h("meter", { min: 0, max: g.limit, value: Math.min(g.in_flight, g.limit), "aria-label": `${g.in_flight} of ${g.limit} slots in use` }),
    ` ${g.in_flight} of ${g.limit}`,
  );
}

const number = (value, attrs = {}) => h("input", { type: "number", inputmode: "decimal", value: value ?? "", ...attrs });

/** The rate's fields: per second (empty: no rate) and burst. */
function rateInputs(rate) {
  const perSecond = number(rate ? rate.per_second : "", { min: 0, step: "any", placeholder: "no rate" });
  const burst = number(rate ? rate.burst : "", { min: 0, placeholder: "0" });
  const value = () => (perSecond.value === "" ? null : { per_second: Number(perSecond.value), burst: Number(burst.value || 0) });
  const fields = [
    field("Rate (starts a second)", "rate.per_second", perSecond, "Empty: no rate. Starts are spread so that no second sees more than rate + burst."),
    field("Burst", "rate.burst", burst, "Starts allowed at once on top of the rate."),
  ];
  return { fields, value };
}

export async function groupsPage(canWrite) {
  const { groups } = await api("GET", "/api/concurrency-groups");
  let create = null;
  if (canWrite) {
    const name = h("input", { required: true, maxlength: 100, placeholder: "warehouse" });
    const limit = number("", { min: 1, placeholder: "3" });
    const rate = rateInputs(null);
    create = apiForm(
      { class: "card" },
      [
        h("h2", {}, "New group"),
        field("Name", "name", name, "Letters, digits, . _ -; jobs name it as their concurrency group."),
        field("Limit", "limit", limit, "Most runs of its jobs running or on their way to a worker at once."),
        ...rate.fields,
        h("button", { type: "submit", class: "primary" }, "Create group"),
      ],
      () => ({ name: name.value, limit: limit.value === "" ? 0 : Number(limit.value), ...(rate.value() ? { rate: rate.value() } : {}) }),
      async (body) => {
        const g = await api("POST", "/api/concurrency-groups", body);
        window.location.hash = `#/groups/${encodeURIComponent(g.name)}`;
      },
    );
  }
  show(
    h("h1", {}, "Concurrency groups"),
    h(
      "p",
      { class: "muted" },
      "At most a group's limit of runs of its jobs run, or are on their way to a worker, at once across the cluster. " +
        "A run over the limit waits queued and goes when a slot frees: highest priority first, then oldest fire time.",
    ),
    table(
      [
        ["Name", (g) => h("a", { href: `#/groups/${encodeURIComponent(g.name)}` }, g.name)],
        ["Slots in use", use],
        ["Queued", (g) => g.queued],
        ["Rate", (g) => rateText(g.rate)],
        ["Jobs", (g) => g.jobs],
        ["Changed", (g) => time(g.updated_at)],
      ],
      groups,
      "No concurrency group yet.",
    ),
    create,
  );
}

/** A group's page; `setStop(f)` is given what stops its live refresh when the page is left. */
export async function groupPage(name, canWrite, setStop) {
  const path = `/api/concurrency-groups/${encodeURIComponent(name)}`;
  const [first, jobs] = await Promise.all([api("GET", `${path}/queue${query({ limit: 100 })}`), api("GET", `/api/jobs${query({ concurrency_group: name, limit: 100 })}`)]);
  const g = first.group;
  const status = h("div", { role: "status" });
  const facts = h("dl", { class: "facts" });
  const queue = h("div", { "aria-live": "polite" });
  function render(q) {
    facts.replaceChildren(
      ...fact("Slots in use", use(q.group)),
      ...fact("Queued", String(q.group.queued)),
      ...fact("Rate", rateText(q.group.rate)),
      ...fact("Jobs", jobs.jobs.length ? jobs.jobs.map((j, i) => [i ? ", " : "", h("a", { href: `#/jobs/${j.id}` }, j.name), ` (priority ${j.priority})`]) : "none"),
    );
    queue.replaceChildren(
      table(
        [
          ["Place", (r) => (r.place ? String(r.place) : h("span", { class: "muted" }, "not due"))],
          ["Run", (r) => h("a", { href: `#/runs/${r.id}` }, r.id)],
          ["Job", (r) => h("a", { href: `#/jobs/${r.job_id}` }, r.job_name)],
          ["Priority", (r) => r.priority],
          ["Fire time", (r) => time(r.fire_time)],
        ],
        q.runs,
        "No run waits.",
      ),
      ...(q.group.queued > q.runs.length ? [h("p", { class: "muted" }, `The first ${q.runs.length} of ${q.group.queued} queued runs.`)] : []),
    );
  }
  render(first);
  let edit = null;
  let actions = null;
  if (canWrite) {
    const limit = number(g.limit, { min: 1 });
    const rate = rateInputs(g.rate);
    edit = apiForm(
      { class: "card" },
      [h("h2", {}, "Change"), field("Limit", "limit", limit), ...rate.fields, h("button", { type: "submit", class: "primary" }, "Save")],
      () => ({ limit: limit.value === "" ? 0 : Number(limit.value), rate: rate.value() }),
      async (body, formStatus) => {
        const saved = await api("PATCH", path, body);
        formStatus.replaceChildren(notice(`Saved: limit ${saved.limit}, rate ${rateText(saved.rate)}.`, "info"));
        await refresh();
      },
    );
    actions = h(
      "div",
      { class: "actions" },
      h(
        "button",
        {
          type: "button",
          class: "danger",
          onclick: async () => {
            if (!window.confirm(`Delete concurrency group “${name}”?`)) return;
            status.replaceChildren();
            try {
              await api("DELETE", path);
              window.location.hash = "#/groups";
            } catch (e) {
              status.replaceChildren(notice(e.message));
            }
          },
        },
        "Delete",
      ),
    );
  }
  async function refresh() {
    try {
      render(await api("GET", `${path}/queue${query({ limit: 100 })}`));
    } catch {
      // The next round tries again; a deleted group's page is left by its delete.
    }
  }
  // The queue moves as slots free: follow it while the page is open.
  const timer = setInterval(refresh, 2000);
  setStop(() => clearInterval(timer));
  show(
    h("div", { class: "page-head" }, h("h1", {}, `Group ${name}`), actions),
    status,
    facts,
    h("h2", {}, "Queue"),
    h("p", { class: "muted" }, "Runs waiting for a slot, in the order they will go."),
    queue,
    edit,
  );
}
