// Tools the model may call from the chat page. The built-in ones need no set-up and reach nothing
// outside the page (or, for search_files, outside this app's own document index); each can be
// turned off in Settings, and they run without asking. MCP servers' tools (mcp.js) reach outside,
// so each call of one waits for the person to say yes (Allow once / Always allow / Deny).
//
// One reply may take several rounds: the model asks for calls, the page runs them and sends the
// results back, the model answers (or asks again, at most MAX_ROUNDS times). The reply keeps them
// as msg.rounds = [{content: what it said before the calls, calls: [CALL]}], saved with the chat
// (runtime/chats/chat_tools.py checks the shape), where CALL is
//   {id, name: the name the model used, tool, server: null for a built-in, arguments: JSON text,
//    result: text, status: "ok" | "error" | "denied" | "stopped", seconds}
// A result is data: it is drawn as text (render.js), never as HTML or Markdown, and cut at MAX_RESULT.
import { api } from "./api.js";
import { calculate } from "./calc.js";
import { callMcp, confirmCall, mcpTools } from "./mcp.js";
import { state } from "./state.js";
import { loadJSON, saveJSON } from "./util.js";

export const MAX_ROUNDS = 5;
export const MAX_RESULT = 16000;
const JS_TIME_MS = 5000;
const TOOLS_KEY = "llmpack.tools.v1";
export const REFUSED = "The user refused to run this tool. Do not call it again for this request; answer without it.";

/** What this browser keeps about tools: built-ins turned off (true) or on (false) in Settings, whether
 * they are offered in chats with files too (`withFiles`), MCP tools always allowed, servers added. */
export const toolStore = { off: {}, withFiles: false, always: {}, servers: [] };
{
  const s = loadJSON(TOOLS_KEY, null);
  if (s && typeof s === "object") {
    if (s.off && typeof s.off === "object") toolStore.off = s.off;
    if (typeof s.withFiles === "boolean") toolStore.withFiles = s.withFiles;
    if (s.always && typeof s.always === "object") toolStore.always = s.always;
    if (Array.isArray(s.servers)) toolStore.servers = s.servers.filter((x) => x && typeof x.url === "string");
  }
}

export function saveToolStore() {
  saveJSON(TOOLS_KEY, toolStore);
}

function object(props, required) {
  return { type: "object", properties: props, required };
}

export const BUILTINS = [
  {
    name: "calculator", label: "Calculator", hint: "Exact arithmetic: fractions, powers, factorials, square roots.",
    description: "Evaluate an arithmetic expression exactly. Use it for any calculation instead of working it out. "
      + "Supports + - * / % ^ ! ( ) and sqrt(), decimals and whole numbers of any size.",
    parameters: object({ expression: { type: "string", description: "The arithmetic expression" } }, ["expression"]),
    run: async (args) => JSON.stringify(calculate(String(args.expression ?? ""))),
  },
  {
    name: "date_time", label: "Date and time", hint: "Today's date, the time and the time zone of this computer.",
    description: "Get the current date, time, weekday and time zone of the user's computer.",
    parameters: object({}, []),
    run: async () => {
      const now = new Date();
      const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
      const off = -now.getTimezoneOffset();
      const pad = (n) => String(Math.floor(Math.abs(n))).padStart(2, "0");
      return JSON.stringify({
        date: now.getFullYear() + "-" + pad(now.getMonth() + 1) + "-" + pad(now.getDate()),
        time: pad(now.getHours()) + ":" + pad(now.getMinutes()) + ":" + pad(now.getSeconds()),
        weekday: now.toLocaleDateString("en-US", { weekday: "long" }),
        time_zone: zone, utc_offset: (off < 0 ? "-" : "+") + pad(off / 60) + ":" + pad(off % 60),
        iso_utc: now.toISOString(),
      });
    },
  },
  {
    name: "run_javascript", label: "Run JavaScript", hint: "Short programs in a sandbox: no network, no page, 5 seconds at most.",
    description: "Run a short JavaScript program in a sandbox (no network, no files, no page) and get what it printed "
      + "with console.log and the value of its last `return`. At most 5 seconds.",
    parameters: object({ code: { type: "string", description: "JavaScript; print with console.log or `return` a value" } }, ["code"]),
    run: (args, signal) => runJavaScript(String(args.code ?? ""), signal),
  },
  {
    name: "search_files", label: "Search attached files", hint: "Finds passages in the files attached to a chat (with \"Also in chats with files\").",
    description: "Search the files attached to this chat for passages about a question; returns the best passages with "
      + "their file and page.",
    parameters: object({ query: { type: "string", description: "What to look for, in a few words" } }, ["query"]),
    run: (args, signal) => searchFiles(String(args.query ?? ""), signal),
    available: (chat) => chatFiles(chat).length > 0,
  },
];

