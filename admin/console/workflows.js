// Workflows: the list (trigger now), a workflow (its graph and recent workflow runs, enable,
// disable, trigger) and a workflow run (the graph coloured by node status; a node's run, message
// and output; retry or mark succeeded a failed node; cancel), which follows the workflow run
// while it runs.

import { api, query } from "./api.js";
import { badge, duration, elapsed, fact, field, h, notice, scheduleText, show, table, time } from "./ui.js";
import { dag, dagLegend } from "./dag.js";

/** How often a running workflow run's page reads it again. */
const REFRESH_MS = 1500;

const NODE_STATUSES = ["waiting", "running", "succeeded", "failed", "skipped", "cancelled"];

/** Replaces `el`'s children, skipping absent ones (`null`, `false`), nested lists flattened. */
function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

/** A button that runs `f`, showing the API's error in `status`; disabled while it runs. */
function action(label, status, f, cls = "") {
  const button = h(
    "button",
    {
      type: "button",
      class: cls,
      onclick: async () => {
        status.replaceChildren();
        button.disabled = true;
        try {
          await f();
        } catch (e) {
          status.replaceChildren(notice(e.message));
        } finally {
          button.disabled = false;
        }
      },
    },
    label,
  );
  return button;
}

/** Fires workflow `id` now and opens the new workflow run. */
async function trigger(id) {
  const run = await api("POST", `/api/workflows/${id}/trigger`);
  window.location.hash = `#/workflow-runs/${run.id}`;
}

const nodeCount = (w) => (Array.isArray(w.nodes) ? w.nodes.length : (w.node_count ?? "—"));

export async function workflowsPage(params, canWrite) {
  const f = Object.fromEntries(["name", "enabled", "after_id"].map((k) => [k, params.get(k) || ""]));
  const page = await api("GET", `/api/workflows${query({ ...f, limit: 50 })}`);
  const status = h("div");
  const name = h("input", { type: "search", value: f.name, placeholder: "part of the name" });
  const enabled = h(
    "select",
    {},
    [["", "any"], ["true", "enabled"], ["false", "disabled"]].map(([v, t]) => h("option", { value: v, selected: v === f.enabled }, t)),
  );
  const search = h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (ev) => {
        ev.preventDefault();
        window.location.hash = `#/workflows${query({ name: name.value, enabled: enabled.value })}`;
      },
    },
    field("Name", "name", name),
    field("State", "enabled", enabled),
    h("button", { type: "submit" }, "Search"),
  );
  show(
    h("h1", {}, "Workflows"),
    h("p", { class: "muted" }, "Graphs of jobs: each node runs a job after its parents."),
    search,
    status,
    table(
      [
        ["ID", (w) => w.id],
        ["Name", (w) => h("a", { href: `#/workflows/${w.id}` }, w.name)],
        ["Schedule", (w) => scheduleText(w.schedule)],
        ["State", (w) => badge(w.enabled ? "enabled" : "disabled")],
        ["Next fire", (w) => time(w.next_fire_at)],
        ["Nodes", (w) => nodeCount(w)],
        canWrite ? ["", (w) => action("Trigger now", status, () => trigger(w.id))] : null,
      ].filter(Boolean),
      page.workflows,
      f.name || f.enabled ? "No workflow matches." : "No workflow yet (create one with the API or `cadenza workflows create`).",
    ),
    h(
      "div",
      { class: "pager" },
      f.after_id ? h("a", { href: `#/workflows${query({ ...f, after_id: "" })}` }, "← First page") : null,
      page.next_after_id ? h("a", { class: "button", href: `#/workflows${query({ ...f, after_id: page.next_after_id })}` }, "Next page →") : null,
    ),
  );
}

/** When a workflow run began: its fire time, or when it was written if that was later. */
function began(r) {
  return Math.max(new Date(r.fire_time).getTime(), new Date(r.created_at || r.fire_time).getTime());
}

function runDuration(r) {
  if (r.status === "misfired") return h("span", { class: "muted" }, "—");
  if (r.finished_at) return elapsed(new Date(r.finished_at).getTime() - began(r));
  return h("span", { class: "muted" }, `${elapsed(Date.now() - began(r))} so far`);
}

/** A node's definition, for the workflow page's details. */
function definitionFacts(n) {
  return [
    fact("Job", h("a", { href: `#/jobs/${n.job_id}` }, `job ${n.job_id}`)),
    fact("Runs after", parentsText(n)),
    fact("Failure", n.allow_failure ? "allowed: it does not fail the workflow run" : "fails the workflow run"),
    fact("Params", n.params ? h("pre", { class: "params" }, n.params) : "the job's"),
  ];
}

function parentsText(n) {
  if (!n.parents || !n.parents.length) return "the start of the workflow run";
  const keys = n.parents.map((p, i) => [i ? ", " : "", h("code", {}, p)]);
  return n.after === "any_end" ? [keys, " ended, however"] : [keys, " succeeded"];
}

