// The conversation on screen: chat messages (model replies as Markdown), or, in text-completion
// mode, one document where the model's continuations follow the user's text.
import { sentChips } from "./attach.js";
import { showRead } from "./readparts.js";
import { showSources } from "./sources.js";
import { foldAll, foldIfLong } from "./fold.js";
import { showTools } from "./toolblocks.js";
import { renderMarkdown } from "./markdown.js";
import { INTERRUPTED } from "./save.js";
import { state, ui } from "./state.js";
import { copyWithFeedback, el, part } from "./util.js";
import { cutLine, editButton, gaugeWords, systemBar, versionNav } from "./versions.js";
import { countOf, durationText, speedText } from "./words.js";

export function isNearBottom() {
  const m = ui.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 80;
}

export function scrollToBottom() {
  ui.messages.scrollTop = ui.messages.scrollHeight;
}

export function clearNotices() {
  for (const n of ui.messages.querySelectorAll(".notice")) n.remove();
}

/** A notice under the conversation; `detail` (technical text) goes in a "Details" fold. */
export function addNotice(text, kind, detail) {
  const n = el("div", "notice " + (kind || "error"), text);
  if (detail) {
    const more = el("details", "notice-detail");
    more.append(el("summary", "", "Details"), el("code", "", detail));
    n.append(" ", more);
  }
  n.setAttribute("role", "alert");
  n.setAttribute("data-testid", "notice");
  ui.messages.appendChild(n);
  scrollToBottom();
  return n;
}

function isComplete(chat) {
  return !!chat && chat.mode === "complete";
}

/** Redraw the whole conversation (after switching chats or finishing a reply). */
export function renderCurrent() {
  const box = ui.messages;
  for (const child of [...box.children]) {
    if (child !== ui.emptyState) child.remove();
  }
  const chat = state.current;
  const msgs = chat && chat.messages ? chat.messages : [];
  ui.emptyState.hidden = msgs.length > 0;
  updateModeUi();
  if (isComplete(chat) && msgs.length) {
    box.appendChild(buildDocument(chat));
  } else {
    if (!isComplete(chat) && !(!chat && state.newMode === "complete")) box.appendChild(systemBar(chat));
    for (const m of msgs) {
      const node = buildMessage(m);
      box.appendChild(node);
      markIfStreaming(node, m);
    }
    markCut(cutOf(msgs));
  }
  foldAll(box);
  refreshLastActions();
  updateStatusbar();
  scrollToBottom();
}

/** A redraw made a new node for the reply being streamed: the stream writes into it from now on. */
function markIfStreaming(node, m) {
  if (state.gen && state.gen.msg === m) {
    state.gen.node = node;
    node.classList.add("streaming");
  }
}

/** Where a new reply's node goes: a message of its own, or the next part of the document. */
export function placeReply(chat, msg) {
  if (isComplete(chat)) {
    let doc = ui.messages.querySelector(".document");
    if (!doc) {
      renderCurrent();
      doc = ui.messages.querySelector(".document");
    }
    const node = buildPart(msg);
    doc.querySelector(".document-text").appendChild(node);
    return node;
  }
  const node = buildMessage(msg);
  ui.messages.appendChild(node);
  return node;
}

export function showUserMessage(chat, msg) {
  ui.emptyState.hidden = true;
  if (isComplete(chat)) {
    renderCurrent();
    return;
  }
  const node = buildMessage(msg);
  ui.messages.appendChild(node);
  foldIfLong(node);
}

function buildDocument(chat) {
  const doc = el("div", "document message");
  doc.setAttribute("data-testid", "document");
  const text = el("div", "document-text");
  for (const m of chat.messages) {
    const node = buildPart(m);
    text.appendChild(node);
    markIfStreaming(node, m);
  }
  doc.appendChild(text);
  doc.appendChild(buildFooter(true));
  const last = [...chat.messages].reverse().find((m) => m.role === "assistant");
  doc.querySelector(".stats").textContent = last ? statsText(last.stats) : "";
  return doc;
}