/** Whether a built-in tool is on: as set in Settings, else on for a model whose chat template knows
 * tools (/health `tools`) and off for others (tools written into their prompt confuse small models). */
export function builtinOn(name) {
  return typeof toolStore.off[name] === "boolean" ? !toolStore.off[name] : state.toolsNative;
}

/** The tools a request in `chat` offers the model: {specs: OpenAI `tools`, byName: name -> entry}.
 * In a chat with files the built-ins are offered only when Settings says so (`withFiles`): the app
 * reads the files for every question itself, and the tool block costs a small model answers (the
 * demo model on 62 questions about real files: 44 facts against 50, and one wrong source;
 * docs/BENCHMARKS.md). The person's own MCP servers are offered as everywhere. */
export function requestTools(chat) {
  const byName = new Map();
  const specs = [];
  const builtins = toolStore.withFiles || chatFiles(chat).length === 0;
  for (const t of BUILTINS) {
    if (!builtins || !builtinOn(t.name) || (t.available && !t.available(chat))) continue;
    byName.set(t.name, { builtin: t, label: t.label });
    specs.push({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } });
  }
  for (const m of mcpTools()) {
    let name = (m.server + "_" + m.tool.name).replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64);
    for (let i = 2; byName.has(name); i++) name = name.slice(0, 60) + "_" + i;
    byName.set(name, { server: m.server, tool: m.tool.name, label: m.tool.name + " (" + m.server + ")" });
    specs.push({ type: "function", function: { name, description: m.tool.description || "",
      parameters: m.tool.input_schema || { type: "object", properties: {} } } });
  }
  return { specs, byName };
}

