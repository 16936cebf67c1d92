// The console in headless Chromium, as a person uses it, against a real admin (started by
// integration/tests/scenarios/console.rs with PostgreSQL, the broker and a shell worker).
//
// Environment: CADENZA_URL, CADENZA_ADMIN_USER / CADENZA_ADMIN_PASSWORD (an admin),
// CADENZA_VIEWER_USER / CADENZA_VIEWER_PASSWORD (a viewer), CADENZA_JOB_TYPE (served by a shell
// worker), CADENZA_WORKFLOW (the name of a workflow a → (b, c) → d whose b fails the first time
// only), CADENZA_LONG_WORKFLOW (one whose first node sleeps a minute), CADENZA_MISFIRED_JOB (a job
// with a span of 60 skipped fire times), CADENZA_SHOTS (a directory for screenshots), PLAYWRIGHT_CORE (the playwright-core
// module), CHROMIUM (the browser). Exits non-zero on the first failed step, naming it.

import assert from "node:assert/strict";
import path from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const base = env("CADENZA_URL");
const shots = env("CADENZA_SHOTS");
const jobType = env("CADENZA_JOB_TYPE");
const { chromium } = await import(env("PLAYWRIGHT_CORE"));

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});

const problems = [];
let step = "start";
async function check(name, f) {
  step = name;
  const started = Date.now();
  await f();
  console.log(`ok  ${name} (${Date.now() - started} ms)`);
}

