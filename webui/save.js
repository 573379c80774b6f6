// Saving chats to the app (/api/chats), shared by the chat list (chats.js) and the streaming
// client (stream.js), which both import it: neither imports the other for it.
//
// A reply being written is saved every few seconds, marked "interrupted" until it finishes, so
// a reload or a closed tab leaves a reply that says it was cut off; the finished reply's save
// replaces the mark with its figures.
import { api } from "./api.js";
import { plainError } from "./errors.js";
import { state } from "./state.js";
import { toast } from "./util.js";

const SAVE_EVERY_MS = 3000;
export const INTERRUPTED = "interrupted";

function body(chat) {
  const writing = state.gen && state.gen.chat === chat ? state.gen.msg : null;
  return {
    title: chat.title, mode: chat.mode, created: chat.created, updated: chat.updated,
    messages: chat.messages.map((m) => {
      const out = { role: m.role, content: m.content };
      if (m === writing) out.stats = { finish: INTERRUPTED };
      else if (m.stats) out.stats = m.stats;
      if (m.attachments && m.attachments.length) out.attachments = m.attachments;
      if (m.thinking) out.thinking = m.thinking;   // a reasoning model's thinking, shown folded
      return out;
    }),
  };
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

/** Save `chat`; opts.leaving: the page is going away, so send it now (keepalive) rather than in turn. */
export function saveChat(chat, opts) {
  if (state.locked || !chat.messages || chat.messages.length === 0) return Promise.resolve();
  if (leaving && !(opts && opts.leaving)) return Promise.resolve();
  const data = body(chat);
  if (opts && opts.leaving) return api("PUT", "/api/chats/" + chat.id, data, { keepalive: true }).catch(() => {});
  const previous = saving.get(chat.id) || Promise.resolve();
  const next = previous.then(() => api("PUT", "/api/chats/" + chat.id, data)).catch((err) => {
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
