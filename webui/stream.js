// The streaming client: one request to the OpenAI-compatible API per reply, read as
// Server-Sent Events and drawn as it arrives. Chat mode uses /v1/chat/completions; text
// completion mode sends the whole document to /v1/completions and appends what comes back.
import { ApiError, readBody } from "./api.js";
import { requestContent, restoreFiles } from "./attach.js";
import { renderChatList } from "./chatlist.js";
import { plainError } from "./errors.js";
import { showPromptProgress, watchReading } from "./progress.js";
import { planContext } from "./context.js";
import { readFromResponse, readText } from "./readparts.js";
import { addNotice, fillMessage, isNearBottom, markCut, placeReply, refreshLastActions, renderCurrent, scrollToBottom,
  updateStatusbar } from "./render.js";
import { saveChat, saveNowAndThen } from "./save.js";
import { cleanSources } from "./sources.js";
import { apiKey, effective, openSettings, SAMPLING_KEYS } from "./settings.js";
import { state, ui } from "./state.js";
import { MAX_ROUNDS, requestTools, roundMessages, runCall } from "./tools.js";
import { addMessage, removeMessage } from "./tree.js";
import { el, toast } from "./util.js";
import { countOf, speedText } from "./words.js";

const SEP = /\r\n\r\n|\n\n|\r\r/;
let onComposerChange = () => {};

/** The app's "update the send/stop buttons" hook. */
export function setComposerHook(fn) {
  onComposerChange = fn;
}

/** [path, body] of the request for `chat`'s next reply; in chat mode, the turns that fit (context.js). */
async function buildRequest(chat, gen) {
  const e = effective();
  const body = { model: state.model, stream: true, stream_options: { include_usage: true }, return_progress: true };
  for (const k of SAMPLING_KEYS) {
    if (typeof e[k] === "number" && isFinite(e[k])) body[k] = e[k];
  }
  const done = chat.messages.filter((m) => m !== gen.msg && (m.content || (m.attachments && m.attachments.length)
    || (m.rounds && m.rounds.length)));
  if (chat.mode === "complete") {
    body.prompt = done.map((m) => m.content).join("");
    if (body.max_tokens === undefined) body.max_tokens = state.defaults.completion_max_tokens;   // the server's
    return ["/v1/completions", body];
  }
  const system = systemPromptOf(chat);
  const plan = await planContext(done, system, e.max_tokens);
  if (plan.dropped && e.context_overflow === "ask" && !gen.force) {
    gen.asked = true;   // Settings say: stop and ask (finishGeneration asks)
    return [null, null];
  }
  gen.readFrom = plan.first;
  if (plan.first && state.current === chat) markCut(plan.first);
  body.messages = [];
  if (system && system.trim()) body.messages.push({ role: "system", content: system });
  for (const m of plan.send) {
    body.messages.push(...roundMessages(m));   // a reply's calls and their results (tools.js), then its answer
    if (m.content || m.role !== "assistant") body.messages.push({ role: m.role, content: requestContent(m) });
  }
  body.messages.push(...roundMessages(gen.msg));   // this reply's rounds so far
  if (gen.finalAnswer) {
    // sent, never saved: the answer, from the results. It restates the question, since the server reads
    // an attached long file for the latest user message (a summary of all of it, or the parts that match)
    const asked = [...plan.send].reverse().find((m) => m.role === "user" && m.content);
    body.messages.push({ role: "user", content: FINAL_NOTE + (asked ? " My question was: " + asked.content : "") });
    return ["/v1/chat/completions", body];
  }
  gen.tools = requestTools(chat);
  if (gen.tools.specs.length && toolsFit(gen.tools.specs)) body.tools = gen.tools.specs;
  return ["/v1/chat/completions", body];
}

/** Tools take room in the prompt (their names, descriptions and schemas): a model that reads too
 * little at once (a quarter of its context or less) is asked without them. */
function toolsFit(specs) {
  return !state.nCtx || JSON.stringify(specs).length / 3 < state.nCtx / 4;
}

