// Settings › Tools: the built-in tools (each on or off), the MCP servers (added here by URL, or
// given to the app with --mcp-config) with their tools listed under each, and the tools that were
// "always allowed", each of which can be taken back.
import { mcpServers, serverItem, setMcpHook, syncMcp } from "./mcp.js";
import { state, ui } from "./state.js";
import { BUILTINS, builtinOn, saveToolStore, toolStore } from "./tools.js";
import { el, toast } from "./util.js";

const MAX_SERVERS = 16;

/** One checkbox of Settings › Tools: `label`, a muted `hint`, and `set(checked)` kept in the store. */
function toggle(testid, label, hint, checked, set) {
  const row = el("label", "radio tool-toggle");
  const cb = el("input");
  cb.type = "checkbox";
  cb.checked = checked;
  cb.setAttribute("data-testid", testid);
  cb.addEventListener("change", () => {
    set(cb.checked);
    saveToolStore();
  });
  const text = el("span", "", label + " ");
  text.appendChild(el("span", "muted", hint));
  row.append(cb, text);
  return row;
}

function builtinList() {
  const box = ui.toolsBuiltin;
  box.replaceChildren();
  for (const t of BUILTINS) {
    box.appendChild(toggle("tool-on-" + t.name, t.label, t.hint, builtinOn(t.name), (on) => { toolStore.off[t.name] = !on; }));
  }
  const why = "The app reads your files for each question itself; a small model answers questions about them "
    + "better without tools offered.";
  box.appendChild(toggle("tools-with-files", "Also in chats with files", why, toolStore.withFiles,
    (on) => { toolStore.withFiles = on; }));
}

function allowedList() {
  const ul = ui.toolsAlways;
  ul.replaceChildren();
  const keys = Object.keys(toolStore.always);
  ui.toolsAlwaysEmpty.hidden = keys.length > 0;
  for (const key of keys) {
    const [server, tool] = key.split("\u001f");
    const li = el("li", "tool-always");
    li.setAttribute("data-testid", "tool-always");
    li.appendChild(el("span", "", tool + " · " + server));
    const b = el("button", "button ghost small", "Ask again");
    b.type = "button";
    b.setAttribute("data-testid", "tool-revoke");
    b.title = "Ask before each call of this tool again";
    b.addEventListener("click", () => {
      delete toolStore.always[key];
      saveToolStore();
      allowedList();
    });
    li.appendChild(b);
    ul.appendChild(li);
  }
}

function serverList(err) {
  const ul = ui.mcpList;
  ul.replaceChildren();
  if (err) ul.appendChild(el("li", "error-text small", "The app could not list the MCP servers. " + err.message));
  for (const s of mcpServers()) {
    const mine = s.source === "page";
    ul.appendChild(serverItem(s, mine ? () => removeServer(s.name) : null));
  }
  ui.mcpEmpty.hidden = mcpServers().length > 0 || !!err;
}

async function sync() {
  try {
    await syncMcp(toolStore.servers);
  } catch (err) {
    // shown in the list (serverList) by the hook
  }
}

async function removeServer(name) {
  toolStore.servers = toolStore.servers.filter((s) => s.name !== name);
  for (const key of Object.keys(toolStore.always)) if (key.startsWith(name + "\u001f")) delete toolStore.always[key];
  saveToolStore();
  allowedList();
  await sync();
}

/** "Authorization: Bearer abc" lines -> {name: value}; null with a reason set when a line is not a header. */
function parseHeaders(text) {
  const out = {};
  for (const line of text.split(/\r?\n/)) {
    if (!line.trim()) continue;
    const m = /^\s*([A-Za-z0-9-]+)\s*:\s*(.*?)\s*$/.exec(line);
    if (!m) return null;
    out[m[1]] = m[2];
  }
  return out;
}

async function addServer() {
  const name = ui.mcpName.value.trim();
  const url = ui.mcpUrl.value.trim();
  const headers = parseHeaders(ui.mcpHeaders.value);
  let problem = "";
  if (!/^[A-Za-z0-9_-]{1,32}$/.test(name)) problem = "Give the server a short name: letters, digits, - or _ (at most 32).";
  else if (mcpServers().some((s) => s.name === name)) problem = "There is a server named " + name + " already.";
  else if (!/^https?:\/\/[^\s]+$/i.test(url)) problem = "The address must start with http:// or https://.";
  else if (!headers) problem = "Write each header on its own line as Name: value (e.g. Authorization: Bearer abc123).";
  else if (toolStore.servers.length >= MAX_SERVERS) problem = "At most " + MAX_SERVERS + " servers can be added here.";
  ui.mcpError.textContent = problem;
  if (problem) return;
  toolStore.servers.push({ name, url, headers });
  saveToolStore();
  ui.mcpAdd.disabled = true;
  ui.mcpAdd.textContent = "Connecting…";
  await sync();
  ui.mcpAdd.disabled = false;
  ui.mcpAdd.textContent = "Add server";
  const s = mcpServers().find((x) => x.name === name);
  if (s && s.status === "up") {
    ui.mcpName.value = "";
    ui.mcpUrl.value = "";
    ui.mcpHeaders.value = "";
    toast(name + " is connected: " + s.tools.length + (s.tools.length === 1 ? " tool." : " tools."));
  }
}

/** Draw the tools part of Settings (and keep the servers' part current). */
export function wireToolSettings() {
  builtinList();
  allowedList();
  setMcpHook(serverList);
  ui.mcpAdd.addEventListener("click", addServer);
  ui.mcpRefresh.addEventListener("click", sync);
  ui.settingsButton.addEventListener("click", allowedList);
}

/** Once the page knows whether it may use /api/*: connect the servers (nothing waits for it). */
export function startTools() {
  builtinList();   // their defaults depend on the model (/health tools)
  ui.toolsNative.hidden = state.toolsNative;
  ui.mcpSection.hidden = state.locked;
  if (!state.locked) sync();
}