function buildPart(m) {
  const node = el("span", "doc-part " + (m.role === "user" ? "doc-prompt" : "doc-completion"));
  node.setAttribute("data-testid", m.role === "user" ? "prompt-text" : "completion");
  node.title = m.role === "user" ? "Your text" : "Written by the model";
  node._msg = m;
  fillMessage(node, m);
  return node;
}

function buildFooter(withRegenerate) {
  const footer = el("div", "message-footer");
  footer.appendChild(el("span", "stats"));
  const copy = el("button", "msg-action copy-message", "Copy");
  copy.type = "button";
  copy.setAttribute("data-testid", "copy-message");
  copy.title = "Copy this message";
  footer.appendChild(copy);
  if (withRegenerate) {
    const regen = el("button", "msg-action regenerate-message", "Regenerate");
    regen.type = "button";
    regen.setAttribute("data-testid", "regenerate");
    regen.title = "Write this reply again";
    regen.hidden = true;
    footer.appendChild(regen);
  }
  return footer;
}

function buildMessage(m) {
  const node = el("div", "message " + m.role);
  node.setAttribute("data-testid", "message-" + m.role);
  node._msg = m;
  node.appendChild(el("div", "content"));
  const footer = buildFooter(m.role === "assistant");
  if (m.role === "user") footer.appendChild(editButton());
  const nav = versionNav(state.current, m);
  if (nav) footer.prepend(nav);
  node.appendChild(footer);
  fillMessage(node, m);
  return node;
}

/** The id of the first message the latest reply's model read, when older ones were left out. */
function cutOf(msgs) {
  for (let i = msgs.length - 1; i >= 0; i--) {
    const m = msgs[i];
    if (m.role !== "assistant") continue;
    if (state.gen && state.gen.msg === m) {
      if (state.gen.readFrom) return state.gen.readFrom;
      continue;   // its request is being planned: the reply before it says where the cut was
    }
    return m.stats && m.stats.read_from;
  }
  return null;
}

/** Draw "The model no longer reads the messages above this line." above message `id` (and nowhere else). */
export function markCut(id) {
  for (const line of ui.messages.querySelectorAll(".context-cut")) line.remove();
  if (!id) return;
  const nodes = [...ui.messages.querySelectorAll(".message")];
  const at = nodes.findIndex((n) => n._msg && n._msg.id === id);
  if (at < 0) return;
  const files = nodes.slice(0, at).some((n) => n._msg.attachments && n._msg.attachments.length);
  nodes[at].before(cutLine(files));
}

function typingDots() {
  const dots = el("span", "typing");
  dots.setAttribute("aria-label", "Thinking");
  for (let i = 0; i < 3; i++) dots.appendChild(el("i"));
  return dots;
}

/** (Re)draw one message's text; called on every streamed chunk, so it stays cheap. */
export function fillMessage(node, m) {
  const waiting = !m.content && state.gen && state.gen.msg === m;
  if (node.classList.contains("doc-part")) {
    node.replaceChildren(waiting ? typingDots() : document.createTextNode(m.content));
    const doc = node.closest(".document");
    if (doc && m.role === "assistant") {
      doc.querySelector(".stats").textContent = statsText(m.stats);
      doc.classList.toggle("interrupted", wasInterrupted(m));
    }
    return;
  }
  const content = node.querySelector(".content");
  if (m.role === "assistant") {
    content.classList.add("markdown");
    showThinking(node, content, m);
    showTools(node, content, m);
    const busy = waiting && !m.thinking && !(m.rounds && m.rounds.some((r) => r.calls.some((c) => ["queued", "waiting", "running"].includes(c.status))));
    content.replaceChildren(m.content ? renderMarkdown(m.content) : busy ? typingDots() : "");
    showRead(node, m);
    showSources(node, m);
  } else {
    content.textContent = m.content;
    const files = node.querySelector(".message-files");
    if (files) files.remove();
    if (m.attachments && m.attachments.length) content.before(sentChips(m));
  }
  node.querySelector(".stats").textContent = statsText(m.stats);
  node.classList.toggle("interrupted", wasInterrupted(m));
}

