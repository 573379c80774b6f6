// Saving chats to the app (/api/chats), shared by the chat list (chats.js) and the streaming
// client (stream.js), which both import it: neither imports the other for it.
//
// A reply being written is saved every few seconds, marked "interrupted" until it finishes, so
// a reload or a closed tab leaves a reply that says it was cut off; the finished reply's save
// replaces the mark with its figures.
//
// Each save names the version of the chat it was based on (chat.version). When another tab or
// window saved the chat in between, the app answers 409: then sync.js (through setConflictHook)
// loads the saved copy, merges it in (nothing is lost: tree.js mergeRemote) and the save is
// made again on top of it. A saved chat is announced to the other tabs (setSavedHook).
import { api } from "./api.js";
import { plainError } from "./errors.js";
import { state } from "./state.js";
import { toast } from "./util.js";

const SAVE_EVERY_MS = 3000;
const MAX_RETRIES = 3;
export const INTERRUPTED = "interrupted";

let onConflict = async () => false;
let onSaved = () => {};

/** sync.js: fn(chat) merges the saved copy into `chat`; resolves true to save again. */
export function setConflictHook(fn) {
  onConflict = fn;
}

/** sync.js: fn(chat) after each save (to tell the other tabs). */
export function setSavedHook(fn) {
  onSaved = fn;
}

function body(chat) {
  const writing = state.gen && state.gen.chat === chat ? state.gen.msg : null;
  const out = {
    title: chat.title, mode: chat.mode, created: chat.created, updated: chat.updated, leaf: chat.leaf,
    messages: chat.nodes.map((m) => {
      const item = { id: m.id, parent: m.parent, role: m.role, content: m.content };
      if (m === writing) item.stats = { ...(m.stats || {}), finish: INTERRUPTED };
      else if (m.stats) item.stats = m.stats;
      if (m.attachments && m.attachments.length) item.attachments = m.attachments;
      if (m.thinking) item.thinking = m.thinking;   // a reasoning model's thinking, shown folded
      if (m.sources) item.sources = m.sources;   // the places of the files that support a reply (sources.js)
      if (m.rounds && m.rounds.length) item.rounds = m.rounds;   // its tool calls and their results (tools.js)
      return item;
    }),
  };
  if (typeof chat.system === "string") out.system = chat.system;
  return out;
}

// One save at a time per chat, the newest content wins.
const saving = new Map();
// Set while the page unloads: the browser then aborts the reply's stream, and the "stopped" save
// that abort would make must not overwrite the keepalive save that marks the reply interrupted.
let leaving = false;

/** The page is going away (pagehide), or came back from the back/forward cache (pageshow). */
export function setLeaving(value) {
  leaving = value;
}

function hasMessages(chat) {
  return !!chat.nodes && chat.nodes.length > 0;
}

async function put(chat) {
  for (let tries = 0; ; tries++) {
    try {
      const saved = await api("PUT", "/api/chats/" + chat.id, { ...body(chat), base_version: chat.version || 0 });
      chat.version = saved.version;
      onSaved(chat);
      return;
    } catch (err) {
      if (err.status !== 409 || tries >= MAX_RETRIES || !(await onConflict(chat))) throw err;
    }
  }
}

/** Save `chat`; opts.leaving: the page is going away, so send it now (keepalive) rather than in turn. */
export function saveChat(chat, opts) {
  if (state.locked || !hasMessages(chat)) return Promise.resolve();
  if (leaving && !(opts && opts.leaving)) return Promise.resolve();
  if (opts && opts.leaving) {
    // no time to load and merge: where another tab saved since, the app keeps both sides' messages
    const data = { ...body(chat), base_version: chat.version || 0, merge: true };
    return api("PUT", "/api/chats/" + chat.id, data, { keepalive: true }).catch(() => {});
  }
  const previous = saving.get(chat.id) || Promise.resolve();
  const next = previous.then(() => put(chat)).catch((err) => {
    const plain = plainError(err);
    toast("This chat could not be saved. " + plain.text, undefined, undefined, undefined, plain.detail);
  });
  saving.set(chat.id, next);
  return next;
}

/** Save a chat while its reply streams in, at most every few seconds. */
export function saveNowAndThen(gen) {
  if (Date.now() - gen.lastSave > SAVE_EVERY_MS) {
    gen.lastSave = Date.now();
    saveChat(gen.chat);
  }
}