/** The messages that stand for `m`'s rounds of calls in a request, then its answer. */
export function roundMessages(m) {
  const out = [];
  for (const r of m.rounds || []) {
    out.push({ role: "assistant", content: r.content || "", tool_calls: r.calls.map((c) => (
      { id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) });
    for (const c of r.calls) out.push({ role: "tool", tool_call_id: c.id, content: modelText(c) });
  }
  return out;
}

/** What the model reads back for a call. */
function modelText(c) {
  if (c.status === "denied") return REFUSED;
  if (c.status === "stopped") return "The user stopped this tool before it finished.";
  if (c.status === "error") return "Error: " + c.result;
  return c.result;
}

export function cap(text) {
  const s = typeof text === "string" ? text : String(text);
  if (s.length <= MAX_RESULT) return s;
  return s.slice(0, MAX_RESULT) + "\n… [cut: the result was " + s.length.toLocaleString("en-US")
    + " characters; the first " + MAX_RESULT.toLocaleString("en-US") + " are kept]";
}

/** Run one call the model asked for; fills call.result/status/seconds. `redraw` shows progress. */
export async function runCall(call, entry, signal, redraw) {
  const t0 = performance.now();
  let args;
  try {
    args = call.arguments.trim() ? JSON.parse(call.arguments) : {};
    if (!args || typeof args !== "object" || Array.isArray(args)) throw new Error("not an object");
  } catch (e) {
    return finish(call, t0, "error", "The arguments are not a JSON object: " + call.arguments.slice(0, 200));
  }
  if (!entry) return finish(call, t0, "error", "There is no tool named " + JSON.stringify(call.name) + ".");
  try {
    if (entry.server) {
      const key = entry.server + "\u001f" + entry.tool;
      if (!toolStore.always[key]) {
        call.status = "waiting";
        redraw();
        const answer = await confirmCall(entry, args, signal);
        if (answer === "deny") return finish(call, t0, "denied", "You refused this call.");
        if (answer === "always") {
          toolStore.always[key] = true;
          saveToolStore();
        }
      }
      call.status = "running";
      redraw();
      return finish(call, t0, "ok", await callMcp(entry.server, entry.tool, args, signal));
    }
    call.status = "running";
    redraw();
    return finish(call, t0, "ok", await entry.builtin.run(args, signal));
  } catch (e) {
    if (signal.aborted) return finish(call, t0, "stopped", "Stopped.");
    return finish(call, t0, "error", e && e.message ? e.message : String(e));
  }
}

function finish(call, t0, status, result) {
  call.status = status;
  call.result = cap(result);
  call.seconds = Math.round((performance.now() - t0) / 100) / 10;
  return call;
}

/** run_javascript: a fresh worker each time, ended after JS_TIME_MS or when Stop is pressed. */
function runJavaScript(code, signal) {
  return new Promise((resolve, reject) => {
    const w = new Worker("/static/tool-worker.js");
    const end = (fn, v) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      w.terminate();
      fn(v);
    };
    const timer = setTimeout(() => end(reject, new Error("The program ran longer than " + JS_TIME_MS / 1000
      + " seconds and was stopped.")), JS_TIME_MS);
    const onAbort = () => end(reject, new DOMException("Stopped", "AbortError"));
    signal.addEventListener("abort", onAbort);
    w.onmessage = (ev) => {
      const d = ev.data || {};
      const printed = (d.output || "") + (d.cut ? "… [output cut at 20,000 characters]\n" : "");
      if (d.ok) end(resolve, printed + (d.value !== undefined ? "Returned: " + d.value : printed ? "" : "(no output)"));
      else end(reject, new Error((printed ? printed + "\n" : "") + d.error));
    };
    w.onerror = (ev) => {
      ev.preventDefault();
      end(reject, new Error(ev.message || "The program could not start."));
    };
    w.postMessage({ code });
  });
}

/** The files attached anywhere in `chat`'s branch. */
function chatFiles(chat) {
  const out = [];
  for (const m of (chat && chat.messages) || []) for (const a of m.attachments || []) if (!a.data_url && !a.audio_url) out.push(a);
  return out;
}

/** search_files: long files through the app's document index (/api/tools/search), short ones here. */
async function searchFiles(query, signal) {
  const files = chatFiles(state.current);
  if (!files.length) return "No files are attached to this chat.";
  const indexed = files.filter((a) => a.file_id);
  const found = [];
  if (indexed.length) {
    const r = await api("POST", "/api/tools/search", { query, files: indexed.map((a) => ({ file_id: a.file_id, name: a.name })) },
      { signal });
    for (const h of r.hits || []) found.push(h.name + (h.page ? " (page " + h.page + ")" : "") + ":\n" + h.text);
  }
  const words = query.toLowerCase().split(/\W+/).filter((w) => w.length > 2);
  for (const a of files.filter((f) => !f.file_id)) {
    const paras = a.text.split(/\n\s*\n/);
    const scored = paras.map((p) => [words.filter((w) => p.toLowerCase().includes(w)).length, p]).filter((x) => x[0] > 0);
    scored.sort((x, y) => y[0] - x[0]);
    for (const [, p] of scored.slice(0, 3)) found.push(a.name + ":\n" + p.trim().slice(0, 2000));
  }
  return found.length ? found.join("\n\n---\n\n") : "Nothing in the attached files matches " + JSON.stringify(query) + ".";
}