/** The instructions `chat` is sent with: its own, else (a chat from before they were kept per chat) Settings'. */
export function systemPromptOf(chat) {
  return chat && typeof chat.system === "string" ? chat.system : effective().system_prompt;
}

/** A reasoning model's thinking (`reasoning_content` deltas) goes to msg.thinking, timed for the
 * folded "Thinking… (12 s)" block; the next request sends only `content`, as the templates expect. */
function addThinking(gen, text) {
  if (typeof text !== "string" || !text) return false;
  const now = performance.now();
  if (!gen.tThink) gen.tThink = now;
  gen.msg.thinking = (gen.msg.thinking || "") + text;
  gen.msg.thinking_seconds = Math.round((now - gen.tThink) / 1000);
  return true;
}

function endThinking(gen, end) {
  if (!gen.tThink) return;
  const until = gen.tFirst && gen.tFirst > gen.tThink ? gen.tFirst : end;
  gen.msg.thinking_seconds = Math.round((until - gen.tThink) / 1000);
}

function httpError(status, body) {
  const msg = body && body.error && typeof body.error.message === "string" ? body.error.message
    : body && typeof body.message === "string" ? body.message : "HTTP " + status;
  return new ApiError(msg, status);
}

/** Ask for the next reply of `chat`; opts.userMsg (a new message) or opts.previous (regenerate: the
 * new reply is its sibling, and a failed one shows the old one again). */
export async function generate(chat, opts) {
  const msg = addMessage(chat, { role: "assistant", content: "", stats: null },
    opts.previous ? opts.previous.parent : undefined);
  const gen = {
    chat, msg, node: null, controller: new AbortController(), readFrom: null, force: !!opts.force, asked: false,
    t0: performance.now(), tFirst: 0, tLast: 0, deltas: 0, usage: null, finish: null, stopped: false,
    error: null, raf: 0, pending: 0, lastSave: Date.now(), lastRender: 0, renderCost: 0,
    calls: [], tools: null, toolLimit: false, finalAnswer: false,   // the tool calls asked for in this round; the tools offered (tools.js)
  };
  state.gen = gen;
  if (state.current === chat) {
    if (opts.previous) {
      renderCurrent();   // the old reply gives way to its new version (‹ 2/2 ›); the redraw marks it streaming
    } else {
      gen.node = placeReply(chat, msg);
      gen.node.classList.add("streaming");
    }
    scrollToBottom();
  }
  onComposerChange();
  refreshLastActions();
  ui.tps.textContent = "";
  ui.ctxUsed.textContent = "";

  const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
  if (apiKey()) headers.Authorization = "Bearer " + apiKey();
  try {
    for (let round = 0; ; round++) {
      const [path, body] = await buildRequest(chat, gen);
      if (!path) return finishGeneration(gen, opts);
      gen.calls = [];
      const files = fileParts(body);
      const unwatch = files.length ? watchReading(gen.node, msg, headers, files.map((f) => f.file_id).filter(Boolean)) : () => {};
      let resp;
      try {
        resp = await fetch(path, { method: "POST", headers, body: JSON.stringify(body), signal: gen.controller.signal, cache: "no-store" });
      } finally {
        unwatch();
      }
      if (!resp.ok) throw httpError(resp.status, await readBody(resp));
      msg.read = readText(readFromResponse(resp));   // which parts of a long file it reads, shown at once
      if (msg.read && gen.node) fillMessage(gen.node, msg);
      await readStream(gen, resp.body.getReader());
      if (!gen.calls.length || gen.finalAnswer) break;
      if (round + 1 >= MAX_ROUNDS || repeatsOnly(gen)) {
        // a model that keeps asking (small ones ask for the same sum again and again) is asked once
        // more, without tools, for its answer from the results it has
        gen.toolLimit = round + 1 >= MAX_ROUNDS;
        gen.finalAnswer = true;
        msg.content = "";
        continue;
      }
      await runCalls(gen);
    }
  } catch (err) {
    if (err && err.name === "AbortError") {
      gen.stopped = true;
    } else {
      gen.error = plainError(err);   // {text, detail}
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) setTimeout(openSettings, 0);
    }
  }
  finishGeneration(gen, opts);
}