async function newPage(width = 1280, height = 900) {
  // Not the machine's zone (UTC here): times must show and round-trip in the viewer's zone.
  const page = await browser.newPage({ viewport: { width, height }, timezoneId: "Europe/Paris" });
  page.setDefaultTimeout(20_000);
  page.on("pageerror", (e) => problems.push(`${step}: page error: ${e.message}`));
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function signIn(page, user, password) {
  await page.goto(`${base}/`);
  await page.getByLabel("Name").fill(user);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Dashboard" }).waitFor();
}

try {
  const page = await newPage();

  await check("a wrong password is refused at the sign-in form", async () => {
    await page.goto(`${base}/`);
    await page.getByLabel("Name").fill(env("CADENZA_ADMIN_USER"));
    await page.getByLabel("Password").fill("not the password");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").filter({ hasText: "the name or the password is wrong" }).waitFor();
    await shot(page, "sign-in");
  });

  await check("an admin signs in and sees the job list", async () => {
    await signIn(page, env("CADENZA_ADMIN_USER"), env("CADENZA_ADMIN_PASSWORD"));
    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    await page.getByRole("link", { name: "New job" }).waitFor();
  });

  await check("a cron job in a time zone shows its next fire times as it is typed", async () => {
    await page.getByRole("link", { name: "New job" }).click();
    await page.getByRole("heading", { name: "New job" }).waitFor();
    await page.getByLabel("Name", { exact: true }).fill("console cron");
    await page.getByLabel("Job type").fill(jobType);
    await page.getByLabel("Time zone").fill("Asia/Tokyo");
    await page.getByLabel("Cron expression").fill("0 15 10 * * *");
    const items = page.locator(".preview li");
    await page.locator(".preview").getByText("(Asia/Tokyo)").waitFor();
    await items.first().waitFor();
    assert.equal(await items.count(), 5);
    for (const text of await items.allTextContents()) assert.match(text, /10:15:00\+09:00/);
    // Jitter: the preview says the new job's fire times move by its offset.
    await page.getByLabel("Jitter (ms)").fill("60000");
    await page.locator(".preview").getByText("each moves by the new job's jitter offset").waitFor();
    await shot(page, "job-form");
    await page.getByLabel("Jitter (ms)").fill("0");
  });

  await check("a wrong field shows the API's message at that field", async () => {
    await page.getByLabel("Cron expression").fill("0 61 * * * *");
    await page.locator(".preview-error").waitFor();
    await page.getByRole("button", { name: "Create job" }).click();
    const box = page.locator('[data-field="schedule.expr"]');
    await box.locator(".field-error").filter({ hasText: /./ }).waitFor();
    assert.match(await box.locator(".field-error").textContent(), /schedule\.expr/);
    assert.equal(await page.getByLabel("Cron expression").getAttribute("aria-invalid"), "true");
    await shot(page, "job-form-invalid");
  });

  let jobUrl;
  await check("the job is created and its runs appear", async () => {
    await page.getByLabel("Kind").selectOption("fix_rate");
    await page.getByLabel("Every (ms)").fill("1000");
    await page.getByLabel("Params").fill("echo tick");
    await page.getByRole("button", { name: "Create job" }).click();
    await page.getByRole("heading", { name: "console cron" }).waitFor();
    jobUrl = page.url();
    // The page lists runs as they were when it loaded: reload until one has succeeded.
    const deadline = Date.now() + 30_000;
    for (;;) {
      if ((await page.locator("td .badge.s-succeeded").count()) > 0) break;
      assert.ok(Date.now() < deadline, "no run of the new job succeeded within 30 s");
      await page.waitForTimeout(1000);
      await page.reload();
      await page.getByRole("heading", { name: "Recent runs" }).waitFor();
    }
    await shot(page, "job");
  });

  await check("trigger now with params: the run shows them and its log", async () => {
    await page.getByRole("button", { name: "Disable" }).click();
    await page.getByRole("button", { name: "Enable" }).waitFor();
    await page.getByLabel("Params for this run").fill("echo first; sleep 2; echo second");
    const reads = [];
    const count = (r) => {
      if (/\/api\/triggers\/\d+(\/log)?$/.test(new URL(r.url()).pathname)) reads.push(new URL(r.url()).pathname);
    };
    page.on("request", count);
    await page.getByRole("button", { name: "Run now" }).click();
    await page.getByRole("heading", { name: /^Run \d+/ }).waitFor();
    await page.getByText("echo first; sleep 2; echo second").waitFor();
    // The log grows while the run runs: the first line shows before the second.
    const log = page.locator("pre.log");
    await log.filter({ hasText: "first" }).waitFor();
    const early = await log.textContent();
    await log.filter({ hasText: "second" }).waitFor();
    await page.locator(".badge.s-succeeded").first().waitFor();
    page.off("request", count);
    console.log(`    log when "first" arrived: ${JSON.stringify(early)}; requests: ${reads.join(" ")}`);
    // The log is followed over one event stream, not by reading the run again and again.
    assert.equal(reads.filter((p) => p.endsWith("/log")).length, 1, reads.join(" "));
    assert.ok(reads.filter((p) => !p.endsWith("/log")).length <= 2, reads.join(" "));
    await shot(page, "run");
  });

  await check("the dashboard charts the day's runs", async () => {
    await page.getByRole("link", { name: "Dashboard" }).click();
    await page.getByRole("heading", { name: "Runs per day (UTC)" }).waitFor();
    const runs = Number((await page.locator(".tile").first().locator(".tile-value").textContent()).replace(/\D/g, ""));
    assert.ok(runs >= 1, `the runs tile shows ${runs}`);
    assert.ok((await page.locator('svg.chart[aria-label*="Runs per day"] rect').count()) >= 1, "a bar for today");
    // Scheduler health: the one admin is alive, holds every shard, and publishes on time.
    const tile = (label) => page.locator(".tile", { has: page.locator(".tile-label", { hasText: label }) });
    assert.equal((await tile("Admins alive").locator(".tile-value").textContent()).trim(), "1");
    assert.match(await tile("Admins alive").textContent(), /all 64 shards held/);
    const bars = page.locator('svg.chart[aria-label^="Shards held"]');
    assert.match(await bars.textContent(), /64/);
    const admin = page.locator("tbody tr", { has: page.locator(".badge.s-alive") });
    assert.equal(await admin.count(), 1);
    // How far ahead it takes runs for sending: the default CADENZA_PUBLISH_AHEAD_MS.
    const admins = page.locator("table", { has: page.locator("th", { hasText: "Takes runs ahead" }) });
    const columns = await admins.locator("thead th").allTextContents();
    const column = columns.indexOf("Takes runs ahead");
    assert.ok(column >= 0, `columns: ${columns.join(", ")}`);
    const row = admins.locator("tbody tr", { has: page.locator(".badge.s-alive") });
    assert.equal((await row.locator("td").nth(column).textContent()).trim(), "250 ms");
    await page.waitForFunction(() => /\d+ ms/.test(document.querySelector(".tiles")?.textContent || ""), null, { timeout: 30_000 });
    await page.getByRole("link", { name: "30 days" }).click();
    await page.waitForURL(/days=30/);
    await page.locator('svg.chart[aria-label*="Runs per day"]').waitFor();
    await shot(page, "dashboard");
  });

  await check("replay a window: a dry run lists the runs, then they run again", async () => {
    await page.getByRole("link", { name: "Replay" }).click();
    await page.getByRole("heading", { name: "Replay" }).waitFor();
    await page.getByLabel("Job type").fill(jobType);
    // Wall times in the browser's zone, as a person there would type them.
    const [from, to] = await page.evaluate(() => {
      const pad = (n) => String(n).padStart(2, "0");
      const local = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
      return [local(new Date(Date.now() - 10 * 60_000)), local(new Date())];
    });
    await page.getByLabel("Fired from (your time)").fill(from);
    await page.getByLabel("Fired before (your time)").fill(to);
    await page.getByLabel("Partition offsets").fill("0:nonsense");
    await page.getByRole("button", { name: "Dry run" }).click();
    await page.locator('[data-field="partitions"] .field-error').filter({ hasText: "partition:from-to" }).waitFor();
    await page.getByLabel("Partition offsets").fill("");
    await page.getByRole("button", { name: "Dry run" }).click();
    const heading = page.getByRole("heading", { name: /would run again/ });
    await heading.waitFor();
    const planned = Number((await heading.textContent()).match(/\d+/)[0]);
    assert.ok(planned >= 1, `${planned} runs planned`);
    await shot(page, "replay");
    await page.getByRole("button", { name: /^Replay \d+ run/ }).click();
    await page.getByText(`Replayed ${planned} run`).waitFor();
  });

  await check("the runs page filters by job and status", async () => {
    const id = jobUrl.split("/").pop();
    await page.goto(`${base}/#/runs?job_id=${id}&status=succeeded`);
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    await page.locator("tbody tr").first().waitFor();
    for (const s of await page.locator("tbody .badge").allTextContents()) assert.equal(s, "succeeded");
    // A time filter round-trips in the viewer's zone (Europe/Paris here).
    await page.getByLabel("Fired from").fill("2026-01-02T03:04");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.waitForURL(/from=2026-01-02T02%3A04/);
    await page.getByRole("heading", { name: "Runs" }).waitFor();
    assert.equal(await page.getByLabel("Fired from").inputValue(), "2026-01-02T03:04");
    await shot(page, "runs");
  });

  await check("the workers page shows the worker and its partitions", async () => {
    await page.getByRole("link", { name: "Workers" }).click();
    await page.getByRole("heading", { name: "Workers" }).waitFor();
    await page.locator("tbody tr .badge.s-alive").first().waitFor();
    await shot(page, "workers");
  });

  await check("the job list searches by name", async () => {
    await page.getByRole("link", { name: "Jobs", exact: true }).click();
    await page.getByRole("searchbox", { name: "Name" }).fill("CONSOLE");
    // The page shows "Loading…" before it asks for the list: once the search's answer is in,
    // the first row is the new table's, not the old one's.
    const listed = page.waitForResponse((r) => /\/api\/jobs\?.*name=CONSOLE/.test(r.url()));
    await page.getByRole("button", { name: "Search" }).click();
    await page.waitForURL(/name=CONSOLE/);
    await listed;
    await page.locator("tbody tr").first().waitFor();
    assert.equal(await page.locator("tbody tr").count(), 1);
    await shot(page, "jobs");
  });

  await check("a job found an hour behind shows its skipped fire times as one span", async () => {
    await page.goto(`${base}/#/jobs/${env("CADENZA_MISFIRED_JOB")}`);
    await page.getByRole("heading", { name: "Skipped fire times" }).waitFor();
    const section = page.locator("section.misfires");
    assert.match(await section.locator("p").first().textContent(), /^60 skipped in all/);
    const rows = section.locator("tbody tr");
    assert.equal(await rows.count(), 1);
    const cells = await rows.first().locator("td").allTextContents();
    assert.equal(cells[2], "60");
    assert.match(cells[3], /^do_nothing after /);
    assert.equal(cells[4], "open");
    await shot(page, "job-misfires");
  });

  await check("the audit shows who created the job", async () => {
    await page.getByRole("link", { name: "Audit" }).click();
    await page.getByRole("heading", { name: "Audit" }).waitFor();
    const row = page.locator("tbody tr").filter({ hasText: "job.create" }).first();
    await row.waitFor();
    assert.match(await row.textContent(), new RegExp(env("CADENZA_ADMIN_USER")));
    await shot(page, "audit");
  });

  await check("the alarms page lists deliveries", async () => {
    await page.getByRole("link", { name: "Alarms" }).click();
    await page.getByRole("heading", { name: "Alarms" }).waitFor();
    await page.getByText("No alarm.").waitFor();
  });

  await check("an admin adds a user; a new token is shown once, works, and stops when revoked", async () => {
    await page.getByRole("link", { name: "Users" }).click();
    await page.getByRole("heading", { name: "Users and tokens" }).waitFor();
    const create = page.locator("form").filter({ has: page.getByRole("heading", { name: "New user" }) });
    await create.getByLabel("Name").fill("otto");
    await create.getByLabel("Role").selectOption("operator");
    await create.getByLabel("Job-type patterns").fill("console.*");
    await create.getByLabel("Password").fill("short");
    await create.getByRole("button", { name: "Create user" }).click();
    await create.locator('[data-field="password"] .field-error').filter({ hasText: /10/ }).waitFor();
    await create.getByLabel("Password").fill("a long enough password");
    await create.getByRole("button", { name: "Create user" }).click();
    await page.getByRole("cell", { name: "otto" }).waitFor();
    const tokens = page.locator("form").filter({ has: page.getByRole("heading", { name: "New token" }) });
    await tokens.getByLabel("Name").fill("e2e");
    await tokens.getByRole("button", { name: "Create token" }).click();
    const secret = page.locator("pre.secret");
    await secret.waitFor();
    const token = (await secret.textContent()).trim();
    assert.match(token, /^cdz_[0-9a-f]{64}$/);
    const whoami = await fetch(`${base}/api/session`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(whoami.status, 200);
    assert.equal((await whoami.json()).actor, env("CADENZA_ADMIN_USER"));
    await shot(page, "users");
    page.once("dialog", (d) => d.accept());
    await page.getByRole("button", { name: "Revoke" }).first().click();
    await page.getByText("revoked").first().waitFor();
    const after = await fetch(`${base}/api/session`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(after.status, 401, "a revoked token is refused");
  });

  await check("a concurrency group holds a job to its limit; queued runs show their place in line", async () => {
    await page.getByRole("link", { name: "Groups", exact: true }).click();
    await page.getByRole("heading", { name: "Concurrency groups" }).waitFor();
    await page.getByLabel("Name", { exact: true }).fill("warehouse");
    await page.getByLabel("Limit").fill("0");
    await page.getByRole("button", { name: "Create group" }).click();
    await page.locator('[data-field="limit"] .field-error').filter({ hasText: /between 1 and/ }).waitFor();
    await page.getByLabel("Limit").fill("1");
    await page.getByRole("button", { name: "Create group" }).click();
    await page.getByRole("heading", { name: "Group warehouse" }).waitFor();
    // A job joins it in the job form.
    await page.goto(`${base}/#/jobs/new`);
    await page.getByLabel("Name", { exact: true }).fill("console grouped");
    await page.getByLabel("Job type").fill(jobType);
    await page.getByLabel("Kind").selectOption("none");
    await page.getByLabel("Concurrency group").selectOption("warehouse");
    await page.getByLabel("Priority").fill("5");
    await page.getByRole("button", { name: "Create job" }).click();
    await page.getByRole("heading", { name: "console grouped" }).waitFor();
    await page.getByText("group warehouse, priority 5, overlap allow").waitFor();
    const groupedUrl = page.url();
    // Three runs at once: one runs, two wait their turn.
    const runs = [];
    for (let i = 0; i < 3; i++) {
      await page.goto(groupedUrl);
      await page.getByLabel("Params for this run").fill("echo grouped; sleep 60");
      await page.getByRole("button", { name: "Run now" }).click();
      await page.getByRole("heading", { name: /^Run \d+/ }).waitFor();
      runs.push(page.url());
    }
    await page.locator("#view h1 .badge").filter({ hasText: "queued" }).waitFor();
    const facts = page.locator(".facts");
    await facts.getByText("Place in line").waitFor();
    assert.equal(await facts.locator("dt:has-text('Place in line') + dd").textContent(), "2");
    await page.locator(".facts").getByText(/waits for a slot of concurrency group warehouse \(1 of 1 in use\); 2nd in line/).waitFor();
    await shot(page, "run-queued");
    await page.getByRole("link", { name: "Groups", exact: true }).click();
    await page.getByRole("cell", { name: "1 of 1" }).waitFor();
    await shot(page, "groups");
    await page.getByRole("link", { name: "warehouse" }).click();
    await page.getByRole("heading", { name: "Queue" }).waitFor();
    await page.getByText("1 of 1").first().waitFor();
    const places = page.locator("main table tbody tr td:first-child");
    await places.nth(1).waitFor();
    assert.deepEqual(await places.allTextContents(), ["1", "2"]);
    await shot(page, "group");
    // The queued runs are cancelled from their pages; then the running one.
    for (const url of [runs[2], runs[1], runs[0]]) {
      await page.goto(url);
      await page.getByRole("heading", { name: /^Run \d+/ }).waitFor();
      page.once("dialog", (d) => d.accept());
      await page.getByRole("button", { name: "Cancel run" }).click();
      await page.locator("#view h1 .badge").filter({ hasText: "cancelled" }).waitFor({ timeout: 30_000 });
    }
    await page.goto(`${base}/#/groups/warehouse`);
    await page.getByText("No run waits.").waitFor();
  });

  await check("a viewer sees no write buttons", async () => {
    const viewer = await newPage();
    await signIn(viewer, env("CADENZA_VIEWER_USER"), env("CADENZA_VIEWER_PASSWORD"));
    await viewer.getByRole("link", { name: "Jobs", exact: true }).click();
    await viewer.getByRole("searchbox", { name: "Name" }).waitFor();
    assert.equal(await viewer.getByRole("link", { name: "New job" }).count(), 0);
    assert.equal(await viewer.getByRole("link", { name: "Replay" }).count(), 0, "the Replay link");
    await viewer.goto(jobUrl);
    await viewer.getByRole("heading", { name: "Recent runs" }).waitFor();
    for (const name of ["Edit", "Disable", "Enable", "Delete", "Run now"]) {
      assert.equal(await viewer.getByRole("button", { name, exact: true }).count(), 0, name);
      assert.equal(await viewer.getByRole("link", { name, exact: true }).count(), 0, name);
    }
    await viewer.goto(`${base}/#/groups/warehouse`);
    await viewer.getByRole("heading", { name: "Queue" }).waitFor();
    for (const name of ["Delete", "Save"]) assert.equal(await viewer.getByRole("button", { name, exact: true }).count(), 0, name);
    await viewer.goto(`${base}/#/groups`);
    await viewer.getByRole("heading", { name: "Concurrency groups" }).waitFor();
    assert.equal(await viewer.getByRole("button", { name: "Create group" }).count(), 0);
    await viewer.close();
  });

  await check("every page is reachable by keyboard alone", async () => {
    const kb = await newPage();
    await kb.goto(`${base}/`);
    await kb.getByLabel("Name").focus();
    await kb.keyboard.type(env("CADENZA_ADMIN_USER"));
    await kb.keyboard.press("Tab");
    await kb.keyboard.type(env("CADENZA_ADMIN_PASSWORD"));
    await kb.keyboard.press("Enter");
    await kb.getByRole("heading", { name: "Dashboard" }).waitFor();
    // Tab from the top of the page to the Jobs link, to the job, to its Run now form; run it.
    const tabTo = async (want, limit = 80) => {
      for (let i = 0; i < limit; i++) {
        await kb.keyboard.press("Tab");
        const at = await kb.evaluate(() => {
          const el = document.activeElement;
          return {
            text: (el?.textContent || "").trim(),
            name: el?.getAttribute("name") || "",
            ring: el ? getComputedStyle(el).outlineStyle !== "none" : false,
          };
        });
        if (want(at)) {
          assert.ok(at.ring, `the focused "${at.text || at.name}" shows a focus ring`);
          return;
        }
      }
      throw new Error("not reachable by Tab");
    };
    await kb.evaluate(() => document.activeElement?.blur());
    await tabTo((a) => a.text === "Jobs");
    await kb.keyboard.press("Enter");
    await kb.getByRole("heading", { name: "Jobs" }).waitFor();
    await tabTo((a) => a.text === "console cron");
    await kb.keyboard.press("Enter");
    await kb.getByRole("heading", { name: "Recent runs" }).waitFor();
    await tabTo((a) => a.name === "params");
    await kb.keyboard.type("echo typed at the keyboard");
    await tabTo((a) => a.text === "Run now");
    await kb.keyboard.press("Enter");
    await kb.getByRole("heading", { name: /^Run \d+/ }).waitFor();
    await kb.locator(".log").getByText("typed at the keyboard").waitFor({ timeout: 30_000 });
    await kb.close();
  });

  await check("a running run is cancelled from its page", async () => {
    await page.goto(jobUrl);
    await page.getByLabel("Params for this run").fill("echo started; sleep 120");
    await page.getByRole("button", { name: "Run now" }).click();
    await page.getByRole("heading", { name: /^Run \d+/ }).waitFor();
    await page.locator("pre.log").filter({ hasText: "started" }).waitFor();
    page.once("dialog", (d) => d.accept());
    await page.getByRole("button", { name: "Cancel run" }).click();
    await page.getByText("Cancel sent to the worker").waitFor();
    // The worker stops the handler and reports; the page follows the run to its end.
    await page.locator("h1 .badge.s-cancelled").waitFor({ timeout: 30_000 });
    await page.getByText(/^cancelled by /).waitFor();
    assert.equal(await page.getByRole("button", { name: "Cancel run" }).count(), 0);
  });

  /** Boxes of a graph's nodes by key, and its edges as {from, to, start, end} points. */
  const geometry = (page) =>
    page.evaluate(() => {
      const nodes = {};
      for (const g of document.querySelectorAll("svg.dag .dag-node")) {
        const r = g.querySelector(".box").getBoundingClientRect();
        nodes[g.dataset.key] = { x: r.x, y: r.y, right: r.right, bottom: r.bottom };
      }
      const edges = [...document.querySelectorAll("svg.dag .dag-edge")].map((p) => {
        const m = p.getScreenCTM();
        const at = (len) => {
          const q = p.getPointAtLength(len);
          return { x: m.a * q.x + m.c * q.y + m.e, y: m.b * q.x + m.d * q.y + m.f };
        };
        return { from: p.dataset.from, to: p.dataset.to, start: at(0), end: at(p.getTotalLength()) };
      });
      return { nodes, edges };
    });

  let workflowUrl;
  let workflowRunUrl;
  await check("a workflow's graph; a failed node retried from its workflow run, every node then green", async () => {
    const name = env("CADENZA_WORKFLOW");
    await page.getByRole("link", { name: "Workflows" }).click();
    await page.getByRole("heading", { name: "Workflows" }).waitFor();
    await page.getByRole("searchbox", { name: "Name" }).fill("DIAMOND");
    await page.getByRole("button", { name: "Search" }).click();
    await page.waitForURL(/name=DIAMOND/);
    await page.getByRole("link", { name }).click();
    await page.getByRole("heading", { name: "Recent workflow runs" }).waitFor();
    workflowUrl = page.url();
    // The diamond is drawn in three columns, parents left of children, arrows into the children.
    const { nodes, edges } = await geometry(page);
    assert.deepEqual(Object.keys(nodes).sort(), ["a", "b", "c", "d"]);
    assert.ok(nodes.a.right < nodes.b.x && nodes.b.x === nodes.c.x && nodes.b.right < nodes.d.x, JSON.stringify(nodes));
    assert.ok(nodes.b.bottom <= nodes.c.y || nodes.c.bottom <= nodes.b.y, `b and c overlap: ${JSON.stringify(nodes)}`);
    assert.deepEqual(edges.map((e) => `${e.from}>${e.to}`).sort(), ["a>b", "a>c", "b>d", "c>d"]);
    for (const e of edges) {
      const [from, to] = [nodes[e.from], nodes[e.to]];
      assert.ok(Math.abs(e.start.x - from.right) < 2 && e.start.y > from.y && e.start.y < from.bottom, `${e.from}>${e.to} starts at ${JSON.stringify(e.start)}`);
      assert.ok(Math.abs(e.end.x - to.x) < 2 && e.end.y > to.y && e.end.y < to.bottom, `${e.from}>${e.to} ends at ${JSON.stringify(e.end)}`);
    }
    await page.getByText("No workflow run yet.").waitFor();
    await shot(page, "workflow");

    await page.getByRole("button", { name: "Trigger now" }).click();
    await page.getByRole("heading", { name: /^Workflow run \d+/ }).waitFor();
    workflowRunUrl = page.url();
    const id = workflowRunUrl.split("/").pop();
    const reads = [];
    const count = (r) => {
      if (new URL(r.url()).pathname === `/api/workflow-runs/${id}`) reads.push(Date.now());
    };
    page.on("request", count);
    // The page follows the workflow run: b fails (red), so d is skipped and the run failed.
    const node = (key, status) => page.locator(`svg.dag .dag-node.s-${status}[data-key="${key}"]`);
    await node("b", "failed").waitFor({ timeout: 60_000 });
    await node("d", "skipped").waitFor({ timeout: 30_000 });
    await page.locator("h1 .badge.s-failed").waitFor({ timeout: 30_000 });
    assert.equal(await node("a", "succeeded").count(), 1);
    assert.equal(await node("c", "succeeded").count(), 1);
    const fill = (key) => page.locator(`svg.dag .dag-node[data-key="${key}"] .box`).evaluate((b) => getComputedStyle(b).fill);
    assert.equal(await fill("b"), "rgb(251, 224, 221)", "a failed node is red");
    assert.equal(await fill("a"), "rgb(220, 242, 227)", "a succeeded node is green");
    assert.ok(reads.length >= 1, "the page read the workflow run again while it ran");
    // The node's details: its run, linked to the run page, and the actions.
    await page.getByRole("button", { name: /^b: failed/ }).click();
    await page.getByRole("heading", { name: /^Node b failed/ }).waitFor();
    const runLink = page.locator(".node-details").getByRole("link", { name: /^run \d+$/ });
    assert.match(await runLink.getAttribute("href"), /^#\/runs\/\d+$/);
    await page.getByRole("button", { name: "Mark succeeded" }).waitFor();
    await shot(page, "workflow-run");
    // A viewer sees the same, without the buttons.
    const viewer = await newPage();
    await signIn(viewer, env("CADENZA_VIEWER_USER"), env("CADENZA_VIEWER_PASSWORD"));
    await viewer.getByRole("link", { name: "Workflows" }).click();
    await viewer.getByRole("link", { name }).waitFor();
    assert.equal(await viewer.getByRole("button", { name: "Trigger now" }).count(), 0, "Trigger now");
    await viewer.goto(workflowRunUrl);
    await viewer.getByRole("button", { name: /^b: failed/ }).click();
    await viewer.getByRole("heading", { name: /^Node b failed/ }).waitFor();
    for (const label of ["Retry", "Mark succeeded"]) {
      assert.equal(await viewer.getByRole("button", { name: label, exact: true }).count(), 0, label);
    }
    await viewer.close();
    await page.getByRole("button", { name: "Retry" }).click();
    // b runs again and succeeds; d runs; the workflow run ends succeeded, every node green.
    await page.locator("h1 .badge.s-succeeded").waitFor({ timeout: 60_000 });
    assert.equal(await page.locator("svg.dag .dag-node.s-succeeded").count(), 4);
    assert.match(await page.locator('svg.dag .dag-node[data-key="b"]').textContent(), /try 2/);
    assert.equal(await fill("d"), "rgb(220, 242, 227)");
    assert.equal(await page.getByRole("button", { name: "Retry" }).count(), 0);
    // Once it ended, the page stops reading it.
    const ended = reads.length;
    await page.waitForTimeout(3000);
    page.off("request", count);
    assert.equal(reads.length, ended, "the page read the workflow run after it ended");
    await shot(page, "workflow-run-retried");
    // Its run is one of the workflow's recent runs, succeeded.
    await page.locator("dl.facts").getByRole("link", { name }).click();
    await page.getByRole("heading", { name: "Recent workflow runs" }).waitFor();
    const row = page.locator("tbody tr").filter({ has: page.getByRole("link", { name: id, exact: true }) });
    await row.locator(".badge.s-succeeded").waitFor();
  });

  await check("a workflow triggered from the list runs, and is cancelled from its page", async () => {
    await page.getByRole("link", { name: "Workflows" }).click();
    await page.getByRole("heading", { name: "Workflows" }).waitFor();
    const row = page.locator("tbody tr").filter({ has: page.getByRole("link", { name: env("CADENZA_LONG_WORKFLOW") }) });
    await row.getByRole("button", { name: "Trigger now" }).click();
    await page.getByRole("heading", { name: /^Workflow run \d+/ }).waitFor();
    await page.locator('svg.dag .dag-node.s-running[data-key="sleep"]').waitFor({ timeout: 30_000 });
    assert.equal(await page.locator('svg.dag .dag-node.s-waiting[data-key="after"]').count(), 1);
    page.once("dialog", (d) => d.accept());
    await page.getByRole("button", { name: "Cancel workflow run" }).click();
    await page.locator("h1 .badge.s-cancelled").waitFor();
    await page.locator('svg.dag .dag-node.s-cancelled[data-key="sleep"]').waitFor();
    await page.locator('svg.dag .dag-node.s-skipped[data-key="after"]').waitFor();
    assert.equal(await page.getByRole("button", { name: "Cancel workflow run" }).count(), 0);
    // A cancelled workflow run stays so: its cancelled node offers no retry.
    await page.getByRole("button", { name: /^sleep: cancelled/ }).click();
    await page.getByRole("heading", { name: /^Node sleep cancelled/ }).waitFor();
    assert.equal(await page.getByRole("button", { name: "Retry" }).count(), 0);
  });

  await check("no layout break at 390 px or 1280 px on any page", async () => {
    for (const [w, h] of [[390, 844], [1280, 800]]) {
      const p = await newPage(w, h);
      await signIn(p, env("CADENZA_ADMIN_USER"), env("CADENZA_ADMIN_PASSWORD"));
      const pages = [
        ["#/dashboard", "Dashboard"],
        ["#/jobs", "Jobs"],
        [jobUrl.slice(jobUrl.indexOf("#")), "Recent runs"],
        [`${jobUrl.slice(jobUrl.indexOf("#"))}/edit`, "Edit console cron"],
        ["#/jobs/new", "New job"],
        ["#/runs", "Runs"],
        ["#/workers", "Workers"],
        ["#/groups", "Concurrency groups"],
        ["#/groups/warehouse", "Queue"],
        ["#/replay", "Replay"],
        ["#/alarms", "Alarms"],
        ["#/audit", "Audit"],
        ["#/access", "Users and tokens"],
        ["#/workflows", "Workflows"],
        [workflowUrl.slice(workflowUrl.indexOf("#")), "Recent workflow runs"],
        [workflowRunUrl.slice(workflowRunUrl.indexOf("#")), "Graph"],
      ];
      for (const [hash, heading] of pages) {
        await p.goto(`${base}/${hash}`);
        await p.getByRole("heading", { name: heading, exact: true }).first().waitFor();
        const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${hash} at ${w} px is ${overflow} px wider than the screen`);
      }
      if (w === 390) {
        await p.goto(jobUrl);
        await p.getByRole("heading", { name: "Recent runs" }).waitFor();
        await shot(p, "job-390");
        await p.goto(`${base}/#/dashboard`);
        await p.getByRole("heading", { name: "Scheduler" }).waitFor();
        await shot(p, "dashboard-390");
      }
      await p.close();
    }
  });

  assert.deepEqual(problems, [], "errors in the page");
  console.log("console: every step passed");
} catch (e) {
  console.error(`FAILED at "${step}": ${e.stack || e}`);
  for (const [i, p] of browser.contexts().flatMap((c) => c.pages()).entries()) {
    try {
      await p.screenshot({ path: path.join(shots, `failed-${i}.png`), fullPage: true });
      console.error(`page ${i} (${p.url()}):\n${await p.locator("main").innerText()}`);
    } catch {}
  }
  if (problems.length) console.error(problems.join("\n"));
  process.exitCode = 1;
} finally {
  await browser.close();
}
