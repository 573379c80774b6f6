// llmpack chat page: the entry module. Waits for the model (GET /health), then wires the page.
//
//   GET  /health               503 {status:"loading", phase, progress, message}
//                              200 {status:"ok", model, display_name, n_ctx, system_prompt, sampling,
//                                   base_model, backend?}
//                              500 {status:"error", message}
//   /api/chats                 saved chats (chats.js)
//   POST /v1/chat/completions, /v1/completions   the replies (stream.js)
//   POST /v1/extract           an attached file's text and token counts (attach.js)
//
// Safety: model output goes through markdown.js (DOM nodes from an allowlist); every other piece
// of untrusted text goes through textContent. Nothing assigns innerHTML.
import { confirmFit, hasFiles, isReading, readyFiles, takeFiles, wireAttachments } from "./attach.js";
import { showMicrophone } from "./audio.js";
import { renderChatList, onChatListKeydown } from "./chatlist.js";
import { closeSidebar, deleteChat, ensureChat, exportChat, importChatFile, loadChatList, newChat, onChatListClick,
  openChat, removeDeleted, reopenLast, syncSidebarToggle } from "./chats.js";
import { editLast, editSystem, regenerate, startEdit, switchTo } from "./edit.js";
import { loadPresets, wirePresets } from "./presets.js";
import { openSearch, wireSearch } from "./search.js";
import { wireSync } from "./sync.js";
import { addMessage } from "./tree.js";
import { showModelInfo, wireBaseNotice } from "./header.js";
import { markdownReady } from "./markdown.js";
import { clearNotices, onCopyClick, renderCurrent, showUserMessage, updateModeUi } from "./render.js";
import { apiKey, closeSettings, fillSettings, loadSettings, SAMPLING_KEYS, syncSettings, wireSettings } from "./settings.js";
import { NARROW, state, ui } from "./state.js";
import { saveChat, setLeaving } from "./save.js";
import { generate, setComposerHook, stopGeneration } from "./stream.js";
import { startTools, wireToolSettings } from "./toolsettings.js";
import { loadJSON, saveJSON, titleFrom } from "./util.js";

const HEALTH_POLL_MS = 300;
const SIDEBAR_KEY = "llmpack.sidebar.v1";
let healthFailures = 0;

// ------------------------------------------------------------------ views

function showView(name) {
  ui.loading.hidden = name !== "loading";
  ui.error.hidden = name !== "error";
  ui.app.hidden = name !== "app";
}

function showLoading(info) {
  showView("loading");
  const phase = info && info.phase;
  // the server's words for the phase (runtime/server/http/state.py MESSAGES), said once
  const said = info && typeof info.message === "string" && info.message;
  ui.phase.textContent = (info && info.phaseText) || (said ? said.replace(/[.…]*$/, "…") : "Starting…");
  ui.loading.setAttribute("data-phase", phase || "starting");
  const p = info && typeof info.progress === "number" && isFinite(info.progress) ? Math.max(0, Math.min(1, info.progress)) : null;
  if (p === null) {
    ui.progress.removeAttribute("value");   // indeterminate
    ui.progressPercent.textContent = "";
  } else {
    ui.progress.value = p;
    ui.progressPercent.textContent = Math.round(p * 100) + "%";
  }
}

function showError(message) {
  showView("error");
  ui.errorMessage.textContent = message || "Something went wrong while preparing the model.";
}

// ------------------------------------------------------------------ health

async function pollHealth() {
  const ctrl = new AbortController();
  const guard = setTimeout(() => ctrl.abort(), 10000);
  let status = 0;
  let b = {};
  try {
    // with --api-key, /health gives its details (model, context, defaults) only to the key
    const headers = apiKey() ? { Authorization: "Bearer " + apiKey() } : {};
    const resp = await fetch("/health", { cache: "no-store", signal: ctrl.signal, headers });
    status = resp.status;
    b = await resp.json().catch(() => ({}));
    if (!b || typeof b !== "object") b = {};
  } catch (e) {
    clearTimeout(guard);
    healthFailures += 1;
    // One missed answer (a busy computer) keeps what the card said; only a long silence is news.
    if (healthFailures > 10) showLoading({ phaseText: "Waiting for the app to answer… Is it still running?" });
    else if (!ui.loading.hasAttribute("data-phase")) showLoading({ phaseText: "Starting…" });
    setTimeout(pollHealth, healthFailures > 10 ? 1000 : HEALTH_POLL_MS);
    return;
  }
  clearTimeout(guard);
  healthFailures = 0;
  if (status === 200 && (b.status === "ok" || b.status === undefined)) {
    onReady(b);
  } else if (b.status === "error" || (status >= 400 && ![502, 503, 504].includes(status) && b.status !== "loading")) {
    showError(typeof b.message === "string" && b.message ? b.message : "The app could not get the model ready (HTTP " + status + ").");
  } else {
    showLoading(b);
    setTimeout(pollHealth, HEALTH_POLL_MS);
  }
}