/** The file parts of a chat request's messages. */
function fileParts(body) {
  return (body.messages || []).flatMap((m) => (Array.isArray(m.content) ? m.content : []))
    .filter((p) => p && p.type === "file" && p.file).map((p) => p.file);
}

/** The note that asks for the answer once the calls are over (never saved with the chat). */
const FINAL_NOTE = "Answer my question now from the tool results above, in words, without calling any tool.";

function sameCall(c) {
  let args = c.arguments;
  try {
    args = JSON.stringify(JSON.parse(args));
  } catch (e) {
    // compared as written
  }
  return c.name + "\u0000" + args.replace(/[\s()]/g, "");
}

/** Every call the model asks for now was made before in this reply (the same tool, the same arguments). */
function repeatsOnly(gen) {
  const made = new Set((gen.msg.rounds || []).flatMap((r) => r.calls.map(sameCall)));
  return made.size > 0 && gen.calls.filter(Boolean).every((c) => made.has(sameCall(c)));
}

/** The calls the model just asked for, run one after another and kept as a round of the reply. */
async function runCalls(gen) {
  const { msg } = gen;
  const r = { content: msg.content, calls: gen.calls.filter(Boolean).map((c, i) => ({
    id: c.id || "call_" + i, name: c.name, tool: "", server: null, arguments: c.arguments, result: "", status: "queued", seconds: 0 })) };
  msg.content = "";
  msg.rounds = [...(msg.rounds || []), r];
  const redraw = () => {
    if (state.current === gen.chat && gen.node && gen.node.isConnected) fillMessage(gen.node, msg);
  };
  for (const c of r.calls) {
    const entry = gen.tools && gen.tools.byName.get(c.name);
    if (entry) {
      c.tool = entry.tool || c.name;
      c.server = entry.server || null;
    }
    if (gen.controller.signal.aborted) {
      c.status = "stopped";
      c.result = "Stopped.";
      continue;
    }
    await runCall(c, entry, gen.controller.signal, redraw);
    redraw();
    saveNowAndThen(gen);
  }
  if (gen.controller.signal.aborted) throw new DOMException("Stopped", "AbortError");
}

// Reads to the end of the response (the server closes it after [DONE]): cancelling it at [DONE]
// would abort the request, which the browser reports as a failed one (net::ERR_ABORTED).
async function readStream(gen, reader) {
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  let done = false;
  for (;;) {
    const r = await reader.read();
    if (r.done) {
      buf += decoder.decode();
      if (buf.trim() && !done) handleEvent(gen, buf);
      return;
    }
    if (done) continue;
    buf += decoder.decode(r.value, { stream: true });
    let m;
    while (!done && (m = SEP.exec(buf))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      done = handleEvent(gen, block) === "done";
    }
  }
}

// One SSE event. Returns "done" at [DONE]; throws ApiError for an in-stream error.
function handleEvent(gen, block) {
  const data = [];
  for (const l of block.split(/\r\n|\r|\n/)) {
    if (l.startsWith("data:")) data.push(l.charAt(5) === " " ? l.slice(6) : l.slice(5));
  }
  if (!data.length) return undefined;
  const payload = data.join("\n");
  if (payload.trim() === "[DONE]") return "done";
  let obj;
  try {
    obj = JSON.parse(payload);
  } catch (e) {
    return undefined;   // ignore a malformed event rather than losing the reply
  }
  if (!obj || typeof obj !== "object") return undefined;
  if (obj.error) throw new ApiError(typeof obj.error === "string" ? obj.error : obj.error.message || "The server reported an error.", 500);
  if (obj.usage && typeof obj.usage === "object") gen.usage = obj.usage;
  if (obj.prompt_progress) showPromptProgress(gen.node, gen.msg, obj.prompt_progress);
  for (const ch of Array.isArray(obj.choices) ? obj.choices : []) {
    if (!ch || (ch.index !== undefined && ch.index !== 0)) continue;
    const piece = ch.delta && typeof ch.delta.content === "string" ? ch.delta.content : typeof ch.text === "string" ? ch.text : "";
    if (ch.delta && addThinking(gen, ch.delta.reasoning_content)) scheduleRender(gen);
    if (ch.delta && Array.isArray(ch.delta.tool_calls)) addCalls(gen, ch.delta.tool_calls);
    if (piece) {
      const now = performance.now();
      if (!gen.tFirst) gen.tFirst = now;
      gen.tLast = now;
      gen.deltas += 1;
      gen.msg.content += piece;
      scheduleRender(gen);
    }
    const sources = cleanSources((ch.delta || ch.message || {}).sources);   // the server's, with the end of the reply
    if (sources) gen.msg.sources = sources;
    if (ch.finish_reason) gen.finish = ch.finish_reason;
  }
  return undefined;
}

