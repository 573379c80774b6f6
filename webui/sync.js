// Tabs of the same page stay in step, and no save loses another tab's messages.
//
// Opening the app's file again opens a second tab on the running app, on the same chat. Each
// save announces itself on a BroadcastChannel; the other tabs then load that chat again (when
// they have it open) and merge it in, so a message sent in one tab appears in the others. When
// an announcement was missed (another browser, a tab asleep), the save itself is refused (409,
// save.js) and the saved copy is merged in the same way before saving again: both tabs'
// messages stay, as branches where they went different ways (‹ 1/2 ›), and the page says so.
import { api } from "./api.js";
import { renderChatList } from "./chatlist.js";
import { addNotice, renderCurrent } from "./render.js";
import { setConflictHook, setSavedHook } from "./save.js";
import { state } from "./state.js";
import { mergeRemote } from "./tree.js";
import { newId, toast } from "./util.js";

const CHANNEL = "llmpack-chats";
const TAB = newId();
const channel = typeof BroadcastChannel === "function" ? new BroadcastChannel(CHANNEL) : null;
let onDeleted = () => {};

export const BOTH_KEPT = "This chat was also changed in another tab or window, so it was loaded again. " +
  "Nothing was lost: where the two went different ways, ‹ › beside a message switches between them.";

function announce(message) {
  if (channel) channel.postMessage({ ...message, model: state.model, tab: TAB });
}

/** Tell the other tabs that `id` was deleted here. */
export function announceDeleted(id) {
  announce({ type: "deleted", id });
}

function isEditing() {
  return !!document.querySelector("#messages .message.editing, #messages .system-bar.editing");
}

/** Redraw `chat` when it is on screen and no edit box is open in it (that redraw comes when the edit ends). */
function redraw(chat) {
  if (state.current === chat && !isEditing()) renderCurrent();
}

/** Load the saved copy of `chat` and merge it in. Returns the merge ({added, own}), or null when it is gone. */
async function pull(chat) {
  let remote;
  try {
    remote = await api("GET", "/api/chats/" + chat.id);
  } catch (err) {
    if (err.status === 404) return null;
    throw err;
  }
  const writing = state.gen && state.gen.chat === chat ? state.gen.msg : null;
  return mergeRemote(chat, remote, writing);
}

/** A save was refused as stale: merge the saved copy in; true to save again. */
async function onConflict(chat) {
  const merged = await pull(chat);
  if (merged === null) {   // deleted elsewhere while it was being added to here: keep it
    chat.version = 0;
    toast("This chat had been deleted in another tab or window; it is saved again, as it is here.");
    return true;
  }
  renderChatList();
  redraw(chat);
  if (merged.added && state.current === chat) addNotice(BOTH_KEPT, "info");
  return true;
}

async function onMessage(ev) {
  const m = ev.data;
  if (!m || m.model !== state.model || m.tab === TAB) return;
  if (m.type === "deleted") {
    const i = state.chats.findIndex((c) => c.id === m.id);
    if (i >= 0 && !(state.gen && state.gen.chat === state.chats[i])) onDeleted(state.chats[i]);
    return;
  }
  if (m.type !== "saved") return;
  let chat = state.chats.find((c) => c.id === m.id);
  if (!chat) {   // a chat begun in another tab joins this tab's list
    chat = { id: m.id, title: m.title, mode: m.mode, created: m.updated, updated: m.updated, n_messages: m.n_messages,
      messages: null };
    state.chats.push(chat);
    renderChatList();
    return;
  }
  if (!chat.messages) {   // listed, never opened here: its summary is enough
    Object.assign(chat, { title: m.title, updated: m.updated, n_messages: m.n_messages });
    renderChatList();
    return;
  }
  // a reply being written here saves soon, and that save merges (409); nothing to do until then
  if ((chat.version || 0) >= m.version || (state.gen && state.gen.chat === chat)) return;
  try {
    if ((await pull(chat)) === null) return;
  } catch (err) {
    return;   // the next announcement or save brings it
  }
  renderChatList();
  redraw(chat);
}

/** Wire the channel and save.js's hooks; `deleted(chat)` removes a chat another tab deleted. */
export function wireSync(deleted) {
  onDeleted = deleted;
  setConflictHook(onConflict);
  setSavedHook((chat) => announce({ type: "saved", id: chat.id, version: chat.version, title: chat.title, mode: chat.mode,
    updated: chat.updated, n_messages: chat.messages.length }));
  if (channel) channel.onmessage = onMessage;
}