const num = (v) => (typeof v === "number" && isFinite(v) ? v : undefined);

async function onReady(h) {
  state.ready = true;
  state.model = typeof h.model === "string" ? h.model : "";
  state.displayName = (typeof h.display_name === "string" && h.display_name) || state.model || "Local model";
  state.nCtx = num(h.n_ctx) || 0;
  state.vision = h.vision === true;   // started with a vision projector: pictures can be attached
  state.hears = h.hears === true;     // started with an audio projector: the microphone and sound files
  state.toolsNative = h.tools === true;   // its chat template knows tools (tools.js)
  state.attach = h.attachments && typeof h.attachments === "object" ? h.attachments : null;   // the server's file limits
  showMicrophone();
  state.baseModel = h.base_model === true;
  state.newMode = state.baseModel ? "complete" : "chat";
  updateModeUi();   // with the base-model notice, before any await: the two never disagree on screen
  const d = h.defaults && typeof h.defaults === "object" ? h.defaults : {};   // the server's, never a copy
  state.defaults = { system_prompt: typeof h.system_prompt === "string" ? h.system_prompt : "" };
  for (const k of SAMPLING_KEYS) state.defaults[k] = d[k] === null ? null : num(d[k]);
  state.defaults.completion_max_tokens = num(d.completion_max_tokens);
  showModelInfo(h);
  document.title = state.displayName;
  ui.emptyTitle.textContent = "Chat with " + state.displayName;

  fillSettings();
  showView("app");
  await markdownReady;
  autosize();
  renderCurrent();
  updateComposer();
  await loadChatList();
  await reopenLast();
  await syncSettings();
  startTools();    // the MCP servers: connected in the background
  loadPresets();   // Settings' preset list; nothing waits for it
  if (!NARROW.matches) ui.prompt.focus();
}

// ------------------------------------------------------------------ composer

function autosize() {
  const ta = ui.prompt;
  if (!ta.offsetParent) return;   // not on screen yet: measure when it is
  ta.style.height = "auto";
  const max = Math.max(120, Math.floor(window.innerHeight * 0.4));
  ta.style.height = Math.min(ta.scrollHeight, max) + "px";
  ta.style.overflowY = ta.scrollHeight > max ? "auto" : "hidden";
}

function canContinue() {
  const c = state.current;
  return !!c && c.mode === "complete" && c.messages.length > 0;
}

function updateComposer() {
  const busy = !!state.gen;
  const empty = ui.prompt.value.trim() === "" && !readyFiles().length;
  ui.send.hidden = busy;
  ui.stop.hidden = !busy;
  ui.send.disabled = busy || !state.ready || isReading() || (empty && !canContinue());
  ui.send.title = ui.prompt.value.trim() === "" && canContinue() ? "Continue the text (Enter)" : "Send (Enter)";
  ui.app.classList.toggle("generating", busy);
}

/** Send the message box (and its files); force: leave out the oldest messages even where Settings say ask. */
async function send(force) {
  const text = ui.prompt.value;
  const chatMode = !(state.current && state.current.mode === "complete") && !ui.app.classList.contains("completion-mode");
  const withFiles = chatMode && hasFiles();
  if ((!text.trim() && !withFiles && !canContinue()) || state.gen || !state.ready || isReading()) return;
  if (withFiles && !(await confirmFit())) return;
  clearNotices();
  const chat = ensureChat();
  const files = withFiles ? takeFiles() : [];
  if (chat.messages.length === 0) chat.title = titleFrom(text.trim() ? text : files.map((f) => f.name).join(", "));
  let userMsg = null;
  if (text.trim() || files.length) {
    userMsg = { role: "user", content: text };
    if (files.length) userMsg.attachments = files;
    addMessage(chat, userMsg);
    showUserMessage(chat, userMsg);
  }
  chat.updated = Date.now();
  ui.prompt.value = "";
  autosize();
  saveChat(chat);
  renderChatList();
  generate(chat, { userMsg, force: force === true, again: (f) => send(f) });
}

function onPromptKeydown(ev) {
  if (ev.key === "ArrowUp" && !ui.prompt.value && !ev.shiftKey && !ev.altKey && !ev.ctrlKey && !ev.metaKey) {
    if (editLast()) ev.preventDefault();
    return;
  }
  if (ev.key === "Enter" && !ev.shiftKey && !ev.altKey && !ev.ctrlKey && !ev.metaKey && !ev.isComposing && ev.keyCode !== 229) {
    ev.preventDefault();
    send();
  }
}