/** A graph whose nodes can be chosen, with a details box under it: `{element, render(nodes)}`. */
function chooser(describe, details, label) {
  let selected = null;
  let nodes = [];
  const graph = h("div");
  const box = h("section", { class: "card node-details", "aria-live": "polite" });
  let drawn = "";
  const render = (next) => {
    nodes = next || nodes;
    if (selected !== null && !nodes.some((n) => n.key === selected)) selected = null;
    // Drawn again only when something changed, keeping where it was scrolled to and the focus.
    const now = JSON.stringify([selected, nodes]);
    if (now !== drawn) {
      drawn = now;
      const focused = document.activeElement?.closest?.(".dag-node")?.dataset.key;
      const old = graph.firstChild;
      const [left, top] = old ? [old.scrollLeft, old.scrollTop] : [0, 0];
      const fresh = dag(nodes, {
        describe,
        selected,
        label,
        onSelect: (key) => {
          selected = selected === key ? null : key;
          render();
        },
      });
      graph.replaceChildren(fresh);
      fresh.scrollLeft = left;
      fresh.scrollTop = top;
      if (focused) [...graph.querySelectorAll(".dag-node")].find((g) => g.dataset.key === focused)?.focus({ preventScroll: true });
    }
    const node = nodes.find((n) => n.key === selected);
    fill(box, node ? details(node) : h("p", { class: "muted" }, "Choose a node to see its details."));
  };
  return { graph, box, render };
}

/** A workflow; `reload()` shows it again after a change. */
export async function workflowPage(id, params, canWrite, reload) {
  const before = params.get("before_id") || "";
  const [wf, runs] = await Promise.all([
    api("GET", `/api/workflows/${id}`),
    api("GET", `/api/workflow-runs${query({ workflow_id: id, limit: 20, before_id: before })}`),
  ]);
  const status = h("div");
  const actions = canWrite
    ? h(
        "div",
        { class: "actions" },
        action("Trigger now", status, () => trigger(wf.id), "primary"),
        wf.enabled
          ? action("Disable", status, async () => {
              await api("POST", `/api/workflows/${wf.id}/disable`);
              reload();
            })
          : action("Enable", status, async () => {
              await api("POST", `/api/workflows/${wf.id}/enable`);
              reload();
            }),
      )
    : null;
  const graph = chooser(
    (n) => ({
      line: `job ${n.job_id}`,
      label: `${n.key}: job ${n.job_id}${n.parents?.length ? `, after ${n.parents.join(", ")}` : ""}${n.allow_failure ? ", may fail" : ""}`,
    }),
    (n) => [h("h2", {}, "Node ", h("code", {}, n.key)), h("dl", { class: "facts" }, definitionFacts(n))],
    `Graph of workflow ${wf.name}`,
  );
  const list = runs.workflow_runs || [];
  show(
    h("div", { class: "page-head" }, h("h1", {}, wf.name, " ", badge(wf.enabled ? "enabled" : "disabled")), actions),
    status,
    h(
      "dl",
      { class: "facts" },
      fact("Schedule", scheduleText(wf.schedule)),
      fact("Next fire", time(wf.next_fire_at)),
      fact("Misfire", `${wf.misfire} after ${duration(wf.misfire_threshold_ms)}`),
      fact("Nodes", String(nodeCount(wf))),
      fact("Created", time(wf.created_at)),
      fact("Updated", time(wf.updated_at)),
    ),
    h("h2", {}, "Graph"),
    graph.graph,
    dagLegend(),
    graph.box,
    h("h2", {}, "Recent workflow runs"),
    table(
      [
        ["ID", (r) => h("a", { href: `#/workflow-runs/${r.id}` }, r.id)],
        ["Status", (r) => badge(r.status)],
        ["Kind", (r) => r.kind],
        ["Fire time", (r) => time(r.fire_time)],
        ["Duration", runDuration],
        ["Message", (r) => h("span", { class: "message" }, r.message || "")],
      ],
      list,
      "No workflow run yet.",
    ),
    h(
      "div",
      { class: "pager" },
      before ? h("a", { href: `#/workflows/${id}` }, "← Newest") : null,
      runs.next_before_id ? h("a", { class: "button", href: `#/workflows/${id}${query({ before_id: runs.next_before_id })}` }, "Older →") : null,
    ),
  );
  graph.render(wf.nodes);
}

/** Node statuses an operator can act on (retry, mark succeeded). */
const ACTIONABLE = new Set(["failed", "cancelled"]);

/** A node's second line and accessible name on a workflow run's graph. */
function describeRunNode(n) {
  const tries = n.tries > 1 ? ` · try ${n.tries}` : "";
  return {
    status: n.status,
    line: `${n.status}${tries}`,
    label: `${n.key}: ${n.status}, ${n.tries === 1 ? "1 try" : `${n.tries} tries`}${n.allow_failure ? ", may fail" : ""}`,
  };
}

/**
 * A workflow run. While it runs, it is read again every REFRESH_MS (the chosen node and the
 * focus stay); `onLeave(stop)` is given the function that stops that when the page is left.
 */
