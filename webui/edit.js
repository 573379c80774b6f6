// Editing and branching: a user message can be edited (sending the edit adds a new version of
// it, the old one and its replies stay), a reply can be written again (a new version beside the
// old one), ‹ › switches between versions and the chat goes on from the branch shown. The
// chat's own instructions (system prompt) are edited the same way, at its top.
// Keyboard: Up in the empty message box edits the last message; Enter sends an edit, Esc cancels.
import { renderChatList } from "./chatlist.js";
import { clearNotices, renderCurrent } from "./render.js";
import { saveChat } from "./save.js";
import { state, ui } from "./state.js";
import { generate, systemPromptOf } from "./stream.js";
import { addMessage, switchVersion } from "./tree.js";
import { el } from "./util.js";

let editCount = 0;

function isEnter(ev) {
  return ev.key === "Enter" && !ev.shiftKey && !ev.altKey && !ev.ctrlKey && !ev.metaKey && !ev.isComposing && ev.keyCode !== 229;
}

/** One edit at a time: another open edit box is closed (a redraw), and `host`'s new node is returned. */
function closeOtherEdits(host) {
  if (!ui.messages.querySelector(".editing")) return host;
  const m = host._msg;
  renderCurrent();
  if (!m) return ui.messages.querySelector(".system-bar");
  return [...ui.messages.querySelectorAll(".message")].find((n) => n._msg === m) || null;
}

/** A labelled text box with Cancel and Send/Save under it, in place of `host`'s text. */
function editBox(target, label, text, sendLabel, onSend) {
  const host = closeOtherEdits(target);
  if (!host) return null;
  host.classList.add("editing");
  const form = el("form", "edit-box");
  const id = "edit-box-" + ++editCount;
  const title = el("label", "visually-hidden", label);
  title.htmlFor = id;
  const box = el("textarea", "edit-text");
  box.id = id;
  box.value = text;
  box.rows = Math.min(12, Math.max(2, text.split("\n").length));
  box.setAttribute("data-testid", "edit-box");
  const cancel = el("button", "button small", "Cancel");
  cancel.type = "button";
  cancel.setAttribute("data-testid", "edit-cancel");
  const send = el("button", "button small primary", sendLabel);
  send.type = "submit";
  send.setAttribute("data-testid", "edit-send");
  const row = el("div", "edit-actions");
  row.append(el("span", "muted small edit-hint", "Enter to send · Esc to cancel"), cancel, send);
  form.append(title, box, row);
  const done = () => {
    renderCurrent();
    ui.prompt.focus();
  };
  cancel.addEventListener("click", done);
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    onSend(box.value);
  });
  box.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") {
      ev.preventDefault();
      ev.stopPropagation();   // not the page's Esc (stop a reply, close a panel)
      done();
    } else if (isEnter(ev)) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });
  host.appendChild(form);
  box.focus();
  box.setSelectionRange(box.value.length, box.value.length);
  return box;
}

/** Edit the user message drawn in `node`. */
export function startEdit(node) {
  const m = node && node._msg;
  if (!m || m.role !== "user" || state.gen || node.classList.contains("editing")) return;
  editBox(node, "Edit your message", m.content, "Send", (text) => {
    if (!text.trim() && !(m.attachments && m.attachments.length)) return;
    const chat = state.current;
    clearNotices();
    const userMsg = { role: "user", content: text };
    if (m.attachments && m.attachments.length) userMsg.attachments = m.attachments;
    addMessage(chat, userMsg, m.parent);
    chat.updated = Date.now();
    renderCurrent();
    saveChat(chat);
    renderChatList();
    ui.prompt.focus();
    generate(chat, { userMsg, again: () => ui.send.click() });
  });
}

/** Up in the empty message box: edit the last message of the branch shown. */
export function editLast() {
  const nodes = [...ui.messages.querySelectorAll(".message.user")];
  const last = nodes[nodes.length - 1];
  if (!last || state.gen) return false;
  startEdit(last);
  last.scrollIntoView({ block: "nearest" });
  return true;
}

/** Write the last reply again: a new version beside the old one. */
export function regenerate(force) {
  const chat = state.current;
  if (state.gen || !chat) return;
  const last = chat.messages[chat.messages.length - 1];
  if (!last || last.role !== "assistant") return;
  clearNotices();
  generate(chat, { previous: last, force, again: (f) => regenerate(f) });
}

/** ‹ or › on a message: show the version `step` along, and go on from its branch. */
export function switchTo(button, step) {
  const node = button.closest(".message");
  const chat = state.current;
  if (!node || !node._msg || !chat || state.gen) return;
  const shown = switchVersion(chat, node._msg, step);
  renderCurrent();
  saveChat(chat);   // the branch shown is part of the chat
  const again = [...ui.messages.querySelectorAll(".message")].find((n) => n._msg === shown);
  if (again) {
    const same = again.querySelector(step < 0 ? ".version-prev" : ".version-next");
    const other = again.querySelector(step < 0 ? ".version-next" : ".version-prev");
    (same && !same.disabled ? same : other || again).focus();
  }
}

/** Change the instructions of the chat on screen (or of the one about to begin). */
export function editSystem(bar) {
  if (state.gen || bar.classList.contains("editing")) return;
  const chat = state.current;
  const text = chat ? systemPromptOf(chat) : state.draftSystem !== undefined ? state.draftSystem : systemPromptOf(null);
  editBox(bar, "Instructions for this chat", text || "", "Save", (value) => {
    if (chat && chat.messages.length) {
      chat.system = value;
      chat.updated = Date.now();
      saveChat(chat);
    } else {
      state.draftSystem = value;   // nothing to save until the first message
      if (chat) chat.system = value;
    }
    renderCurrent();
    ui.prompt.focus();
  });
}
