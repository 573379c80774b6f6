// Saved chats: kept by the app in the per-user data folder (/api/chats, one list per model), so
// they survive a restart on another port. The API needs this launch's secret, which the page got
// from the address the app opened (/?token=..., api.js); without it chats live only in this tab.
import { api, ApiError, chatHeaders } from "./api.js";
import { NARROW, state, ui } from "./state.js";
import { renderCurrent } from "./render.js";
import { stopGeneration } from "./stream.js";
import { download, el, newId, relTime, toast } from "./util.js";

const SAVE_EVERY_MS = 3000;

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
      : "Chats cannot be saved right now: " + err.message;
  }
  ui.chatLocked.hidden = !state.locked;
  ui.importChat.disabled = state.locked;
  renderChatList();
}

// One save at a time per chat, the newest content wins.
const saving = new Map();

export function saveChat(chat) {
  if (state.locked || !chat.messages || chat.messages.length === 0) return Promise.resolve();
  const body = {
    title: chat.title, mode: chat.mode, created: chat.created, updated: chat.updated,
    messages: chat.messages.map((m) => {
      const out = { role: m.role, content: m.content };
      if (m.stats) out.stats = m.stats;
      if (m.attachments && m.attachments.length) out.attachments = m.attachments;
      return out;
    }),
  };
  const previous = saving.get(chat.id) || Promise.resolve();
  const next = previous.then(() => api("PUT", "/api/chats/" + chat.id, body)).catch((err) => {
    toast("This chat could not be saved: " + err.message);
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

export function renderChatList() {
  const list = ui.chatList;
  list.replaceChildren();
  const chats = state.chats.filter((c) => (c.messages ? c.messages.length : c.n_messages) > 0);
  chats.sort((a, b) => b.updated - a.updated);
  ui.chatListEmpty.hidden = chats.length > 0 || state.locked;
  for (const c of chats) {
    const li = el("li", "chat-item");
    li.setAttribute("data-chat-id", c.id);
    li.setAttribute("data-testid", "chat-item");
    const active = state.current && state.current.id === c.id;
    if (active) li.classList.add("active");

    const open = el("button", "chat-open");
    open.type = "button";
    if (active) open.setAttribute("aria-current", "true");
    open.appendChild(el("span", "chat-title", c.title || "Chat"));
    const meta = el("span", "chat-when", relTime(c.updated));
    if (c.mode === "complete") meta.textContent += " · text completion";
    open.appendChild(meta);
    open.title = c.title || "";

    const del = el("button", "chat-delete", "×");
    del.type = "button";
    del.setAttribute("data-testid", "chat-delete");
    del.setAttribute("aria-label", "Delete chat: " + (c.title || "Chat"));
    del.title = "Delete chat";
    li.append(open, del);
    list.appendChild(li);
  }
}

export function onChatListClick(ev) {
  const li = ev.target.closest(".chat-item");
  if (!li) return;
  const id = li.getAttribute("data-chat-id");
  if (ev.target.closest(".chat-delete")) deleteChat(id);
  else if (ev.target.closest(".chat-open")) openChat(id);
}

export async function openChat(id) {
  const chat = state.chats.find((c) => c.id === id);
  if (!chat) return;
  if (state.gen && state.gen.chat !== chat) stopGeneration();
  if (!chat.messages) {
    try {
      const full = await api("GET", "/api/chats/" + id);
      chat.messages = full.messages;
      chat.mode = full.mode;
    } catch (err) {
      toast("This chat could not be opened: " + err.message);
      return;
    }
  }
  dropEmptyDraft();
  state.current = chat;
  renderCurrent();
  renderChatList();
  closeSidebar();
  if (!NARROW.matches) ui.prompt.focus();
}

async function deleteChat(id) {
  const chat = state.chats.find((c) => c.id === id);
  if (!chat) return;
  if (!chat.messages) {   // keep its text, so Undo can put it back
    try {
      chat.messages = (await api("GET", "/api/chats/" + id)).messages;
    } catch (err) {
      chat.messages = [];
    }
  }
  const idx = state.chats.indexOf(chat);
  if (idx < 0) return;
  if (state.gen && state.gen.chat === chat) stopGeneration();
  state.chats.splice(idx, 1);
  const wasCurrent = state.current === chat;
  if (wasCurrent) state.current = null;
  if (!state.locked) api("DELETE", "/api/chats/" + id).catch((err) => toast("Could not delete: " + err.message));
  renderChatList();
  if (wasCurrent) renderCurrent();
  toast("Chat deleted.", "Undo", async () => {
    if (!state.chats.includes(chat)) state.chats.push(chat);
    await saveChat(chat);
    if (!state.current || state.current.messages.length === 0) {
      state.current = chat;
      renderCurrent();
    }
    renderChatList();
  }, 6000);
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
    state.current = { id: newId(), title: "New chat", mode: state.newMode, created: now, updated: now, messages: [] };
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
    toast("Export failed: " + err.message);
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
  let data;
  try {
    data = JSON.parse(await file.text());
  } catch (e) {
    toast("That file is not a chat exported from llmpack (not JSON).");
    return;
  }
  try {
    const chat = await api("POST", "/api/chats/import", data);
    state.chats.push({ ...chat, messages: null, n_messages: 1 });
    await openChat(chat.id);
    toast("Chat imported.");
  } catch (err) {
    toast("Import failed: " + err.message);
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
