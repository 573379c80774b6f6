// The list of saved chats in the sidebar. One tab stop for the whole list (a roving tabindex:
// the open chat, else the first, takes Tab; the arrow keys, Home and End move between chats; the
// Delete key deletes the focused one), so the keyboard reaches New chat without visiting each
// chat twice. The delete button stays for the mouse and touch, out of the tab order.
import { state, ui } from "./state.js";
import { el, relTime } from "./util.js";

export function renderChatList() {
  const list = ui.chatList;
  const hadFocus = list.contains(document.activeElement) ? document.activeElement.closest(".chat-item") : null;
  const focusId = hadFocus && hadFocus.getAttribute("data-chat-id");
  list.replaceChildren();
  const chats = state.chats.filter((c) => (c.messages ? c.messages.length : c.n_messages) > 0);
  chats.sort((a, b) => b.updated - a.updated);
  ui.chatListEmpty.hidden = chats.length > 0 || state.locked;
  let stop = null;
  for (const c of chats) {
    const li = el("li", "chat-item");
    li.setAttribute("data-chat-id", c.id);
    li.setAttribute("data-testid", "chat-item");
    const active = state.current && state.current.id === c.id;
    if (active) li.classList.add("active");

    const open = el("button", "chat-open");
    open.type = "button";
    open.tabIndex = -1;
    if (active) open.setAttribute("aria-current", "true");
    open.appendChild(el("span", "chat-title", c.title || "Chat"));
    const meta = el("span", "chat-when", relTime(c.updated));
    if (c.mode === "complete") meta.textContent += " · text completion";
    open.appendChild(meta);
    open.title = c.title || "";
    if (active || !stop) stop = open;   // the open chat, else the first

    const del = el("button", "chat-delete", "×");
    del.type = "button";
    del.tabIndex = -1;
    del.setAttribute("data-testid", "chat-delete");
    del.setAttribute("aria-label", "Delete chat: " + (c.title || "Chat"));
    del.title = "Delete chat (or press Delete on it)";
    li.append(open, del);
    list.appendChild(li);
  }
  if (stop) stop.tabIndex = 0;
  if (focusId) {
    const again = list.querySelector(`.chat-item[data-chat-id="${CSS.escape(focusId)}"] .chat-open`);
    if (again) moveTo(again);
  }
}

function moveTo(button) {
  for (const b of ui.chatList.querySelectorAll(".chat-open")) b.tabIndex = b === button ? 0 : -1;
  button.focus();
}

/** Arrow keys, Home and End move within the list; Delete (or Backspace) asks `onDelete(id)`. */
export function onChatListKeydown(ev, onDelete) {
  const open = ev.target.closest(".chat-open");
  if (!open || ev.altKey || ev.ctrlKey || ev.metaKey) return;
  const all = [...ui.chatList.querySelectorAll(".chat-open")];
  const i = all.indexOf(open);
  const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: all.length - 1 }[ev.key];
  if (to !== undefined) {
    ev.preventDefault();
    if (all[to]) moveTo(all[to]);
  } else if (ev.key === "Delete" || ev.key === "Backspace") {
    ev.preventDefault();
    const next = all[i + 1] || all[i - 1];
    const nextId = next && next.closest(".chat-item").getAttribute("data-chat-id");
    onDelete(open.closest(".chat-item").getAttribute("data-chat-id"));
    const again = nextId && ui.chatList.querySelector(`.chat-item[data-chat-id="${CSS.escape(nextId)}"] .chat-open`);
    if (again) moveTo(again);
  }
}
