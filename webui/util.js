// Small helpers: ids, formatting, localStorage, the toast, the clipboard.
import { ui } from "./state.js";

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export function fmtInt(n) {
  try {
    return Number(n).toLocaleString();
  } catch (e) {
    return String(n);
  }
}

export function titleFrom(text) {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > 60 ? line.slice(0, 57).trimEnd() + "…" : line || "New chat";
}

export function relTime(ts) {
  const d = new Date(ts);
  const now = new Date();
  if (d.toDateString() === now.toDateString()) {
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }
  const y = new Date(now);
  y.setDate(now.getDate() - 1);
  if (d.toDateString() === y.toDateString()) return "Yesterday";
  return d.toLocaleDateString([], { month: "short", day: "numeric", year: d.getFullYear() === now.getFullYear() ? undefined : "numeric" });
}

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The part of a message `node` drawn in the child with class `className`: made when `wanted`
 * and missing (a `tag` with that class as its class and data-testid, put in place by
 * `place(child)`), removed when not wanted (then null). Each part (thinking, tool rounds, sources,
 * "Read from…") is updated in place, so a block the reader opened stays open while the reply streams. */
export function part(node, wanted, tag, className, place) {
  let child = node.querySelector(":scope > ." + className);
  if (!wanted) {
    if (child) child.remove();
    return null;
  }
  if (!child) {
    child = el(tag, className);
    child.setAttribute("data-testid", className);
    place(child);
  }
  return child;
}

/** A value kept in this browser's localStorage (fallback when it is missing, unreadable or blocked). */
export function loadJSON(key, fallback) {
  try {
    const raw = window.localStorage.getItem(key);
    return raw == null ? fallback : JSON.parse(raw);
  } catch (e) {
    return fallback;
  }
}

export function saveJSON(key, value) {
  try {
    window.localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch (e) {
    return false;
  }
}

let toastTimer = null;
/** A short message at the bottom; `detail` (technical text) is its tooltip. */
export function toast(message, actionLabel, action, ms, detail) {
  ui.toastText.textContent = message;
  ui.toastText.title = detail || "";
  ui.toastAction.hidden = !actionLabel;
  ui.toastAction.textContent = actionLabel || "";
  ui.toastAction.onclick = actionLabel ? () => { hideToast(); action(); } : null;
  ui.toast.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(hideToast, ms || 4000);
}

export function hideToast() {
  ui.toast.hidden = true;
  ui.toastAction.onclick = null;
}

export function copyText(str) {
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(str).catch(() => legacyCopy(str));
  }
  return legacyCopy(str);
}

function legacyCopy(str) {
  return new Promise((resolve, reject) => {
    const ta = el("textarea", "clipboard-helper");
    ta.value = str;
    ta.setAttribute("readonly", "");
    document.body.appendChild(ta);
    ta.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (e) {
      ok = false;
    }
    ta.remove();
    if (ok) resolve();
    else reject(new Error("copy failed"));
  });
}

export function flashButton(btn, label) {
  const original = btn.getAttribute("data-label") || btn.textContent;
  btn.setAttribute("data-label", original);
  btn.textContent = label;
  btn.classList.add("done");
  clearTimeout(btn._flashTimer);
  btn._flashTimer = setTimeout(() => {
    btn.textContent = original;
    btn.classList.remove("done");
  }, 1500);
}

/** Copy `text`, then say so on `btn`. */
export function copyWithFeedback(btn, text) {
  copyText(text).then(() => flashButton(btn, "Copied"), () => flashButton(btn, "Copy failed"));
}

/** Offer `text` as a file download (no server round trip: a blob: URL). */
export function download(name, text, mime) {
  const url = URL.createObjectURL(new Blob([text], { type: mime }));
  const a = el("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