/** Streamed tool calls: OpenAI's deltas, by index, the arguments possibly in pieces. */
function addCalls(gen, deltas) {
  for (const d of deltas) {
    if (!d || typeof d !== "object") continue;
    const i = Number.isInteger(d.index) ? d.index : gen.calls.length;
    if (i < 0 || i > 64) continue;
    const c = gen.calls[i] || (gen.calls[i] = { id: "", name: "", arguments: "" });
    if (typeof d.id === "string") c.id = d.id;
    const f = d.function || {};
    if (typeof f.name === "string") c.name += f.name;
    if (typeof f.arguments === "string") c.arguments += f.arguments;
  }
}

function liveTps(gen) {
  if (gen.deltas < 2 || !gen.tFirst) return 0;
  const secs = (gen.tLast - gen.tFirst) / 1000;
  return secs > 0.2 ? (gen.deltas - 1) / secs : 0;
}

function scheduleRender(gen) {
  if (gen.raf || gen.pending) return;
  gen.raf = requestAnimationFrame(() => {
    gen.raf = 0;
    if (state.gen !== gen) return;
    // Long replies take longer to re-render: then render less often (at most ~25% of the time).
    const now = performance.now();
    if (gen.renderCost > 4 && now - gen.lastRender < gen.renderCost * 4) {
      gen.pending = setTimeout(() => { gen.pending = 0; scheduleRender(gen); }, gen.renderCost * 4 - (now - gen.lastRender));
      return;
    }
    if (state.current === gen.chat && gen.node && gen.node.isConnected) {
      const stick = isNearBottom();
      fillMessage(gen.node, gen.msg);
      gen.lastRender = performance.now();
      gen.renderCost = gen.lastRender - now;
      const speed = speedText(gen.deltas, liveTps(gen));
      const stats = gen.node.closest(".message").querySelector(".stats");
      stats.textContent = countOf(gen.deltas, "token", "tokens") + (speed ? " · " + speed : "");
      ui.tps.textContent = speed || "…";
      if (stick) scrollToBottom();
    }
    saveNowAndThen(gen);   // closing the tab mid-reply keeps most of it
  });
}