/** A reasoning model's thinking, folded above the answer as "Thinking… (12 s)"; updated in place
 * while it streams, so a block the reader opened stays open. */
function showThinking(node, content, m) {
  const box = part(node, m.thinking, "details", "thinking", (b) => {
    b.append(el("summary"), el("div", "thinking-text"));
    content.before(b);
  });
  if (!box) return;
  const secs = (m.stats && typeof m.stats.thinking_seconds === "number") ? m.stats.thinking_seconds : m.thinking_seconds;
  box.firstChild.textContent = "Thinking… (" + (secs || 0) + " s)";
  box.lastChild.textContent = m.thinking;
}

const wasInterrupted = (m) => !!(m.stats && m.stats.finish === INTERRUPTED);

function statsText(st) {
  if (!st) return "";
  const parts = [];
  if (st.tokens) parts.push(countOf(st.tokens, "token", "tokens", st.estimated));
  const speed = speedText(st.tokens, st.tps);
  if (speed) parts.push(speed);
  if (st.seconds) parts.push(durationText(st.seconds));
  if (st.finish === "stopped") parts.push("stopped");
  else if (st.finish === "length") parts.push("cut off at the length limit");
  else if (st.finish === "error") parts.push("interrupted");
  else if (st.finish === INTERRUPTED) parts.push("Interrupted: the page was reloaded or closed before this reply finished");
  return parts.join(" · ");
}

/** Only the last reply can be regenerated, and not while one is being written. */
export function refreshLastActions() {
  const msgs = state.current && state.current.messages ? state.current.messages : [];
  ui.app.classList.toggle("has-chat", msgs.length > 0 && !state.locked);
  const last = msgs[msgs.length - 1];
  const canRegen = !state.gen && !!last && last.role === "assistant";
  const buttons = ui.messages.querySelectorAll(".regenerate-message");
  buttons.forEach((btn, i) => {
    const owner = btn.closest(".message");
    const isLast = i === buttons.length - 1 && (owner._msg === last || owner.classList.contains("document"));
    btn.hidden = !(canRegen && isLast);
  });
}

export function updateModeUi() {
  const complete = isComplete(state.current) || (!state.current && state.newMode === "complete");
  ui.app.classList.toggle("completion-mode", complete);
  ui.modeChat.setAttribute("aria-pressed", complete ? "false" : "true");
  ui.modeComplete.setAttribute("aria-pressed", complete ? "true" : "false");
  ui.prompt.placeholder = complete ? "Start a text; the model continues…" : "Message…";   // one line on a phone
  ui.emptyHint.textContent = complete
    ? "Text completion: write the beginning of a text and the model carries on from there."
    : "Type a message below. Your conversation stays on this computer.";
}

/** The context gauge under the composer: how full the model's memory was at the last reply. */
export function updateStatusbar() {
  if (state.gen) return;
  const msgs = state.current && state.current.messages ? state.current.messages : [];
  const last = [...msgs].reverse().find((m) => m.role === "assistant" && m.stats);
  ui.tps.textContent = last ? speedText(last.stats.tokens, last.stats.tps) : "";
  const gauge = gaugeWords(last && last.stats.ctx_used, state.nCtx, !!(last && last.stats.read_from));
  ui.ctxUsed.textContent = gauge.text;
  ui.ctxUsed.title = gauge.title;
  ui.ctxUsed.classList.toggle("warn", gauge.full);
  ui.ctxGauge.hidden = !gauge.text;
  ui.ctxGauge.value = gauge.share;
}

/** Copy buttons (code blocks, messages, the document); regenerate is the caller's. */
export function onCopyClick(btn) {
  if (btn.classList.contains("copy-code")) {
    const code = btn.closest(".code-block").querySelector("pre code");
    if (code) copyWithFeedback(btn, code.textContent);
    return true;
  }
  if (btn.classList.contains("copy-message")) {
    const node = btn.closest(".message");
    if (node.classList.contains("document")) copyWithFeedback(btn, state.current.messages.map((m) => m.content).join(""));
    else if (node._msg) copyWithFeedback(btn, node._msg.content);
    return true;
  }
  return false;
}
