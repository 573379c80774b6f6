// Saved chats: kept by the app in the per-user data folder (/api/chats, one list per model), so
// they survive a restart on another port. The API needs this launch's secret, which the page got
// from the address the app opened (/?token=..., api.js); without it chats live only in this tab.
import { api, ApiError, chatHeaders } from "./api.js";
import { renderChatList } from "./chatlist.js";
import { importError, plainError } from "./errors.js";
import { NARROW, state, ui } from "./state.js";
import { renderCurrent } from "./render.js";
import { saveChat } from "./save.js";
import { effective } from "./settings.js";
import { stopGeneration } from "./stream.js";
import { announceDeleted } from "./sync.js";
import { loadInto, refresh } from "./tree.js";
import { download, loadJSON, newId, saveJSON, toast } from "./util.js";

const OPEN_KEY = "llmpack.open-chat.v1";   // {model id: the id of the chat last open}

/** Remember which chat is open (null: a new one), per model, so a reload reopens it. */
function rememberOpen(chat) {
  const open = loadJSON(OPEN_KEY, {});
  const all = open && typeof open === "object" ? open : {};
  all[state.model] = chat ? chat.id : null;
  saveJSON(OPEN_KEY, all);
}

/** After a reload or a restart: reopen the chat that was open, unless a new one was begun meanwhile. */
export async function reopenLast() {
  const open = loadJSON(OPEN_KEY, {});
  const id = open && typeof open === "object" ? open[state.model] : null;
  if (!id || state.current) return;   // a chat begun meanwhile (even one whose message came back) stays
  if (state.chats.some((c) => c.id === id)) await openChat(id, { quiet: true });
}

function toastError(prefix, err) {
  const plain = plainError(err);
  toast(prefix + " " + plain.text, undefined, undefined, undefined, plain.detail);
}

/** Fetch this model's chat list; on 401 the page works with unsaved chats and says why. */
export async function loadChatList() {
  try {
    const data = await api("GET", "/api/chats");
    state.locked = false;
    // a chat begun while the list was loading stays (and its object stays the one on screen)
    const mine = new Map(state.chats.map((c) => [c.id, c]));
    const saved = (data.data || []).map((c) => mine.get(c.id) || { ...c, messages: null });
    state.chats = [...saved, ...state.chats.filter((c) => !saved.includes(c))];
  } catch (err) {
    state.locked = true;
    ui.chatLocked.textContent = err.status === 401
      ? "Chats are not saved in this window: open the link the app printed when it started (it ends in ?token=…)."
      : "Chats cannot be saved right now. " + plainError(err).text;
  }
  ui.chatLocked.hidden = !state.locked;
  ui.importChat.disabled = state.locked;
  ui.searchInput.disabled = state.locked;   // search reads the saved chats
  renderChatList();
}

export function onChatListClick(ev) {
  const li = ev.target.closest(".chat-item");
  if (!li) return;
  const id = li.getAttribute("data-chat-id");
  if (ev.target.closest(".chat-delete")) deleteChat(id);
  else if (ev.target.closest(".chat-open")) openChat(id);
}

/** opts.quiet: reopened by the page itself (keep the sidebar and focus as they are). */
export async function openChat(id, opts) {
  const chat = state.chats.find((c) => c.id === id);
  if (!chat) return;
  if (state.gen && state.gen.chat !== chat) stopGeneration();
  if (!chat.messages) {
    try {
      loadInto(chat, await api("GET", "/api/chats/" + id));
    } catch (err) {
      toastError("This chat could not be opened.", err);
      return;
    }
  }
  if (opts && opts.quiet && state.current) return;   // begun meanwhile
  dropEmptyDraft();
  state.current = chat;
  rememberOpen(chat);
  renderCurrent();
  renderChatList();
  if (opts && opts.quiet) return;
  closeSidebar();
  if (!NARROW.matches) ui.prompt.focus();
}

export async function deleteChat(id) {
  const chat = state.chats.find((c) => c.id === id);
  if (!chat) return;
  if (!chat.messages) {   // keep its text, so Undo can put it back
    try {
      loadInto(chat, await api("GET", "/api/chats/" + id));
    } catch (err) {
      loadInto(chat, { messages: [] });
    }
  }
  const idx = state.chats.indexOf(chat);
  if (idx < 0) return;
  if (state.gen && state.gen.chat === chat) stopGeneration();
  state.chats.splice(idx, 1);
  const wasCurrent = state.current === chat;
  if (wasCurrent) state.current = null;
  if (wasCurrent) rememberOpen(null);
  if (!state.locked) {
    api("DELETE", "/api/chats/" + id).then(() => announceDeleted(id),
      (err) => toastError("This chat could not be deleted.", err));
  }
  renderChatList();
  if (wasCurrent) renderCurrent();
  toast("Chat deleted.", "Undo", async () => {
    if (!state.chats.includes(chat)) state.chats.push(chat);
    chat.version = 0;   // saved anew
    await saveChat(chat);
    if (!state.current || state.current.messages.length === 0) {
      state.current = chat;
      renderCurrent();
    }
    renderChatList();
  }, 6000);
}