export async function workflowRunPage(id, canWrite, onLeave) {
  let timer = null;
  let left = false;
  onLeave(() => {
    left = true;
    clearTimeout(timer);
  });
  let run = await api("GET", `/api/workflow-runs/${id}`);
  if (left) return;
  const head = h("div", { class: "page-head" });
  const status = h("div", { role: "status" });
  // Where a failed read while following shows (cleared by the next good one).
  const readError = h("div");
  const facts = h("dl", { class: "facts" });
  const operable = () => canWrite && run.status !== "cancelled" && run.status !== "misfired";
  /** Takes a workflow run the API answered with, and follows it if it runs again. */
  const update = (next) => {
    const wasRunning = run.status === "running";
    run = next;
    render();
    if (run.status === "running" && !wasRunning) follow();
  };
  const nodeAction = (n, verb, path) =>
    action(verb, status, async () => {
      update(await api("POST", `/api/workflow-runs/${run.id}/nodes/${encodeURIComponent(n.key)}/${path}`));
      status.replaceChildren(notice(`Node ${n.key}: ${verb === "Retry" ? "running again" : "marked succeeded"}.`, "info"));
      // The button is gone with the node's new status: back to the node.
      document.querySelector(".dag-node.selected")?.focus();
    });
  const details = (n) => [
    h("h2", {}, "Node ", h("code", {}, n.key), " ", badge(n.status)),
    h(
      "dl",
      { class: "facts" },
      fact("Job", h("a", { href: `#/jobs/${n.job_id}` }, `job ${n.job_id}`)),
      fact("Run", n.run_id ? [h("a", { href: `#/runs/${n.run_id}` }, `run ${n.run_id}`), " ", n.run_status ? badge(n.run_status) : null] : "none yet"),
      fact("Tries", String(n.tries)),
      fact("Runs after", parentsText(n)),
      n.allow_failure ? fact("Failure", "allowed: it does not fail the workflow run") : null,
      fact("Message", n.message || "—"),
      fact("Started", time(n.started_at)),
      fact("Finished", time(n.finished_at)),
      fact("Params", n.params ? h("pre", { class: "params" }, n.params) : "the job's"),
      fact("Output", n.output === null || n.output === undefined ? "none" : h("pre", { class: "params output" }, JSON.stringify(n.output, null, 2))),
    ),
    operable() && ACTIONABLE.has(n.status)
      ? h(
          "div",
          { class: "actions" },
          nodeAction(n, "Retry", "retry"),
          nodeAction(n, "Mark succeeded", "mark-succeeded"),
          h("span", { class: "muted" }, "Retry runs it again; either way what it skipped runs after it."),
        )
      : null,
  ];
  const graph = chooser(describeRunNode, details, `Graph of workflow run ${id}`);
  const cancel = () =>
    action(
      "Cancel workflow run",
      status,
      async () => {
        if (!window.confirm(`Cancel workflow run ${run.id} of ${run.workflow_name}? Waiting nodes are skipped, running ones cancelled.`)) return;
        update(await api("POST", `/api/workflow-runs/${run.id}/cancel`));
        status.replaceChildren(notice("Cancelled.", "info"));
      },
      "danger",
    );
  const counts = () => {
    const by = new Map();
    for (const n of run.nodes) by.set(n.status, (by.get(n.status) || 0) + 1);
    return NODE_STATUSES.filter((s) => by.has(s))
      .map((s) => `${by.get(s)} ${s}`)
      .join(", ");
  };
  function render() {
    fill(
      head,
      h("h1", {}, `Workflow run ${run.id} `, badge(run.status)),
      canWrite && run.status === "running" ? h("div", { class: "actions" }, cancel()) : null,
    );
    fill(
      facts,
      fact("Workflow", h("a", { href: `#/workflows/${run.workflow_id}` }, run.workflow_name || `workflow ${run.workflow_id}`)),
      fact("Kind", run.kind),
      fact("Fire time", time(run.fire_time)),
      fact("Finished", time(run.finished_at)),
      fact("Duration", runDuration(run)),
      run.requested_by ? fact("Requested by", run.requested_by) : null,
      fact("Nodes", `${run.nodes.length}: ${counts()}`),
      fact("Message", run.message || "—"),
    );
    graph.render(run.nodes);
  }
  /** Reads the workflow run again until it ends. A failed read is shown; reading goes on after
   *  a network or server error, not after the API refused it (signed out, deleted). */
  function follow() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (left) return;
      let again = true;
      try {
        const next = await api("GET", `/api/workflow-runs/${id}`);
        if (left) return;
        // What an action said is over once the workflow run it changed has ended.
        if (run.status === "running" && next.status !== "running") status.replaceChildren();
        run = next;
        readError.replaceChildren();
        render();
      } catch (e) {
        if (left) return;
        readError.replaceChildren(notice(e.message));
        again = e.status === 0 || e.status >= 500;
      }
      if (again && run.status === "running") follow();
    }, REFRESH_MS);
  }
  show(head, readError, status, facts, h("h2", {}, "Graph"), graph.graph, dagLegend(NODE_STATUSES), graph.box);
  render();
  if (run.status === "running") follow();
}
