// The page's own API (/api/chats, /api/settings). This launch's secret arrives once in the
// address the app opens (/?token=...): it is kept in localStorage, which the browser keeps per
// origin (scheme, host and port, unlike cookies, which every port of 127.0.0.1 would receive),
// removed from the address bar, and sent as X-Llmpack-Token. The X-Llmpack-Chat header is what no
// other web page can add without a preflight.

const TOKEN_KEY = "llmpack.chat-token";
let memoryToken = "";   // where localStorage is blocked: this tab only

function takeTokenFromAddress() {
  const url = new URL(window.location.href);
  const given = url.searchParams.get("token");
  if (given === null) return;
  memoryToken = given;
  try {
    window.localStorage.setItem(TOKEN_KEY, given);
  } catch (e) {
    // blocked storage: the secret lives in memoryToken until the tab closes
  }
  url.searchParams.delete("token");
  window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
}
takeTokenFromAddress();

function chatToken() {
  try {
    return window.localStorage.getItem(TOKEN_KEY) || memoryToken;
  } catch (e) {
    return memoryToken;
  }
}

/** The headers every /api/* request carries. */
export function chatHeaders() {
  return { "X-Llmpack-Chat": "1", "X-Llmpack-Token": chatToken() };
}

/** An HTTP error from the app (this API or the OpenAI-compatible one), with its status. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/** A response's body: its JSON, or its text where that is not JSON. */
export async function readBody(resp) {
  const text = await resp.text();
  try {
    return JSON.parse(text);
  } catch (e) {
    return text;
  }
}

const KEEPALIVE_MAX = 60000;   // browsers send at most 64 KiB of keepalive bodies

/** opts.keepalive: the request outlives the page (a save while it unloads), where its body allows. */
export async function api(method, path, body, opts) {
  const headers = chatHeaders();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const text = body === undefined ? undefined : JSON.stringify(body);
  const keepalive = !!(opts && opts.keepalive) && (text || "").length < KEEPALIVE_MAX;
  const resp = await fetch(path, { method, headers, cache: "no-store", credentials: "omit", body: text, keepalive });
  const data = await readBody(resp);
  if (!resp.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : `HTTP ${resp.status}`;
    throw new ApiError(msg, resp.status);
  }
  return data;
}
