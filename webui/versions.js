// Pieces of the conversation's drawing that belong to the chat tree and its context: the
// ‹ 2/3 › switch between versions of a message, the Edit button, the line above which the model
// no longer reads, the chat's own instructions at its top, and the context gauge's words.
// DOM builders only: what the buttons do is edit.js's (app.js routes the clicks there).
import { effective } from "./settings.js";
import { state } from "./state.js";
import { versionsOf } from "./tree.js";
import { el } from "./util.js";
import { countOf, fmtNumber, roughWords } from "./words.js";

export const CUT_TEXT = "The model no longer reads the messages above this line.";
const FULL_SHARE = 0.85;

function action(cls, text, label, testid) {
  const b = el("button", "msg-action " + cls, text);
  b.type = "button";
  b.setAttribute("aria-label", label);
  b.title = label;
  b.setAttribute("data-testid", testid);
  return b;
}

/** ‹ n/m › for a message that has other versions (edits, replies written again); null when it has none. */
export function versionNav(chat, m) {
  const all = versionsOf(chat, m);
  if (all.length < 2) return null;
  const i = all.indexOf(m);
  const nav = el("span", "versions");
  nav.setAttribute("role", "group");
  nav.setAttribute("aria-label", "Version " + (i + 1) + " of " + all.length);
  const prev = action("version-prev", "‹", "Show the previous version", "version-prev");
  const next = action("version-next", "›", "Show the next version", "version-next");
  prev.disabled = i === 0;
  next.disabled = i === all.length - 1;
  const count = el("span", "version-count", i + 1 + "/" + all.length);
  count.setAttribute("data-testid", "version-count");
  count.setAttribute("aria-hidden", "true");
  nav.append(prev, count, next);
  return nav;
}

export function editButton() {
  const b = action("edit-message", "Edit", "Edit this message (sending it keeps the old version too)", "edit-message");
  b.textContent = "Edit";
  return b;
}

/** The line; `filesKept`: messages above it carry files, which the model still reads. */
export function cutLine(filesKept) {
  const line = el("div", "context-cut", CUT_TEXT + (filesKept ? " It still reads the files attached above." : ""));
  line.setAttribute("role", "note");
  line.setAttribute("data-testid", "context-cut");
  line.title = "The chat is longer than the model can read at once, so the oldest messages were left out " +
    "(the instructions and attached files stay). Settings can make the page ask first instead.";
  return line;
}

/** The instructions (system prompt) at the top of a chat, with a button to change them. */
export function systemBar(chat) {
  const own = chat && typeof chat.system === "string";
  const draft = !chat && state.draftSystem !== undefined;   // set for the chat about to begin
  const text = own ? chat.system : draft ? state.draftSystem : effective().system_prompt || "";
  const bar = el("div", "system-bar");
  bar.setAttribute("data-testid", "system-bar");
  const label = el("span", "system-label", "Instructions");
  const shown = el("span", "system-text", text && text.trim() ? text : "None: the model answers as it was made to.");
  shown.setAttribute("data-testid", "system-text");
  if (!(text && text.trim())) shown.classList.add("muted");
  const edit = action("system-edit", "Change", "Change the instructions for this chat", "system-edit");
  edit.textContent = text && text.trim() ? "Change" : "Add";
  bar.append(label, shown, edit);
  return bar;
}

/** The gauge: how full the model's memory was at the last reply, in words (tokens in the tooltip). */
export function gaugeWords(used, nCtx, cut) {
  if (!used || !nCtx) return { text: "", title: "", full: false, share: 0 };
  const share = Math.min(1, used / nCtx);
  const full = share > FULL_SHARE;
  const pct = Math.max(1, Math.round(share * 100));
  const words = "about " + fmtNumber(roughWords(Math.min(used, nCtx))) + " of " + fmtNumber(roughWords(nCtx)) + " words";
  let text = "Memory " + pct + "% full: " + words + " (" + fmtNumber(used) + " / " + fmtNumber(nCtx) + " tokens)";
  if (cut) text += " · oldest messages left out";
  else if (full) text += " · oldest messages left out next";
  return {
    text, full, share,
    title: countOf(used, "token", "tokens") + " of the model's " + countOf(nCtx, "token", "tokens") +
      " (its context window) at the last reply. When a chat gets longer, the page leaves out its oldest " +
      "messages (Settings can make it ask first).",
  };
}
