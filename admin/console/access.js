// Access: your personal API tokens (create, shown once; revoke) and, for admins, the users
// (create, change role, patterns or password, delete) and everyone's tokens.

import { api, query } from "./api.js";
import { apiForm, badge, field, h, notice, show, table, time } from "./ui.js";

const list = (v) =>
  v
    .split(/[,\s]+/)
    .map((x) => x.trim())
    .filter(Boolean);

function tokensSection(me, tokens, reload, shown) {
  const name = h("input", { required: true, maxlength: 100, placeholder: "ci, grafana, …" });
  const days = h("input", { type: "number", min: 1, max: 366, placeholder: "never" });
  const secret = h("div", { "aria-live": "polite" }, shown);
  const form =
    me.via === "service_token"
      ? h("p", { class: "muted" }, "The service token cannot own personal tokens; sign in as a user to create one.")
      : apiForm(
          { class: "card" },
          [h("h3", {}, "New token"), field("Name", "name", name), field("Expires in (days)", "expires_in_days", days), h("button", { type: "submit", class: "primary" }, "Create token")],
          () => ({ name: name.value, ...(days.value ? { expires_in_days: Number(days.value) } : {}) }),
          async (body) => {
            const t = await api("POST", "/api/tokens", body);
            await reload([notice("Copy the token now: it is shown this once.", "info"), h("pre", { class: "secret" }, t.token)]);
          },
        );
  const revoke = async (t) => {
    if (!window.confirm(`Revoke token “${t.name}” (${t.prefix}…)? It stops working at once.`)) return;
    await api("DELETE", `/api/tokens/${t.id}`);
    await reload();
  };
  return [
    h("h2", {}, me.role === "admin" ? "API tokens (everyone's)" : "Your API tokens"),
    table(
      [
        ["Name", (t) => t.name],
        ["Token", (t) => h("code", {}, `${t.prefix}…`)],
        ...(me.role === "admin" ? [["User", (t) => t.user_id]] : []),
        ["Created", (t) => time(t.created_at)],
        ["Expires", (t) => time(t.expires_at)],
        ["Last used", (t) => time(t.last_used_at)],
        [
          "State",
          (t) =>
            t.revoked_at
              ? badge("revoked")
              : t.expires_at && new Date(t.expires_at) < new Date()
                ? badge("expired")
                : h("button", { type: "button", class: "danger", onclick: () => revoke(t) }, "Revoke"),
        ],
      ],
      tokens,
      "No token.",
    ),
    secret,
    form,
  ];
}

function usersSection(me, users, reload) {
  const name = h("input", { required: true, maxlength: 100 });
  const role = h("select", {}, ["viewer", "operator", "admin"].map((r) => h("option", { value: r }, r)));
  const patterns = h("input", { placeholder: "billing.*, reports.daily" });
  const password = h("input", { type: "password", autocomplete: "new-password", minlength: 10 });
  const create = apiForm(
    { class: "card" },
    [
      h("h3", {}, "New user"),
      field("Name", "name", name),
      field("Role", "role", role),
      field("Job-type patterns", "job_types", patterns, "For operators and viewers; * matches any run of characters."),
      field("Password", "password", password, "10 characters or more."),
      h("button", { type: "submit", class: "primary" }, "Create user"),
    ],
    () => ({ name: name.value, role: role.value, job_types: list(patterns.value), password: password.value }),
    async (body) => {
      await api("POST", "/api/users", body);
      await reload();
    },
  );
  const edit = (u) => {
    const r = h("select", {}, ["viewer", "operator", "admin"].map((x) => h("option", { value: x, selected: x === u.role }, x)));
    const p = h("input", { value: u.job_types.join(", ") });
    const pw = h("input", { type: "password", autocomplete: "new-password", placeholder: "unchanged" });
    const dialog = h("dialog", { class: "card" });
    const form = apiForm(
      { method: "dialog" },
      [
        h("h3", {}, `Change ${u.name}`),
        field("Role", "role", r),
        field("Job-type patterns", "job_types", p),
        field("New password", "password", pw, "Ends the user's sessions."),
        h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save"), h("button", { type: "button", onclick: () => dialog.close() }, "Cancel")),
      ],
      () => ({ role: r.value, job_types: list(p.value), ...(pw.value ? { password: pw.value } : {}) }),
      async (body) => {
        await api("PATCH", `/api/users/${u.id}`, body);
        dialog.close();
        await reload();
      },
    );
    dialog.append(form);
    dialog.addEventListener("close", () => dialog.remove());
    document.body.append(dialog);
    dialog.showModal();
  };
  const remove = async (u) => {
    if (!window.confirm(`Delete user ${u.name}? Their tokens and sessions end.`)) return;
    await api("DELETE", `/api/users/${u.id}`);
    await reload();
  };
  return [
    h("h2", {}, "Users"),
    table(
      [
        ["Name", (u) => u.name],
        ["Role", (u) => u.role],
        ["Job-type patterns", (u) => (u.job_types.length ? u.job_types.map((t, i) => [i ? ", " : "", h("code", {}, t)]) : h("span", { class: "muted" }, u.role === "admin" ? "all" : "none"))],
        ["Created", (u) => time(u.created_at)],
        [
          "",
          (u) =>
            h(
              "div",
              { class: "actions" },
              h("button", { type: "button", onclick: () => edit(u) }, "Change"),
              u.id === me.user_id ? null : h("button", { type: "button", class: "danger", onclick: () => remove(u) }, "Delete"),
            ),
        ],
      ],
      users,
    ),
    create,
  ];
}

export async function accessPage(me) {
  async function reload(shown) {
    const [tokens, users] = await Promise.all([
      api("GET", `/api/tokens${query(me.role === "admin" ? { all: true } : {})}`).catch((e) => (me.via === "service_token" ? { tokens: [] } : Promise.reject(e))),
      me.role === "admin" ? api("GET", "/api/users") : null,
    ]);
    show(
      h("h1", {}, me.role === "admin" ? "Users and tokens" : "Tokens"),
      users ? usersSection(me, users.users, reload) : null,
      tokensSection(me, tokens.tokens, reload, shown),
    );
  }
  await reload();
}