/** Another tab deleted `chat`: it leaves this tab's list too (and the screen, saying so). */
export function removeDeleted(chat) {
  const i = state.chats.indexOf(chat);
  if (i >= 0) state.chats.splice(i, 1);
  if (state.current === chat) {
    state.current = null;
    rememberOpen(null);
    renderCurrent();
    toast("This chat was deleted in another tab or window.");
  }
  renderChatList();
}

function dropEmptyDraft() {
  if (state.current && state.current.messages.length === 0) {
    const i = state.chats.indexOf(state.current);
    if (i >= 0) state.chats.splice(i, 1);
  }
}

export function newChat(mode) {
  if (state.gen) stopGeneration();
  dropEmptyDraft();
  if (mode) state.newMode = mode;
  state.current = null;
  state.draftSystem = undefined;
  rememberOpen(null);
  renderCurrent();
  renderChatList();
  closeSidebar();
  ui.prompt.value = "";
  ui.prompt.dispatchEvent(new Event("input"));
  ui.prompt.focus();
}

export function ensureChat() {
  if (!state.current) {
    const now = Date.now();
    state.current = { id: newId(), title: "New chat", mode: state.newMode, created: now, updated: now, version: 0,
      nodes: [], leaf: null, messages: [] };
    if (state.newMode === "chat") {
      state.current.system = state.draftSystem !== undefined ? state.draftSystem : effective().system_prompt;
    }
    refresh(state.current);
    rememberOpen(state.current);
  }
  if (!state.chats.includes(state.current)) state.chats.push(state.current);
  return state.current;
}

// ------------------------------------------------------------------ export / import

export async function exportChat(format) {
  const chat = state.current;
  if (!chat || !chat.messages || chat.messages.length === 0) return;
  await saveChat(chat);
  const path = `/api/chats/${chat.id}/export?format=${format}`;
  try {
    const resp = await fetch(path, { headers: chatHeaders(), credentials: "omit", cache: "no-store" });
    if (!resp.ok) throw new ApiError(`HTTP ${resp.status}`, resp.status);
    download(fileName(resp.headers.get("Content-Disposition") || "", format), await resp.text(),
      format === "json" ? "application/json" : "text/markdown");
  } catch (err) {
    toastError("The export did not work.", err);
  }
}

/** The name a Content-Disposition offers: RFC 5987's UTF-8 `filename*` (any language), else the ASCII `filename`. */
function fileName(header, format) {
  const utf8 = /filename\*=UTF-8''([^;\s]+)/i.exec(header);
  if (utf8) {
    try {
      return decodeURIComponent(utf8[1]);
    } catch (e) {
      // a malformed escape: fall back to the ASCII name
    }
  }
  const plain = /filename="([^"]+)"/.exec(header);
  return plain ? plain[1] : "chat." + (format === "json" ? "json" : "md");
}

export async function importChatFile(file) {
  try {
    const chat = await api("POST", "/api/chats/import", JSON.parse(await file.text()));
    if (!state.chats.some((c) => c.id === chat.id)) state.chats.push({ ...chat, messages: null, n_messages: 1 });
    await openChat(chat.id);
    toast(chat.duplicate ? "This chat is already in your list; here it is." : "Chat imported.");
  } catch (err) {
    const plain = importError(err);
    toast(plain.text, undefined, undefined, 6000, plain.detail);
  }
}

// ------------------------------------------------------------------ the sidebar

function sidebarOpen() {
  return NARROW.matches ? ui.app.classList.contains("sidebar-open") : !ui.app.classList.contains("sidebar-collapsed");
}

export function syncSidebarToggle() {
  const open = sidebarOpen();
  ui.sidebarToggle.setAttribute("aria-expanded", open ? "true" : "false");
  ui.sidebarToggle.setAttribute("aria-label", open ? "Hide chat list" : "Show chat list");
  ui.sidebarBackdrop.hidden = !(NARROW.matches && open);
}

export function closeSidebar() {
  if (NARROW.matches && ui.app.classList.contains("sidebar-open")) {
    ui.app.classList.remove("sidebar-open");
    syncSidebarToggle();
  }
}