function setMode(mode) {
  const shown = state.current && state.current.messages.length ? state.current.mode : state.newMode;
  if (shown !== mode) newChat(mode);
}

// ------------------------------------------------------------------ wiring

function toggleSidebar() {
  if (NARROW.matches) {
    ui.app.classList.toggle("sidebar-open");
  } else {
    ui.app.classList.toggle("sidebar-collapsed");
    saveJSON(SIDEBAR_KEY, { collapsed: ui.app.classList.contains("sidebar-collapsed") });
  }
  syncSidebarToggle();
}

function onKeydown(ev) {
  if ((ev.ctrlKey || ev.metaKey) && !ev.altKey && !ev.shiftKey && (ev.key === "k" || ev.key === "K")) {
    ev.preventDefault();
    openSearch();
    return;
  }
  if (ev.key !== "Escape") return;
  if (ui.exportMenu.open) ui.exportMenu.open = false;
  else if (!ui.settings.hidden) closeSettings();
  else if (NARROW.matches && ui.app.classList.contains("sidebar-open")) closeSidebar();
  else if (state.gen) stopGeneration();
}

function init() {
  loadSettings();
  const sb = loadJSON(SIDEBAR_KEY, null);
  if (sb && sb.collapsed) ui.app.classList.add("sidebar-collapsed");
  setComposerHook(updateComposer);
  wireSettings();
  wirePresets();
  wireToolSettings();
  wireSync(removeDeleted);
  wireSearch(openChat);
  wireAttachments(updateComposer);

  ui.composerForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    send();
  });
  ui.prompt.addEventListener("keydown", onPromptKeydown);
  ui.prompt.addEventListener("input", () => {
    autosize();
    updateComposer();
  });
  ui.stop.addEventListener("click", stopGeneration);
  ui.newChat.addEventListener("click", () => newChat());
  ui.messages.addEventListener("click", (ev) => {
    const btn = ev.target.closest("button");
    if (!btn || !ui.messages.contains(btn) || onCopyClick(btn)) return;
    if (btn.classList.contains("regenerate-message")) regenerate();
    else if (btn.classList.contains("edit-message")) startEdit(btn.closest(".message"));
    else if (btn.classList.contains("version-prev")) switchTo(btn, -1);
    else if (btn.classList.contains("version-next")) switchTo(btn, 1);
    else if (btn.classList.contains("system-edit")) editSystem(btn.closest(".system-bar"));
  });
  ui.chatList.addEventListener("click", onChatListClick);
  ui.chatList.addEventListener("keydown", (ev) => onChatListKeydown(ev, deleteChat));
  ui.skipLink.addEventListener("click", (ev) => {
    ev.preventDefault();
    closeSidebar();
    ui.prompt.focus();
  });
  wireBaseNotice();
  ui.sidebarToggle.addEventListener("click", toggleSidebar);
  ui.sidebarClose.addEventListener("click", () => (NARROW.matches ? closeSidebar() : toggleSidebar()));
  ui.sidebarBackdrop.addEventListener("click", closeSidebar);
  ui.settingsButton.addEventListener("click", closeSidebar);
  ui.modeChat.addEventListener("click", () => setMode("chat"));
  ui.modeComplete.addEventListener("click", () => setMode("complete"));
  ui.useCompletion.addEventListener("click", () => setMode("complete"));
  ui.exportJson.addEventListener("click", () => { ui.exportMenu.open = false; exportChat("json"); });
  ui.exportMarkdown.addEventListener("click", () => { ui.exportMenu.open = false; exportChat("markdown"); });
  document.addEventListener("click", (ev) => {
    if (ui.exportMenu.open && !ui.exportMenu.contains(ev.target)) ui.exportMenu.open = false;
  });
  ui.importChat.addEventListener("click", () => ui.importFile.click());
  ui.importFile.addEventListener("change", () => {
    const file = ui.importFile.files && ui.importFile.files[0];
    ui.importFile.value = "";
    if (file) importChatFile(file);
  });
  ui.retry.addEventListener("click", () => window.location.reload());
  document.addEventListener("keydown", onKeydown);
  NARROW.addEventListener("change", () => {
    ui.app.classList.remove("sidebar-open");
    syncSidebarToggle();
  });
  syncSidebarToggle();
  window.addEventListener("pagehide", () => {
    setLeaving(true);
    if (state.gen) saveChat(state.gen.chat, { leaving: true });   // marked interrupted (save.js)
  });
  window.addEventListener("pageshow", () => setLeaving(false));
  window.addEventListener("resize", autosize);

  updateComposer();
  // Don't flash the loading view when the model is already up.
  setTimeout(() => {   // ... and never cover what a first /health answer already showed
    if (!state.ready && ui.error.hidden && !ui.loading.hasAttribute("data-phase")) showLoading({});
  }, 150);
  pollHealth();
}

init();
