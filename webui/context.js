// Chats that keep going past what the model can read at once (its context window, n_ctx from
// /health). Before each reply the page counts the branch's tokens (POST /tokenize, each text
// once) and, when the next turn would not fit, leaves out the oldest turns whole (a question
// and its answer; never half a message). The instructions (system prompt) always stay, and so
// do the files attached to the turns left out, while they fit. The reply then records the
// first message the model read (stats.read_from) and the page draws "The model no longer reads
// the messages above this line." there. Settings can ask first instead ("ask").
//
// Only the page manages its own history: the API itself keeps OpenAI's behaviour (a prompt
// longer than the context is a 400).
import { apiKey } from "./settings.js";
import { state } from "./state.js";

const PER_MESSAGE = 8;    // the chat template's markers around a message (ChatML ~5, Gemma ~6, Llama 3 ~5)
const PER_FILE = 24;      // a file's heading in the prompt (documents.format_message)
const PROMPT_EXTRA = 8;   // the start of the prompt and the reply's opening markers
const DEFAULT_REPLY_ROOM = 512;
const CACHE_MAX = 4000;
const counted = new Map();   // text -> tokens

async function countText(text) {
  if (!text) return 0;
  if (counted.has(text)) return counted.get(text);
  let n;
  try {
    const headers = { "Content-Type": "application/json" };
    if (apiKey()) headers.Authorization = "Bearer " + apiKey();
    const resp = await fetch("/tokenize", { method: "POST", headers, cache: "no-store",
      body: JSON.stringify({ content: text, add_special: false, parse_special: false }) });
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    n = (await resp.json()).tokens.length;
  } catch (e) {
    return Math.ceil(text.length / 3);   // the app did not count it: a cautious guess, not remembered
  }
  if (counted.size > CACHE_MAX) counted.clear();
  counted.set(text, n);
  return n;
}

// A file searched (sent by its file_id, not read whole) costs what the server reads of it for one
// question (documents/reading.py EXCERPT_TOKENS; less in a small context), not its length.
const SEARCHED_TOKENS = 512;   // EXCERPT_TOKENS: the excerpts and the line after them (NOTE_TOKENS) together

async function fileTokens(a) {
  if (a.file_id && a.read !== "whole") return PER_FILE + Math.min(SEARCHED_TOKENS, Math.floor(state.nCtx / 4));
  return PER_FILE + (typeof a.tokens === "number" ? a.tokens : await countText(a.text));
}

async function messageTokens(m) {
  const files = await Promise.all((m.attachments || []).map(fileTokens));
  // a reply's tool calls go back with it (tools.js roundMessages): their arguments and results count too
  const calls = (m.rounds || []).map((r) => r.content + r.calls.map((c) => c.name + c.arguments + c.result).join("")).join("");
  const rounds = calls ? PER_MESSAGE * 2 * m.rounds.length + (await countText(calls)) : 0;
  return PER_MESSAGE + (await countText(m.content)) + rounds + files.reduce((a, b) => a + b, 0);
}

/** Tokens kept free for the reply: the longest reply set in Settings, else a few hundred; at most half. */
export function replyRoom(maxTokens) {
  const want = typeof maxTokens === "number" && maxTokens > 0 ? maxTokens : Math.min(DEFAULT_REPLY_ROOM, Math.floor(state.nCtx / 4));
  return Math.min(want, Math.floor(state.nCtx / 2));
}

/**
 * What of `messages` (the branch, oldest first, ending with the newest message) the model gets:
 * {send, first, dropped, fits, tokens}. `send`: the messages to send (the first one may carry
 * the files of turns left out); `first`: the id of the first message read when `dropped` > 0;
 * `fits`: false when even the newest turn alone is too long; `tokens`: the prompt's size.
 */
export async function planContext(messages, system, maxTokens) {
  const counts = await Promise.all(messages.map(messageTokens));
  const budget = state.nCtx - replyRoom(maxTokens) - PROMPT_EXTRA - (system ? PER_MESSAGE + (await countText(system)) : 0);
  const total = counts.reduce((a, b) => a + b, 0);
  if (!state.nCtx || total <= budget) return { send: messages, first: null, dropped: 0, fits: true, tokens: total };
  const starts = messages.map((m, i) => i).filter((i) => i > 0 && messages[i].role === "user");
  const sizeFrom = (s) => counts.slice(s).reduce((a, b) => a + b, 0);
  let s = starts.find((i) => sizeFrom(i) <= budget);
  const fits = s !== undefined;
  if (!fits) s = starts.length ? starts[starts.length - 1] : 0;
  let used = sizeFrom(s);
  const kept = [];
  for (const m of messages.slice(0, s).reverse()) {   // the files of turns left out, newest first, while they fit
    for (const a of m.attachments || []) {
      const n = await fileTokens(a);
      if (used + n <= budget) {
        kept.unshift(a);
        used += n;
      }
    }
  }
  const send = messages.slice(s);
  if (kept.length && send.length) send[0] = { ...send[0], attachments: [...kept, ...(send[0].attachments || [])] };
  return { send, first: s > 0 ? messages[s].id : null, dropped: s, fits, tokens: used };
}
