// The console's only way to the admin: the HTTP API, with the session cookie and, on writes,
// the session's CSRF token. Every answer that is not 2xx becomes an ApiError carrying the API's
// stable `code`, its message and the `field` at fault.

const CSRF_KEY = "cadenza.csrf";

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

/** Listeners told when the API answers 401 (the session ended). */
const signedOut = [];
export function onSignedOut(f) {
  signedOut.push(f);
}

export function rememberCsrf(token) {
  if (token) sessionStorage.setItem(CSRF_KEY, token);
  else sessionStorage.removeItem(CSRF_KEY);
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") {
    const csrf = sessionStorage.getItem(CSRF_KEY);
    if (csrf) headers["X-CSRF-Token"] = csrf;
  }
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
  } catch (e) {
    throw new ApiError(0, "network", `the admin did not answer (${e.message})`);
  }
  const text = await resp.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    const e = new ApiError(resp.status, err.code || `http_${resp.status}`, err.message || resp.statusText, err.field);
    if (resp.status === 401 && path !== "/api/session") signedOut.forEach((f) => f(e));
    throw e;
  }
  return data;
}

/** A query string of the given parameters, leaving out empty ones. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}
