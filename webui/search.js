// Search over this model's saved chats (titles and every message, all branches): the app keeps
// an SQLite FTS5 index beside the chats (GET /api/search?q=). Ctrl+K (⌘K) jumps to the box at
// the top of the chat list; results replace the list while there is a query, with the matching
// words marked. Arrow keys move between results, Enter opens one, Esc clears the search.
import { api } from "./api.js";
import { plainError } from "./errors.js";
import { NARROW, state, ui } from "./state.js";
import { el, relTime } from "./util.js";

const DELAY_MS = 150;
let timer = 0;
let asked = 0;   // the newest query's number: older answers are dropped
let shownFor = null;   // the query the results on screen answer
let onOpen = async () => {};

/** Text with its matches in <mark>, built from [[text, is_match], ...] (never as HTML). */
function marked(cls, parts) {
  const span = el("span", cls);
  for (const [text, hit] of Array.isArray(parts) ? parts : []) span.appendChild(hit ? el("mark", "", text) : document.createTextNode(text));
  return span;
}

function showResults(show) {
  ui.chatList.hidden = show;
  ui.searchResults.hidden = !show;
  if (!show) ui.searchEmpty.hidden = true;
}

function render(results) {
  const list = ui.searchResults;
  list.replaceChildren();
  for (const r of results) {
    const li = el("li", "chat-item search-item");
    const open = el("button", "chat-open search-result");
    open.type = "button";
    open.setAttribute("data-testid", "search-result");
    open.setAttribute("data-chat-id", r.id);
    open.append(marked("chat-title", r.title_parts), marked("search-snippet", r.snippet), el("span", "chat-when", relTime(r.updated)));
    li.appendChild(open);
    list.appendChild(li);
  }
  ui.searchEmpty.hidden = results.length > 0;
}

async function run() {
  const q = ui.searchInput.value.trim();
  const mine = ++asked;
  if (!q) {
    showResults(false);
    return;
  }
  showResults(true);
  try {
    const data = await api("GET", "/api/search?q=" + encodeURIComponent(q));
    if (mine === asked) {
      render(data.data || []);
      shownFor = q;
    }
  } catch (err) {
    if (mine !== asked) return;
    ui.searchResults.replaceChildren();
    ui.searchEmpty.hidden = false;
    ui.searchEmpty.textContent = "Search did not work. " + plainError(err).text;
    return;
  }
  ui.searchEmpty.textContent = "No saved chat holds these words.";
}

/** Ctrl+K: show the chat list and put the cursor in the search box. */
export function openSearch() {
  if (state.locked || ui.app.hidden) return;
  if (NARROW.matches) ui.app.classList.add("sidebar-open");
  else ui.app.classList.remove("sidebar-collapsed");
  ui.sidebarToggle.setAttribute("aria-expanded", "true");
  ui.searchInput.focus();
  ui.searchInput.select();
}

function clear() {
  ui.searchInput.value = "";
  run();
}

function onKeydown(ev) {
  const items = [...ui.searchResults.querySelectorAll(".search-result")];
  const i = items.indexOf(document.activeElement);
  if (ev.key === "Escape") {
    ev.preventDefault();
    ev.stopPropagation();
    const had = ui.searchInput.value;
    clear();
    if (had) ui.searchInput.focus();
    else ui.prompt.focus();
  } else if (ev.key === "ArrowDown" && items.length) {
    ev.preventDefault();
    items[Math.min(items.length - 1, i + 1)].focus();
  } else if (ev.key === "ArrowUp" && i >= 0) {
    ev.preventDefault();
    (i === 0 ? ui.searchInput : items[i - 1]).focus();
  } else if (ev.key === "Enter" && ev.target === ui.searchInput) {
    ev.preventDefault();
    openFirst();
  }
}

/** Enter in the box: the first result, once the results answer what is typed (typing fast is no race). */
async function openFirst() {
  if (shownFor !== ui.searchInput.value.trim()) {
    clearTimeout(timer);
    await run();
  }
  const first = ui.searchResults.querySelector(".search-result");
  if (first && !ui.searchResults.hidden) onOpen(first.getAttribute("data-chat-id"));
}

/** `open(id)` opens a chat (chats.js openChat). */
export function wireSearch(open) {
  onOpen = open;
  ui.searchInput.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(run, DELAY_MS);
  });
  ui.searchInput.addEventListener("keydown", onKeydown);
  ui.searchResults.addEventListener("keydown", onKeydown);
  ui.searchResults.addEventListener("click", (ev) => {
    const b = ev.target.closest(".search-result");
    if (b) onOpen(b.getAttribute("data-chat-id"));
  });
}
