// MCP servers, reached through this app (never from the page itself: the page keeps
// `connect-src 'self'`). The app proxies only to the servers it was started with
// (`--mcp-config`) and to those added in Settings, which this page sends it on every load:
//
//   GET  /api/mcp                 {servers: [{name, source, url?, status: up|down, error?, note?, tools}]}
//   PUT  /api/mcp/servers         {servers: [{name, url, headers}]}: the ones added here; answers as GET
//   POST /api/mcp/call            {server, tool, arguments} -> {text, is_error}
//
// (runtime/server/page/mcp_routes.py; behind the API key and this launch's chat secret.) Every call
// of an MCP tool is confirmed here first, unless the person chose "Always allow" for that tool.
import { ApiError, chatHeaders, readBody } from "./api.js";
import { apiKey } from "./settings.js";
import { state, ui } from "./state.js";
import { el } from "./util.js";

let servers = [];
let onChange = () => {};

/** toolsettings.js: fn() after the servers' list changed. */
export function setMcpHook(fn) {
  onChange = fn;
}

export function mcpServers() {
  return servers;
}

/** Every tool of every server that answered: [{server, tool: {name, description, input_schema}}]. */
export function mcpTools() {
  return servers.filter((s) => s.status === "up").flatMap((s) => s.tools.map((t) => ({ server: s.name, tool: t })));
}

async function mcpFetch(method, path, body, signal) {
  const headers = chatHeaders();
  if (apiKey()) headers.Authorization = "Bearer " + apiKey();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, cache: "no-store", credentials: "omit", signal,
    body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await readBody(resp);
  if (!resp.ok) {
    throw new ApiError(data && data.error && data.error.message ? data.error.message : "HTTP " + resp.status, resp.status);
  }
  return data;
}

function take(data) {
  servers = Array.isArray(data && data.servers) ? data.servers : [];
  onChange();
  return servers;
}

/** Tell the app which servers were added here and learn every server's tools (on load, after a change). */
export async function syncMcp(added) {
  if (state.locked) return take({ servers: [] });
  try {
    return take(await mcpFetch("PUT", "/api/mcp/servers", { servers: added }));
  } catch (err) {
    servers = [];
    onChange(err);
    throw err;
  }
}

/** Ask the app to call `tool` of `server`; the result's text (an error's words are thrown). */
export async function callMcp(server, tool, args, signal) {
  const r = await mcpFetch("POST", "/api/mcp/call", { server, tool, arguments: args }, signal);
  if (r.is_error) throw new Error(r.text || "The tool reported an error.");
  return r.text;
}

/** Ask the person: "once", "always" or "deny" (Stop counts as deny). The arguments are shown as text. */
export function confirmCall(entry, args, signal) {
  const d = ui.toolConfirm;
  ui.toolConfirmTool.textContent = entry.tool;
  ui.toolConfirmServer.textContent = entry.server;
  ui.toolConfirmArgs.textContent = JSON.stringify(args, null, 2);
  return new Promise((resolve) => {
    const done = (answer) => {
      for (const [b, f] of handlers) b.removeEventListener("click", f);
      d.removeEventListener("cancel", onCancel);
      signal.removeEventListener("abort", onAbort);
      if (d.open) d.close();
      resolve(answer);
    };
    const handlers = [[ui.toolAllowOnce, () => done("once")], [ui.toolAllowAlways, () => done("always")],
      [ui.toolDeny, () => done("deny")]];
    for (const [b, f] of handlers) b.addEventListener("click", f);
    const onCancel = (ev) => {
      ev.preventDefault();
      done("deny");
    };
    const onAbort = () => done("deny");
    d.addEventListener("cancel", onCancel);
    signal.addEventListener("abort", onAbort);
    d.showModal();
    ui.toolAllowOnce.focus();
  });
}

/** One server's line in Settings: its name, whether it answered, and its tools under it. */
export function serverItem(s, onRemove) {
  const li = el("li", "mcp-server");
  li.setAttribute("data-testid", "mcp-server");
  li.dataset.name = s.name;
  li.dataset.status = s.status;
  const head = el("div", "mcp-server-head");
  head.append(el("span", "mcp-name", s.name), el("span", "badge mcp-status " + s.status, s.status === "up" ? "ready" : "not answering"));
  if (onRemove) {
    const rm = el("button", "button ghost small", "Remove");
    rm.type = "button";
    rm.setAttribute("data-testid", "mcp-remove");
    rm.addEventListener("click", onRemove);
    head.appendChild(rm);
  } else {
    head.appendChild(el("span", "muted small", "from --mcp-config"));
  }
  li.appendChild(head);
  if (s.url) li.appendChild(el("div", "muted small mcp-url", s.url));
  if (s.error) li.appendChild(el("div", "error-text small", s.error));
  if (s.note) li.appendChild(el("div", "muted small", s.note));
  if (s.tools && s.tools.length) {
    const ul = el("ul", "mcp-tools");
    for (const t of s.tools) {
      const item = el("li", "", t.name);
      item.setAttribute("data-testid", "mcp-tool");
      if (t.description) item.title = t.description;
      ul.appendChild(item);
    }
    li.appendChild(ul);
  }
  return li;
}