function finishGeneration(gen, opts) {
  if (gen.raf) cancelAnimationFrame(gen.raf);
  if (gen.pending) clearTimeout(gen.pending);
  const { chat, msg } = gen;
  const end = performance.now();
  state.gen = null;

  endThinking(gen, end);
  if (!msg.content && !msg.thinking && !(msg.rounds && msg.rounds.length)) {
    // Nothing came back: take the empty reply out again (a failed regenerate shows the old reply).
    removeMessage(chat, msg, opts.previous ? opts.previous.id : msg.parent);
    if (opts.userMsg && chat.leaf === opts.userMsg.id) {
      // the unanswered message goes back into the box; the branch shown is the one before it
      removeMessage(chat, opts.userMsg);
      if (!ui.prompt.value.trim() && state.current === chat) {
        ui.prompt.value = opts.userMsg.content;
        ui.prompt.dispatchEvent(new Event("input"));
      }
      if (state.current === chat) restoreFiles(opts.userMsg.attachments);   // and its files, as they were
    }
    saveChat(chat);
    renderChatList();
    if (state.current === chat) {
      renderCurrent();
      if (gen.asked) {
        askToForget(opts);
      } else if (gen.error) {
        addNotice("No reply came. " + gen.error.text + (opts.userMsg ? " Your message is back in the box below." : ""),
          "error", gen.error.detail);
      } else if (gen.stopped && opts.userMsg) addNotice("Stopped before the reply started. Your message is back in the box below.", "info");
    } else if (gen.error) {
      toast("A reply failed. " + gen.error.text, undefined, undefined, undefined, gen.error.detail);
    }
    onComposerChange();
    return;
  }

  const u = gen.usage || {};
  const tokens = typeof u.completion_tokens === "number" ? u.completion_tokens : gen.deltas;
  // Speed counts from the first token (the wait before it is reading the prompt), and only
  // where enough tokens came for it to mean something (words.js MIN_TOKENS_FOR_SPEED).
  const genSecs = ((gen.tLast || end) - gen.tFirst) / 1000;
  const tps = speedText(tokens, (tokens - 1) / genSecs) ? (tokens - 1) / genSecs : 0;
  msg.stats = {
    tokens,
    estimated: typeof u.completion_tokens !== "number" || undefined,
    tps: Math.round(tps * 10) / 10,
    seconds: Math.round(((end - gen.t0) / 1000) * 10) / 10,
    ttft: gen.tFirst ? Math.round(gen.tFirst - gen.t0) : undefined,
    prompt_tokens: typeof u.prompt_tokens === "number" ? u.prompt_tokens : undefined,
    ctx_used: typeof u.prompt_tokens === "number" && typeof u.completion_tokens === "number" ? u.prompt_tokens + u.completion_tokens : undefined,
    read_from: gen.readFrom || undefined,   // the first message the model read: older ones were left out
    finish: gen.stopped ? "stopped" : gen.error ? "error" : gen.toolLimit ? "tool_rounds" : gen.finish || undefined,
    thinking_seconds: msg.thinking ? msg.thinking_seconds : undefined,
    read: msg.read || undefined,
  };
  chat.updated = Date.now();
  saveChat(chat);
  renderChatList();
  if (state.current === chat && gen.node) {
    gen.node.classList.remove("streaming");
    fillMessage(gen.node, msg);
    if (gen.node.isConnected && isNearBottom()) scrollToBottom();
    if (gen.error) addNotice("The reply was cut off. " + gen.error.text, "error", gen.error.detail);
    else if (gen.toolLimit) {
      addNotice("The model kept asking for tools, so after " + MAX_ROUNDS + " rounds it was asked to answer with the "
        + "results it had. Ask again in other words, or turn tools off in Settings.", "info");
    }
  }
  onComposerChange();
  updateStatusbar();
  refreshLastActions();
}

export const TOO_LONG_ASK = "This chat is now longer than the model can read at once.";

/** Settings say "stop and ask": offer to forget the oldest messages (opts.again(true) goes on), or a new chat. */
function askToForget(opts) {
  const n = addNotice(TOO_LONG_ASK + (opts.userMsg ? " Your message is back in the box below." : ""), "info");
  n.setAttribute("data-testid", "ask-forget");
  const go = el("button", "button small", "Forget the oldest messages and go on");
  go.type = "button";
  go.setAttribute("data-testid", "forget-and-go");
  go.addEventListener("click", () => {
    n.remove();
    if (opts.again) opts.again(true);
  });
  const fresh = el("button", "button small ghost", "Start a new chat");
  fresh.type = "button";
  fresh.addEventListener("click", () => ui.newChat.click());
  n.append(" ", go, " ", fresh);
  go.focus();
}

export function stopGeneration() {
  if (state.gen) {
    state.gen.stopped = true;
    state.gen.controller.abort();
  }
}
