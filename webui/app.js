/*
 * llmpack chat page.
 *
 * Talks to the same-origin server:
 *   GET  /health                 -> 503 {status:"loading", phase, progress, message}
 *                                   200 {status:"ok", model, display_name, n_ctx, system_prompt, sampling}
 *                                   500 {status:"error", message}
 *   POST /v1/chat/completions    -> Server-Sent Events (OpenAI chat.completion.chunk)
 *
 * Safety: model output is rendered by markdown.js (DOM nodes only) and every other
 * piece of untrusted text goes through textContent. Nothing here assigns innerHTML.
 */
(function () {
  "use strict";

  var HEALTH_POLL_MS = 300;
  var CHATS_KEY = "llmpack.chats.v1";
  var SETTINGS_KEY = "llmpack.settings.v1";
  var SIDEBAR_KEY = "llmpack.sidebar.v1";
  var MAX_CHATS = 200;
  var NARROW = window.matchMedia("(max-width: 800px)");

  var $ = function (id) {
    return document.getElementById(id);
  };

  var ui = {};
  [
    "loading", "phase", "progress", "progress-percent", "loading-message", "loading-title",
    "error", "error-message", "retry",
    "app", "sidebar", "sidebar-close", "sidebar-toggle", "sidebar-backdrop", "chat-list", "chat-list-empty",
    "model-name", "ctx-size", "new-chat", "settings-button",
    "messages", "empty-state", "empty-title",
    "composer-form", "prompt", "send", "stop", "tps", "ctx-used",
    "settings", "settings-backdrop", "settings-close", "settings-form", "system-prompt", "temperature",
    "top-p", "top-k", "min-p", "max-tokens", "api-key", "settings-error", "settings-reset", "settings-done",
    "toast", "toast-text", "toast-action",
  ].forEach(function (id) {
    ui[id.replace(/-([a-z])/g, function (_, c) { return c.toUpperCase(); })] = $(id);
  });

  var state = {
    ready: false,
    model: "",
    displayName: "",
    nCtx: 0,
    defaults: {},      // from /health: system_prompt, temperature, top_p, top_k, min_p, max_tokens
    store: { models: {}, api_key: "" },  // saved settings overrides, per model id
    chats: [],
    current: null,     // the chat object on screen (may be an unsaved empty draft)
    gen: null,         // the reply being generated: {chat, msg, node, controller, ...}
    healthFailures: 0,
  };

  // ------------------------------------------------------------------ storage

  var memoryStore = {};
  function loadJSON(key, fallback) {
    try {
      var raw = window.localStorage.getItem(key);
      if (raw == null) raw = memoryStore[key];
      return raw == null ? fallback : JSON.parse(raw);
    } catch (e) {
      return memoryStore[key] != null ? JSON.parse(memoryStore[key]) : fallback;
    }
  }

  function saveJSON(key, value) {
    var raw = JSON.stringify(value);
    memoryStore[key] = raw;
    try {
      window.localStorage.setItem(key, raw);
      return true;
    } catch (e) {
      return false;
    }
  }

  function saveChats() {
    var keep = state.chats.filter(function (c) { return c.messages.length > 0; });
    keep.sort(function (a, b) { return b.updated - a.updated; });
    if (keep.length > MAX_CHATS) keep = keep.slice(0, MAX_CHATS);
    var data = keep.map(function (c) {
      return {
        id: c.id, title: c.title, model: c.model, created: c.created, updated: c.updated,
        messages: c.messages.map(function (m) {
          var o = { role: m.role, content: m.content };
          if (m.stats) o.stats = m.stats;
          return o;
        }),
      };
    });
    // Out of space: drop the oldest chats (never the one on screen) until it fits.
    while (!saveJSON(CHATS_KEY, data)) {
      var victim = -1;
      for (var i = data.length - 1; i >= 0; i--) {
        if (!state.current || data[i].id !== state.current.id) { victim = i; break; }
      }
      if (victim < 0) {
        toast("This browser's storage is full; the chat could not be saved.");
        return;
      }
      var gone = data.splice(victim, 1)[0];
      state.chats = state.chats.filter(function (c) { return c.id !== gone.id; });
    }
  }

  function loadChats() {
    var data = loadJSON(CHATS_KEY, []);
    if (!Array.isArray(data)) data = [];
    state.chats = data.filter(function (c) {
      return c && typeof c.id === "string" && Array.isArray(c.messages);
    }).map(function (c) {
      return {
        id: c.id,
        title: typeof c.title === "string" ? c.title : "Chat",
        model: typeof c.model === "string" ? c.model : "",
        created: +c.created || Date.now(),
        updated: +c.updated || +c.created || Date.now(),
        messages: c.messages.filter(function (m) {
          return m && (m.role === "user" || m.role === "assistant") && typeof m.content === "string";
        }).map(function (m) {
          return { role: m.role, content: m.content, stats: m.stats && typeof m.stats === "object" ? m.stats : null };
        }),
      };
    });
  }

  // ------------------------------------------------------------------ small utilities

  function newId() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  }

  function fmtInt(n) {
    try {
      return Number(n).toLocaleString();
    } catch (e) {
      return String(n);
    }
  }

  function titleFrom(text) {
    var line = text.replace(/\s+/g, " ").trim();
    return line.length > 60 ? line.slice(0, 57).trimEnd() + "…" : line || "New chat";
  }

  function relTime(ts) {
    var d = new Date(ts);
    var now = new Date();
    if (d.toDateString() === now.toDateString()) {
      return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    }
    var y = new Date(now);
    y.setDate(now.getDate() - 1);
    if (d.toDateString() === y.toDateString()) return "Yesterday";
    return d.toLocaleDateString([], { month: "short", day: "numeric", year: d.getFullYear() === now.getFullYear() ? undefined : "numeric" });
  }

  var toastTimer = null;
  function toast(message, actionLabel, action, ms) {
    ui.toastText.textContent = message;
    if (actionLabel) {
      ui.toastAction.textContent = actionLabel;
      ui.toastAction.hidden = false;
      ui.toastAction.onclick = function () {
        hideToast();
        action();
      };
    } else {
      ui.toastAction.hidden = true;
      ui.toastAction.onclick = null;
    }
    ui.toast.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(hideToast, ms || 4000);
  }

  function hideToast() {
    ui.toast.hidden = true;
    ui.toastAction.onclick = null;
  }

  function copyText(str) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(str).catch(function () {
        return legacyCopy(str);
      });
    }
    return legacyCopy(str);
  }

  function legacyCopy(str) {
    return new Promise(function (resolve, reject) {
      var ta = document.createElement("textarea");
      ta.value = str;
      ta.setAttribute("readonly", "");
      ta.className = "clipboard-helper";
      document.body.appendChild(ta);
      ta.select();
      var ok = false;
      try {
        ok = document.execCommand("copy");
      } catch (e) {
        ok = false;
      }
      document.body.removeChild(ta);
      if (ok) resolve();
      else reject(new Error("copy failed"));
    });
  }

  function flashButton(btn, label) {
    var original = btn.getAttribute("data-label") || btn.textContent;
    btn.setAttribute("data-label", original);
    btn.textContent = label;
    btn.classList.add("done");
    clearTimeout(btn._flashTimer);
    btn._flashTimer = setTimeout(function () {
      btn.textContent = original;
      btn.classList.remove("done");
    }, 1500);
  }

  // ------------------------------------------------------------------ views

  function showView(name) {
    ui.loading.hidden = name !== "loading";
    ui.error.hidden = name !== "error";
    ui.app.hidden = name !== "app";
  }

  var PHASES = {
    extracting: "Unpacking the model (only needed the first time)…",
    loading: "Loading the model into memory…",
  };

  function showLoading(info) {
    showView("loading");
    var phase = info && info.phase;
    ui.phase.textContent = PHASES[phase] || (info && info.phaseText) || "Starting…";
    ui.loading.setAttribute("data-phase", phase || "starting");
    var p = info && typeof info.progress === "number" && isFinite(info.progress) ? Math.max(0, Math.min(1, info.progress)) : null;
    if (p === null) {
      ui.progress.removeAttribute("value"); // indeterminate
      ui.progressPercent.textContent = "";
    } else {
      ui.progress.value = p;
      ui.progressPercent.textContent = Math.round(p * 100) + "%";
    }
    ui.loadingMessage.textContent = (info && typeof info.message === "string" && info.message) || "";
  }

  function showError(message) {
    showView("error");
    ui.errorMessage.textContent = message || "Something went wrong while preparing the model.";
  }

  // ------------------------------------------------------------------ health

  var healthTimer = null;
  function pollHealth() {
    clearTimeout(healthTimer);
    var ctrl = "AbortController" in window ? new AbortController() : null;
    var guard = setTimeout(function () { if (ctrl) ctrl.abort(); }, 10000);
    fetch("/health", { cache: "no-store", signal: ctrl ? ctrl.signal : undefined })
      .then(function (resp) {
        return resp.json().then(
          function (j) { return { status: resp.status, body: j }; },
          function () { return { status: resp.status, body: null }; }
        );
      })
      .then(function (r) {
        clearTimeout(guard);
        state.healthFailures = 0;
        var b = r.body && typeof r.body === "object" ? r.body : {};
        if (r.status === 200 && (b.status === "ok" || b.status === undefined)) {
          onReady(b);
        } else if (b.status === "error" || (r.status >= 400 && r.status !== 503 && r.status !== 502 && r.status !== 504 && b.status !== "loading")) {
          showError(typeof b.message === "string" && b.message ? b.message : "The server answered HTTP " + r.status + ".");
        } else {
          showLoading(b);
          healthTimer = setTimeout(pollHealth, HEALTH_POLL_MS);
        }
      })
      .catch(function () {
        clearTimeout(guard);
        state.healthFailures += 1;
        showLoading({ phaseText: state.healthFailures > 10 ? "Waiting for the llmpack app to answer… is it still running?" : "Starting…" });
        healthTimer = setTimeout(pollHealth, state.healthFailures > 10 ? 1000 : HEALTH_POLL_MS);
      });
  }

  function num(v) {
    return typeof v === "number" && isFinite(v) ? v : undefined;
  }

  function onReady(h) {
    state.ready = true;
    state.model = typeof h.model === "string" ? h.model : "";
    state.displayName = (typeof h.display_name === "string" && h.display_name) || state.model || "Local model";
    state.nCtx = num(h.n_ctx) || 0;
    var s = h.sampling && typeof h.sampling === "object" ? h.sampling : {};
    state.defaults = {
      system_prompt: typeof h.system_prompt === "string" ? h.system_prompt : "",
      temperature: num(s.temperature),
      top_p: num(s.top_p),
      top_k: num(s.top_k),
      min_p: num(s.min_p),
      max_tokens: num(s.max_tokens),
    };

    ui.modelName.textContent = state.displayName;
    ui.modelName.title = state.model && state.model !== state.displayName ? state.model : "";
    ui.ctxSize.textContent = state.nCtx ? "ctx " + state.nCtx : "";
    ui.ctxSize.title = state.nCtx ? "Context window: " + fmtInt(state.nCtx) + " tokens (how much of the chat the model can see at once)" : "";
    ui.ctxSize.hidden = !state.nCtx;
    document.title = state.displayName;
    ui.emptyTitle.textContent = "Chat with " + state.displayName;

    fillSettings();
    showView("app");
    autosize();
    renderChatList();
    renderCurrent();
    updateComposer();
    if (!NARROW.matches) ui.prompt.focus();
  }

  // ------------------------------------------------------------------ settings

  var FIELDS = [
    { key: "temperature", input: "temperature", kind: "float", ok: function (v) { return v >= 0 && v <= 100; }, msg: "Temperature must be between 0 and 100." },
    { key: "top_p", input: "topP", kind: "float", ok: function (v) { return v > 0 && v <= 1; }, msg: "Top P must be more than 0 and at most 1." },
    { key: "top_k", input: "topK", kind: "int", ok: function (v) { return v >= -1; }, msg: "Top K must be a whole number, 0 or more." },
    { key: "min_p", input: "minP", kind: "float", ok: function (v) { return v >= 0 && v <= 1; }, msg: "Min P must be between 0 and 1." },
    { key: "max_tokens", input: "maxTokens", kind: "int", ok: function (v) { return v >= 1; }, msg: "Max tokens must be a whole number of at least 1 (or empty for no limit)." },
  ];

  function overrides() {
    var m = state.store.models[state.model];
    if (!m || typeof m !== "object") m = state.store.models[state.model] = {};
    return m;
  }

  function effective() {
    var o = overrides();
    var out = {
      system_prompt: typeof o.system_prompt === "string" ? o.system_prompt : state.defaults.system_prompt || "",
    };
    FIELDS.forEach(function (f) {
      out[f.key] = o[f.key] !== undefined ? o[f.key] : state.defaults[f.key];
    });
    return out;
  }

  function loadSettings() {
    var s = loadJSON(SETTINGS_KEY, null);
    if (s && typeof s === "object") {
      state.store.models = s.models && typeof s.models === "object" ? s.models : {};
      state.store.api_key = typeof s.api_key === "string" ? s.api_key : "";
    }
  }

  function saveSettings() {
    saveJSON(SETTINGS_KEY, state.store);
  }

  function fillSettings() {
    var e = effective();
    ui.systemPrompt.value = e.system_prompt;
    ui.systemPrompt.placeholder = "(none)";
    FIELDS.forEach(function (f) {
      var input = ui[f.input];
      input.value = e[f.key] === undefined || e[f.key] === null ? "" : String(e[f.key]);
      var d = state.defaults[f.key];
      input.placeholder = d === undefined ? (f.key === "max_tokens" ? "no limit" : "server default") : String(d);
      input.removeAttribute("aria-invalid");
    });
    ui.apiKey.value = state.store.api_key || "";
    ui.settingsError.textContent = "";
  }

  function onSettingInput(ev) {
    var target = ev.target;
    var o = overrides();
    if (target === ui.systemPrompt) {
      if (target.value === (state.defaults.system_prompt || "")) delete o.system_prompt;
      else o.system_prompt = target.value;
      saveSettings();
      return;
    }
    if (target === ui.apiKey) {
      state.store.api_key = target.value.trim();
      saveSettings();
      return;
    }
    var errors = [];
    FIELDS.forEach(function (f) {
      var input = ui[f.input];
      if (input !== target) {
        if (input.getAttribute("aria-invalid") === "true") errors.push(f.msg);
        return;
      }
      var raw = input.value.trim();
      if (raw === "") {
        delete o[f.key]; // back to the model's default ("no limit" for max tokens)
        if (f.key === "max_tokens" && state.defaults.max_tokens !== undefined) o[f.key] = null;
        input.removeAttribute("aria-invalid");
        return;
      }
      var v = f.kind === "int" ? Number(raw) : parseFloat(raw);
      if (!isFinite(v) || (f.kind === "int" && Math.floor(v) !== v) || !f.ok(v)) {
        input.setAttribute("aria-invalid", "true");
        errors.push(f.msg);
        return;
      }
      input.removeAttribute("aria-invalid");
      if (v === state.defaults[f.key]) delete o[f.key];
      else o[f.key] = v;
    });
    ui.settingsError.textContent = errors.join(" ");
    saveSettings();
  }

  function openSettings() {
    closeSidebar();
    fillSettings();
    ui.settings.hidden = false;
    ui.settingsBackdrop.hidden = false;
    ui.settingsButton.setAttribute("aria-expanded", "true");
    ui.systemPrompt.focus();
  }

  function closeSettings() {
    if (ui.settings.hidden) return;
    ui.settings.hidden = true;
    ui.settingsBackdrop.hidden = true;
    ui.settingsButton.setAttribute("aria-expanded", "false");
    fillSettings(); // drop any invalid, unsaved input
    if (!NARROW.matches) ui.prompt.focus();
  }

  // ------------------------------------------------------------------ sidebar

  function sidebarOpen() {
    return NARROW.matches ? ui.app.classList.contains("sidebar-open") : !ui.app.classList.contains("sidebar-collapsed");
  }

  function syncSidebarToggle() {
    var open = sidebarOpen();
    ui.sidebarToggle.setAttribute("aria-expanded", open ? "true" : "false");
    ui.sidebarToggle.setAttribute("aria-label", open ? "Hide chat list" : "Show chat list");
    ui.sidebarBackdrop.hidden = !(NARROW.matches && open);
  }

  function toggleSidebar() {
    if (NARROW.matches) {
      ui.app.classList.toggle("sidebar-open");
    } else {
      ui.app.classList.toggle("sidebar-collapsed");
      saveJSON(SIDEBAR_KEY, { collapsed: ui.app.classList.contains("sidebar-collapsed") });
    }
    syncSidebarToggle();
  }

  function closeSidebar() {
    if (NARROW.matches && ui.app.classList.contains("sidebar-open")) {
      ui.app.classList.remove("sidebar-open");
      syncSidebarToggle();
    }
  }

  function renderChatList() {
    var list = ui.chatList;
    while (list.firstChild) list.removeChild(list.firstChild);
    var chats = state.chats.filter(function (c) { return c.messages.length > 0; });
    chats.sort(function (a, b) { return b.updated - a.updated; });
    ui.chatListEmpty.hidden = chats.length > 0;
    chats.forEach(function (c) {
      var li = document.createElement("li");
      li.className = "chat-item";
      li.setAttribute("data-chat-id", c.id);
      li.setAttribute("data-testid", "chat-item");
      var active = state.current && state.current.id === c.id;
      if (active) li.classList.add("active");

      var open = document.createElement("button");
      open.type = "button";
      open.className = "chat-open";
      if (active) open.setAttribute("aria-current", "true");
      var t = document.createElement("span");
      t.className = "chat-title";
      t.textContent = c.title || "Chat";
      var when = document.createElement("span");
      when.className = "chat-when";
      when.textContent = relTime(c.updated);
      open.appendChild(t);
      open.appendChild(when);
      open.title = c.title || "";

      var del = document.createElement("button");
      del.type = "button";
      del.className = "chat-delete";
      del.setAttribute("data-testid", "chat-delete");
      del.setAttribute("aria-label", "Delete chat: " + (c.title || "Chat"));
      del.title = "Delete chat";
      del.textContent = "×";

      li.appendChild(open);
      li.appendChild(del);
      list.appendChild(li);
    });
  }

  function onChatListClick(ev) {
    var li = ev.target.closest(".chat-item");
    if (!li) return;
    var id = li.getAttribute("data-chat-id");
    if (ev.target.closest(".chat-delete")) deleteChat(id);
    else if (ev.target.closest(".chat-open")) openChat(id);
  }

  function openChat(id) {
    var chat = state.chats.find(function (c) { return c.id === id; });
    if (!chat) return;
    if (state.gen && state.gen.chat !== chat) stopGeneration();
    dropEmptyDraft();
    state.current = chat;
    renderCurrent();
    renderChatList();
    closeSidebar();
    if (!NARROW.matches) ui.prompt.focus();
  }

  function deleteChat(id) {
    var idx = state.chats.findIndex(function (c) { return c.id === id; });
    if (idx < 0) return;
    var chat = state.chats[idx];
    if (state.gen && state.gen.chat === chat) stopGeneration();
    state.chats.splice(idx, 1);
    var wasCurrent = state.current === chat;
    if (wasCurrent) state.current = null;
    saveChats();
    renderChatList();
    if (wasCurrent) renderCurrent();
    toast("Chat deleted.", "Undo", function () {
      if (state.chats.indexOf(chat) < 0) state.chats.push(chat);
      saveChats();
      if (!state.current || state.current.messages.length === 0) {
        state.current = chat;
        renderCurrent();
      }
      renderChatList();
    }, 6000);
  }

  function dropEmptyDraft() {
    if (state.current && state.current.messages.length === 0) {
      var i = state.chats.indexOf(state.current);
      if (i >= 0) state.chats.splice(i, 1);
    }
  }

  function newChat() {
    if (state.gen) stopGeneration();
    dropEmptyDraft();
    state.current = null;
    renderCurrent();
    renderChatList();
    closeSidebar();
    ui.prompt.value = "";
    autosize();
    updateComposer();
    ui.prompt.focus();
  }

  function ensureChat() {
    if (!state.current) {
      var now = Date.now();
      state.current = { id: newId(), title: "New chat", model: state.model, created: now, updated: now, messages: [] };
    }
    if (state.chats.indexOf(state.current) < 0) state.chats.push(state.current);
    return state.current;
  }

  // ------------------------------------------------------------------ messages

  function isNearBottom() {
    var m = ui.messages;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
  }

  function scrollToBottom() {
    ui.messages.scrollTop = ui.messages.scrollHeight;
  }

  function clearNotices() {
    var notices = ui.messages.querySelectorAll(".notice");
    for (var i = 0; i < notices.length; i++) notices[i].remove();
  }

  function renderCurrent() {
    var box = ui.messages;
    Array.prototype.slice.call(box.children).forEach(function (child) {
      if (child !== ui.emptyState) box.removeChild(child);
    });
    var chat = state.current;
    var msgs = chat ? chat.messages : [];
    ui.emptyState.hidden = msgs.length > 0;
    msgs.forEach(function (m, i) {
      var node = buildMessage(m);
      box.appendChild(node);
      if (state.gen && state.gen.msg === m) {
        state.gen.node = node;
        node.classList.add("streaming");
      }
    });
    refreshLastActions();
    updateStatusbar();
    scrollToBottom();
  }

  function buildMessage(m) {
    var node = document.createElement("div");
    node.className = "message " + m.role;
    node.setAttribute("data-testid", "message-" + m.role);
    node._msg = m;

    var content = document.createElement("div");
    content.className = "content";
    node.appendChild(content);

    var footer = document.createElement("div");
    footer.className = "message-footer";
    var stats = document.createElement("span");
    stats.className = "stats";
    footer.appendChild(stats);

    var copy = document.createElement("button");
    copy.type = "button";
    copy.className = "msg-action copy-message";
    copy.setAttribute("data-testid", "copy-message");
    copy.textContent = "Copy";
    copy.title = "Copy this message";
    footer.appendChild(copy);

    if (m.role === "assistant") {
      var regen = document.createElement("button");
      regen.type = "button";
      regen.className = "msg-action regenerate-message";
      regen.setAttribute("data-testid", "regenerate");
      regen.textContent = "Regenerate";
      regen.title = "Write this reply again";
      regen.hidden = true;
      footer.appendChild(regen);
    }
    node.appendChild(footer);
    fillMessage(node, m);
    return node;
  }

  function fillMessage(node, m) {
    var content = node.querySelector(".content");
    while (content.firstChild) content.removeChild(content.firstChild);
    if (m.role === "assistant") {
      content.classList.add("markdown");
      if (m.content) {
        content.appendChild(window.LlmpackMarkdown.renderMarkdown(m.content));
      } else if (state.gen && state.gen.msg === m) {
        var dots = document.createElement("span");
        dots.className = "typing";
        dots.setAttribute("aria-label", "Thinking");
        for (var i = 0; i < 3; i++) dots.appendChild(document.createElement("i"));
        content.appendChild(dots);
      }
    } else {
      content.textContent = m.content;
    }
    node.querySelector(".stats").textContent = statsText(m.stats);
  }

  function statsText(st) {
    if (!st) return "";
    var parts = [];
    if (st.tokens) parts.push((st.estimated ? "~" : "") + fmtInt(st.tokens) + " tokens");
    if (st.tps) parts.push(st.tps.toFixed(1) + " tok/s");
    if (st.seconds) parts.push(st.seconds.toFixed(1) + " s");
    if (st.finish === "stopped") parts.push("stopped");
    else if (st.finish === "length") parts.push("cut off at the length limit");
    else if (st.finish === "error") parts.push("interrupted");
    return parts.join(" · ");
  }

  // Only the last assistant reply can be regenerated.
  function refreshLastActions() {
    var nodes = ui.messages.querySelectorAll(".message.assistant");
    for (var i = 0; i < nodes.length; i++) {
      var btn = nodes[i].querySelector(".regenerate-message");
      if (btn) btn.hidden = !(i === nodes.length - 1 && !state.gen && nodes[i] === lastMessageNode());
    }
  }

  function lastMessageNode() {
    var all = ui.messages.querySelectorAll(".message");
    return all.length ? all[all.length - 1] : null;
  }

  function addNotice(text, kind) {
    var n = document.createElement("div");
    n.className = "notice " + (kind || "error");
    n.setAttribute("role", "alert");
    n.setAttribute("data-testid", "notice");
    n.textContent = text;
    ui.messages.appendChild(n);
    scrollToBottom();
    return n;
  }

  function onMessagesClick(ev) {
    var btn = ev.target.closest("button");
    if (!btn || !ui.messages.contains(btn)) return;
    if (btn.classList.contains("copy-code")) {
      var block = btn.closest(".code-block");
      var code = block && block.querySelector("pre code");
      if (code) {
        copyText(code.textContent).then(
          function () { flashButton(btn, "Copied"); },
          function () { flashButton(btn, "Copy failed"); }
        );
      }
    } else if (btn.classList.contains("copy-message")) {
      var node = btn.closest(".message");
      if (node && node._msg) {
        copyText(node._msg.content).then(
          function () { flashButton(btn, "Copied"); },
          function () { flashButton(btn, "Copy failed"); }
        );
      }
    } else if (btn.classList.contains("regenerate-message")) {
      regenerate();
    }
  }

  // ------------------------------------------------------------------ composer

  function autosize() {
    var ta = ui.prompt;
    if (!ta.offsetParent) return; // not on screen yet: measure when it is
    ta.style.height = "auto";
    var max = Math.max(120, Math.floor(window.innerHeight * 0.4));
    ta.style.height = Math.min(ta.scrollHeight, max) + "px";
    ta.style.overflowY = ta.scrollHeight > max ? "auto" : "hidden";
  }

  function updateComposer() {
    var busy = !!state.gen;
    ui.send.hidden = busy;
    ui.stop.hidden = !busy;
    ui.send.disabled = busy || !state.ready || ui.prompt.value.trim() === "";
    ui.app.classList.toggle("generating", busy);
  }

  function updateStatusbar() {
    if (!state.gen) {
      var last = null;
      var msgs = state.current ? state.current.messages : [];
      for (var i = msgs.length - 1; i >= 0; i--) {
        if (msgs[i].role === "assistant" && msgs[i].stats) { last = msgs[i]; break; }
      }
      ui.tps.textContent = last && last.stats.tps ? last.stats.tps.toFixed(1) + " tok/s" : "";
      var used = last && last.stats.ctx_used;
      if (used && state.nCtx) {
        ui.ctxUsed.textContent = fmtInt(used) + " / " + fmtInt(state.nCtx) + " tokens used";
        var full = used / state.nCtx > 0.85;
        ui.ctxUsed.classList.toggle("warn", full);
        ui.ctxUsed.title = full ? "This chat is nearly as long as the model can handle. Start a New chat for best results." : "How much of the model's context this chat uses.";
        if (full) ui.ctxUsed.textContent += " · nearly full, consider a New chat";
      } else {
        ui.ctxUsed.textContent = "";
        ui.ctxUsed.classList.remove("warn");
      }
    }
  }

  function onPromptKeydown(ev) {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.altKey && !ev.ctrlKey && !ev.metaKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      send();
    }
  }

  function send() {
    var text = ui.prompt.value;
    if (!text.trim() || state.gen || !state.ready) return;
    clearNotices();
    var chat = ensureChat();
    if (chat.messages.length === 0) chat.title = titleFrom(text);
    var userMsg = { role: "user", content: text };
    chat.messages.push(userMsg);
    chat.updated = Date.now();
    ui.prompt.value = "";
    autosize();
    ui.emptyState.hidden = true;
    ui.messages.appendChild(buildMessage(userMsg));
    saveChats();
    renderChatList();
    generate(chat, { userMsg: userMsg });
  }

  function regenerate() {
    if (state.gen || !state.current) return;
    var chat = state.current;
    var last = chat.messages[chat.messages.length - 1];
    if (!last || last.role !== "assistant") return;
    clearNotices();
    chat.messages.pop();
    var node = lastMessageNode();
    if (node && node._msg === last) node.remove();
    generate(chat, { previous: last });
  }

  // ------------------------------------------------------------------ generation

  function apiHeaders() {
    var h = { "Content-Type": "application/json", Accept: "text/event-stream" };
    if (state.store.api_key) h.Authorization = "Bearer " + state.store.api_key;
    return h;
  }

  function buildRequest(chat) {
    var e = effective();
    var messages = [];
    if (e.system_prompt && e.system_prompt.trim()) messages.push({ role: "system", content: e.system_prompt });
    chat.messages.forEach(function (m) {
      if (m.content) messages.push({ role: m.role, content: m.content });
    });
    var body = {
      model: state.model,
      messages: messages,
      stream: true,
      stream_options: { include_usage: true },
    };
    ["temperature", "top_p", "top_k", "min_p", "max_tokens"].forEach(function (k) {
      if (typeof e[k] === "number" && isFinite(e[k])) body[k] = e[k];
    });
    return body;
  }

  function ApiError(message, status) {
    this.message = message;
    this.status = status;
  }

  function describeHttpError(status, body) {
    var msg = body && body.error && typeof body.error.message === "string" ? body.error.message
      : body && typeof body.message === "string" ? body.message
      : "The server answered HTTP " + status + ".";
    if (status === 401 || status === 403) {
      return "This app needs an API key. Open Settings and enter it. (" + msg + ")";
    }
    if (status === 400 && /context|too long|too many tokens|prompt_too_long|exceed/i.test(msg)) {
      return msg + " Tip: start a New chat; this conversation no longer fits in the model's memory.";
    }
    if (status === 503 || status === 429) {
      return msg + " The model is busy; please try again in a moment.";
    }
    return msg;
  }

  function generate(chat, opts) {
    var msg = { role: "assistant", content: "", stats: null };
    chat.messages.push(msg);
    var node = buildMessage(msg);
    var controller = new AbortController();
    var gen = {
      chat: chat, msg: msg, node: node, controller: controller,
      t0: performance.now(), tFirst: 0, tLast: 0, deltas: 0,
      usage: null, finish: null, stopped: false, error: null, raf: 0, pending: 0, lastSave: Date.now(),
      lastRender: 0, renderCost: 0,
    };
    state.gen = gen;
    node.classList.add("streaming");
    fillMessage(node, msg);
    if (state.current === chat) {
      ui.messages.appendChild(node);
      scrollToBottom();
    }
    updateComposer();
    refreshLastActions();
    ui.tps.textContent = "";
    ui.ctxUsed.textContent = "";

    var body = buildRequest(chat);
    // the request must not include the empty reply we just added
    fetch("/v1/chat/completions", {
      method: "POST",
      headers: apiHeaders(),
      body: JSON.stringify(body),
      signal: controller.signal,
      cache: "no-store",
    })
      .then(function (resp) {
        if (!resp.ok) {
          return resp.text().then(function (t) {
            var j = null;
            try { j = JSON.parse(t); } catch (e) { j = null; }
            throw new ApiError(describeHttpError(resp.status, j), resp.status);
          });
        }
        if (!resp.body || !resp.body.getReader) {
          // no streaming support: read the whole thing
          return resp.text().then(function (t) { handleSSEText(gen, t + "\n\n"); });
        }
        return readStream(gen, resp.body.getReader());
      })
      .catch(function (err) {
        if (err && err.name === "AbortError") {
          gen.stopped = true;
        } else if (err instanceof ApiError) {
          gen.error = err.message;
          if (err.status === 401 || err.status === 403) setTimeout(openSettings, 0);
        } else if (err && err.name === "TypeError") {
          gen.error = "Can't reach the llmpack app. Is it still running? (" + err.message + ")";
        } else {
          gen.error = (err && err.message) || String(err);
        }
      })
      .then(function () {
        finishGeneration(gen, opts);
      });
  }

  function readStream(gen, reader) {
    var decoder = new TextDecoder("utf-8");
    var buf = "";
    var SEP = /\r\n\r\n|\n\n|\r\r/;
    function pump() {
      return reader.read().then(function (r) {
        if (r.done) {
          buf += decoder.decode();
          if (buf.trim()) handleEvent(gen, buf);
          return;
        }
        buf += decoder.decode(r.value, { stream: true });
        var m;
        while ((m = SEP.exec(buf))) {
          var block = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (handleEvent(gen, block) === "done") {
            reader.cancel().catch(function () {});
            return;
          }
        }
        return pump();
      });
    }
    return pump();
  }

  function handleSSEText(gen, textBody) {
    var blocks = textBody.split(/\r\n\r\n|\n\n|\r\r/);
    for (var i = 0; i < blocks.length; i++) {
      if (handleEvent(gen, blocks[i]) === "done") return;
    }
  }

  // One SSE event. Returns "done" at [DONE]; throws ApiError for an in-stream error.
  function handleEvent(gen, block) {
    var lines = block.split(/\r\n|\r|\n/);
    var data = [];
    for (var i = 0; i < lines.length; i++) {
      var l = lines[i];
      if (l.slice(0, 5) === "data:") data.push(l.charAt(5) === " " ? l.slice(6) : l.slice(5));
    }
    if (!data.length) return;
    var payload = data.join("\n");
    if (payload.trim() === "[DONE]") return "done";
    var obj;
    try {
      obj = JSON.parse(payload);
    } catch (e) {
      return; // ignore a malformed event rather than losing the reply
    }
    if (!obj || typeof obj !== "object") return;
    if (obj.error) {
      var em = typeof obj.error === "string" ? obj.error : obj.error.message || "The server reported an error.";
      throw new ApiError(em, 500);
    }
    if (obj.usage && typeof obj.usage === "object") gen.usage = obj.usage;
    var choices = Array.isArray(obj.choices) ? obj.choices : [];
    for (var c = 0; c < choices.length; c++) {
      var ch = choices[c];
      if (!ch || (ch.index !== undefined && ch.index !== 0)) continue;
      var piece = ch.delta && typeof ch.delta.content === "string" ? ch.delta.content : "";
      if (piece) {
        var now = performance.now();
        if (!gen.tFirst) gen.tFirst = now;
        gen.tLast = now;
        gen.deltas += 1;
        gen.msg.content += piece;
        scheduleRender(gen);
      }
      if (ch.finish_reason) gen.finish = ch.finish_reason;
    }
  }

  function liveTps(gen) {
    if (gen.deltas < 2 || !gen.tFirst) return 0;
    var secs = (gen.tLast - gen.tFirst) / 1000;
    return secs > 0.2 ? (gen.deltas - 1) / secs : 0;
  }

  function scheduleRender(gen) {
    if (gen.raf || gen.pending) return;
    gen.raf = requestAnimationFrame(function () {
      gen.raf = 0;
      if (state.gen !== gen) return;
      // Long replies take longer to re-render: then render less often (at most ~25% of the time).
      var now = performance.now();
      if (gen.renderCost > 4 && now - gen.lastRender < gen.renderCost * 4) {
        gen.pending = setTimeout(function () { gen.pending = 0; scheduleRender(gen); }, gen.renderCost * 4 - (now - gen.lastRender));
        return;
      }
      if (state.current === gen.chat && gen.node.isConnected) {
        var stick = isNearBottom();
        fillMessage(gen.node, gen.msg);
        gen.lastRender = performance.now();
        gen.renderCost = gen.lastRender - now;
        var tps = liveTps(gen);
        gen.node.querySelector(".stats").textContent = fmtInt(gen.deltas) + " tokens" + (tps ? " · " + tps.toFixed(1) + " tok/s" : "");
        ui.tps.textContent = tps ? tps.toFixed(1) + " tok/s" : "…";
        if (stick) scrollToBottom();
      }
      // save a long reply now and then, so closing the tab mid-reply keeps most of it
      if (Date.now() - gen.lastSave > 3000) {
        gen.lastSave = Date.now();
        saveChats();
      }
    });
  }

  function finishGeneration(gen, opts) {
    if (gen.raf) cancelAnimationFrame(gen.raf);
    if (gen.pending) clearTimeout(gen.pending);
    gen.raf = 0;
    gen.pending = 0;
    var chat = gen.chat;
    var msg = gen.msg;
    var end = performance.now();
    state.gen = null;

    if (!msg.content) {
      // Nothing came back: take the empty reply out again.
      var idx = chat.messages.indexOf(msg);
      if (idx >= 0) chat.messages.splice(idx, 1);
      gen.node.remove();
      if (opts.previous) {
        chat.messages.push(opts.previous); // a failed regenerate keeps the old reply
      } else if (opts.userMsg && chat.messages[chat.messages.length - 1] === opts.userMsg) {
        // keep the conversation alternating: the unanswered message goes back into the box
        chat.messages.pop();
        if (!ui.prompt.value.trim() && state.current === chat) {
          ui.prompt.value = opts.userMsg.content;
          autosize();
        }
      }
      if (chat.messages.length === 0) {
        var ci = state.chats.indexOf(chat);
        if (ci >= 0 && state.current !== chat) state.chats.splice(ci, 1);
      }
      saveChats();
      renderChatList();
      if (state.current === chat) {
        renderCurrent();
        if (gen.error) addNotice("Couldn't get a reply: " + gen.error + (opts.userMsg ? " Your message is back in the box below." : ""));
        else if (gen.stopped && opts.userMsg) addNotice("Stopped before the reply started. Your message is back in the box below.", "info");
      } else if (gen.error) {
        toast("A reply failed: " + gen.error);
      }
      updateComposer();
      return;
    }

    var u = gen.usage || {};
    var tokens = typeof u.completion_tokens === "number" ? u.completion_tokens : gen.deltas;
    var estimated = typeof u.completion_tokens !== "number";
    var tps = 0;
    var genSecs = ((gen.tLast || end) - gen.tFirst) / 1000;
    if (tokens >= 2 && genSecs > 0.05) tps = (tokens - 1) / genSecs;
    else if (tokens >= 1) tps = tokens / Math.max(0.001, (end - gen.t0) / 1000);
    msg.stats = {
      tokens: tokens,
      estimated: estimated || undefined,
      tps: Math.round(tps * 10) / 10,
      seconds: Math.round(((end - gen.t0) / 1000) * 10) / 10,
      ttft: gen.tFirst ? Math.round(gen.tFirst - gen.t0) : undefined,
      prompt_tokens: typeof u.prompt_tokens === "number" ? u.prompt_tokens : undefined,
      ctx_used: typeof u.prompt_tokens === "number" && typeof u.completion_tokens === "number" ? u.prompt_tokens + u.completion_tokens : undefined,
      finish: gen.stopped ? "stopped" : gen.error ? "error" : gen.finish || undefined,
    };
    chat.updated = Date.now();
    saveChats();
    renderChatList();
    if (state.current === chat) {
      gen.node.classList.remove("streaming");
      fillMessage(gen.node, msg);
      if (gen.node.isConnected && isNearBottom()) scrollToBottom();
      if (gen.error) addNotice("The reply was interrupted: " + gen.error);
    }
    updateComposer();
    updateStatusbar();
    refreshLastActions();
  }

  function stopGeneration() {
    if (state.gen) {
      state.gen.stopped = true;
      state.gen.controller.abort();
    }
  }

  // ------------------------------------------------------------------ wiring

  function onKeydown(ev) {
    if (ev.key !== "Escape") return;
    if (!ui.settings.hidden) {
      closeSettings();
    } else if (NARROW.matches && ui.app.classList.contains("sidebar-open")) {
      closeSidebar();
    } else if (state.gen) {
      stopGeneration();
    }
  }

  function init() {
    if (!window.LlmpackMarkdown || !window.fetch || !window.AbortController || !window.TextDecoder) {
      showError("This browser is too old for the chat page. Please open it in a current Chrome, Edge, Firefox or Safari.");
      return;
    }
    loadSettings();
    loadChats();
    var sb = loadJSON(SIDEBAR_KEY, null);
    if (sb && sb.collapsed) ui.app.classList.add("sidebar-collapsed");

    ui.composerForm.addEventListener("submit", function (ev) {
      ev.preventDefault();
      send();
    });
    ui.prompt.addEventListener("keydown", onPromptKeydown);
    ui.prompt.addEventListener("input", function () {
      autosize();
      updateComposer();
    });
    ui.stop.addEventListener("click", stopGeneration);
    ui.newChat.addEventListener("click", newChat);
    ui.messages.addEventListener("click", onMessagesClick);
    ui.chatList.addEventListener("click", onChatListClick);
    ui.sidebarToggle.addEventListener("click", toggleSidebar);
    ui.sidebarClose.addEventListener("click", function () {
      if (NARROW.matches) closeSidebar();
      else toggleSidebar();
    });
    ui.sidebarBackdrop.addEventListener("click", closeSidebar);
    ui.settingsButton.addEventListener("click", function () {
      if (ui.settings.hidden) openSettings();
      else closeSettings();
    });
    ui.settingsClose.addEventListener("click", closeSettings);
    ui.settingsDone.addEventListener("click", closeSettings);
    ui.settingsBackdrop.addEventListener("click", closeSettings);
    ui.settingsForm.addEventListener("submit", function (ev) { ev.preventDefault(); });
    ui.settingsForm.addEventListener("input", onSettingInput);
    ui.settingsReset.addEventListener("click", function () {
      state.store.models[state.model] = {};
      saveSettings();
      fillSettings();
      toast("Settings reset to the model's defaults.");
    });
    ui.retry.addEventListener("click", function () {
      window.location.reload();
    });
    document.addEventListener("keydown", onKeydown);
    var onNarrowChange = function () {
      ui.app.classList.remove("sidebar-open");
      syncSidebarToggle();
    };
    if (NARROW.addEventListener) NARROW.addEventListener("change", onNarrowChange);
    else if (NARROW.addListener) NARROW.addListener(onNarrowChange);
    syncSidebarToggle();

    // another tab changed the saved chats: refresh the list (the open chat keeps its state)
    window.addEventListener("storage", function (ev) {
      if (ev.key !== CHATS_KEY || state.gen) return;
      var currentId = state.current && state.current.id;
      var draft = state.current && state.current.messages.length === 0 ? state.current : null;
      loadChats();
      var again = currentId && state.chats.find(function (c) { return c.id === currentId; });
      state.current = again || draft || null;
      renderChatList();
      renderCurrent();
    });
    window.addEventListener("pagehide", function () {
      if (state.gen) saveChats();
    });
    window.addEventListener("resize", autosize);

    autosize();
    updateComposer();
    // Don't flash the loading view when the model is already up.
    var firstPaint = setTimeout(function () {
      if (!state.ready && ui.error.hidden) showLoading({});
    }, 150);
    pollHealth();
    void firstPaint;
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
