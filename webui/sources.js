// Sources under an answer: the places in the attached files that support it, found by the
// server, not by the model (runtime/documents/attribution.py; README "Sources"). They
// come with the end of the reply (delta.sources), are kept in the saved chat (msg.sources, checked
// by runtime/chats/chat_sources.py) and show as one button per place under the answer
// ("manual.pdf · p. 97"). Opening one shows the text of that place, the sentence that supports the
// answer highlighted; pointing at one lights up the sentence of the answer it supports.
//
// No sources (the server found no clear support) shows nothing: no place rather than a wrong one.
// The reply's words are never changed, but a page mark the model wrote that the server's place
// contradicts ("[p. 96]" for a fact on page 97) is struck through, with the right place after it
// as a button that opens it, so the wrong number cannot be read as the source.
import { findRange, slicePoints, utf16At } from "./replytext.js";
import { el, part } from "./util.js";

const MAX_SOURCES = 100;          // chat_sources.MAX_SOURCES
const MAX_TEXT = 20_000;          // chat_sources.MAX_SOURCE_TEXT: a place's text is cut around its quote
const HIGHLIGHT = "source-sentence";
const TEXTS = ["file", "label", "quote", "context"];
const OFFSETS = ["quote_start", "quote_end", "reply_start", "reply_end"];

const whole = (n) => Number.isInteger(n) && n >= 0 && n <= 1e9;   // chat_sources.MAX_NUMBER
const textOrNull = (v) => (typeof v === "string" ? v.slice(0, 200) : null);

/** The sources a response carried, checked (a malformed one is left out), or undefined when it carried none. */
export function cleanSources(list) {
  if (!Array.isArray(list)) return undefined;
  const out = [];
  for (const s of list.slice(0, MAX_SOURCES)) {
    if (!s || typeof s !== "object" || !TEXTS.every((k) => typeof s[k] === "string") || !OFFSETS.every((k) => whole(s[k]))) continue;
    const src = {
      file: s.file.slice(0, 200), file_id: textOrNull(s.file_id), label: s.label.slice(0, 200),
      page: whole(s.page) && s.page > 0 ? s.page : null, section: textOrNull(s.section),
      lines: Array.isArray(s.lines) && s.lines.length === 2 && s.lines.every(whole) ? [s.lines[0], s.lines[1]] : null,
      quote: s.quote.slice(0, MAX_TEXT), context: s.context,
      quote_start: s.quote_start, quote_end: Math.max(s.quote_start, s.quote_end),
      reply_start: s.reply_start, reply_end: Math.max(s.reply_start, s.reply_end),
      model_mark: textOrNull(s.model_mark), mark_right: typeof s.mark_right === "boolean" ? s.mark_right : null,
    };
    out.push(src.context.length > MAX_TEXT ? cutContext(src) : src);
  }
  return out;
}

/** A place's text cut to MAX_TEXT characters around its quote (offsets count code points, as the server's). */
function cutContext(src) {
  const points = [...src.context];
  const from = Math.max(0, Math.min(src.quote_start - 2000, points.length - MAX_TEXT));
  const context = points.slice(from, from + MAX_TEXT).join("");
  return { ...src, context, quote_start: src.quote_start - from, quote_end: Math.min(src.quote_end - from, [...context].length) };
}

/** The sources of one reply, one entry per place (file and page, section or lines), in the order first cited. */
export function groupSources(sources) {
  const groups = new Map();
  for (const s of sources || []) {
    const key = (s.file_id || s.file) + "\u0000" + s.label;
    if (!groups.has(key)) groups.set(key, { label: s.label, file: s.file, items: [] });
    groups.get(key).items.push(s);
  }
  return [...groups.values()];
}

/** Where a source is, in words: "page 97", "the part “Termination”", "lines 3–4". */
function placeWords(s) {
  if (s.page) return "page " + s.page;
  if (s.section) return "the part “" + s.section + "”";
  if (s.lines) return s.lines[0] === s.lines[1] ? "line " + s.lines[0] : "lines " + s.lines[0] + "–" + s.lines[1];
  return "";
}

/** Show (or remove) the sources of an assistant message node, and mark the model's contradicted page marks. */
export function showSources(node, m) {
  const groups = m.sources && m.sources.length && !(node.classList.contains("streaming")) ? groupSources(m.sources) : [];
  const row = part(node, groups.length, "div", "message-sources",
    (r) => node.insertBefore(r, node.querySelector(":scope > .message-footer")));
  if (!row) return;
  row.replaceChildren(el("span", "sources-title", groups.length === 1 ? "Source" : "Sources"));
  const content = node.querySelector(":scope > .content");
  for (const g of groups) {
    const chip = el("button", "source-chip", g.label);
    chip.type = "button";
    chip.setAttribute("data-testid", "source");
    chip.setAttribute("aria-haspopup", "dialog");
    chip.title = "Show where " + g.file + " says this";
    chip.addEventListener("click", () => openSource(g, m, chip));
    chip.addEventListener("mouseenter", () => lightUp(content, m, g));
    chip.addEventListener("focus", () => lightUp(content, m, g));
    chip.addEventListener("mouseleave", lightsOff);
    chip.addEventListener("blur", lightsOff);
    row.appendChild(chip);
  }
  markWrongPages(content, m, groups);
}

/** The ranges of the reply sentences a place supports, as drawn. */
function sentenceRanges(content, m, g) {
  const out = [];
  for (const s of g.items) {
    const found = findRange(content, slicePoints(m.content, s.reply_start, s.reply_end), 0);
    if (found) out.push(found);
  }
  return out;
}

function lightUp(content, m, g) {
  if (!(window.CSS && CSS.highlights && window.Highlight)) return;
  CSS.highlights.set(HIGHLIGHT, new Highlight(...sentenceRanges(content, m, g).map((f) => f.range)));
}

function lightsOff() {
  if (window.CSS && CSS.highlights) CSS.highlights.delete(HIGHLIGHT);
}

/** Strike through each page mark the model wrote that its source contradicts; the right place follows it. */
function markWrongPages(content, m, groups) {
  for (const g of groups) {
    for (const s of g.items) {
      if (s.mark_right !== false || !s.model_mark) continue;
      const sentence = findRange(content, slicePoints(m.content, s.reply_start, s.reply_end), 0);
      const mark = findRange(content, s.model_mark, sentence ? sentence.start : 0);
      if (!mark || mark.range.startContainer !== mark.range.endContainer) continue;
      const wrong = el("s", "wrong-mark");
      wrong.setAttribute("data-testid", "wrong-mark");
      wrong.title = "The model wrote this, but " + g.file + " says it on " + placeWords(s) + ".";
      mark.range.surroundContents(wrong);
      const fix = el("button", "mark-fix", g.label.split(" · ").pop());
      fix.type = "button";
      fix.setAttribute("data-testid", "mark-fix");
      fix.title = "Where " + g.file + " really says this: " + g.label;
      fix.addEventListener("click", () => openSource(g, m, fix));
      wrong.after(" ", fix);
    }
  }
}

let dialog = null;

function sourceDialog() {
  if (dialog) return dialog;
  dialog = el("dialog", "source-dialog");
  dialog.setAttribute("data-testid", "source-dialog");
  dialog.setAttribute("aria-labelledby", "source-title");
  const head = el("div", "source-head");
  const title = el("h2", "source-title");
  title.id = "source-title";
  const close = el("button", "button ghost small source-close", "Close");
  close.type = "button";
  close.setAttribute("data-testid", "source-close");
  close.addEventListener("click", () => dialog.close());
  head.append(title, close);
  const note = el("p", "source-note");
  const fix = el("p", "source-fix");
  fix.setAttribute("data-testid", "source-fix");
  const text = el("div", "source-text");
  text.setAttribute("data-testid", "source-text");
  text.tabIndex = 0;   // the text scrolls: the keyboard can scroll it too
  dialog.append(head, note, fix, text);
  dialog.addEventListener("click", (ev) => {   // a click on the dimmed page around the box closes it
    const r = dialog.getBoundingClientRect();
    const inside = ev.clientX >= r.left && ev.clientX <= r.right && ev.clientY >= r.top && ev.clientY <= r.bottom;
    if (ev.target === dialog && !inside) dialog.close();
  });
  dialog.addEventListener("close", lightsOff);
  document.body.appendChild(dialog);
  return dialog;
}

/** The dialog with the text of a place, each quote of it highlighted, the first one scrolled into view. */
export function openSource(g, m, opener) {
  const d = sourceDialog();
  const first = g.items[0];
  d.querySelector(".source-title").textContent = g.label;
  const where = placeWords(first);
  d.querySelector(".source-note").textContent = "What " + g.file + " says" + (where ? " on " + where : "")
    + ", as the model read it. The highlighted part supports the answer.";
  const wrong = g.items.find((s) => s.mark_right === false && s.model_mark);
  const fix = d.querySelector(".source-fix");
  fix.hidden = !wrong;
  fix.textContent = wrong ? "The answer says " + wrong.model_mark.replace(/^\[|\]$/g, "") + ", but it is "
    + (where || g.label) + " of " + g.file + " that says so." : "";
  const box = d.querySelector(".source-text");
  box.replaceChildren();
  const contexts = [...new Set(g.items.map((s) => s.context))];
  for (const context of contexts) {
    const quotes = g.items.filter((s) => s.context === context).map((s) => quoteAt(context, s)).filter(Boolean);
    box.appendChild(passage(context, quotes));
  }
  if (!d.open) d.showModal();
  lightUp(opener.closest(".message").querySelector(":scope > .content"), m, g);
  const mark = box.querySelector("mark");
  if (mark) mark.scrollIntoView({ block: "center" });
  else box.scrollTop = 0;
}

/** [start, end) of a source's quote in `context`, in UTF-16 units; found by its text when the offsets disagree. */
function quoteAt(context, s) {
  const start = utf16At(context, s.quote_start);
  const end = utf16At(context, s.quote_end);
  if (end > start && context.slice(start, end) === s.quote) return [start, end];
  const at = s.quote ? context.indexOf(s.quote) : -1;
  return at >= 0 ? [at, at + s.quote.length] : null;
}

function passage(context, quotes) {
  const p = el("div", "source-passage");
  const spans = quotes.sort((a, b) => a[0] - b[0]).filter((q, i, all) => i === 0 || q[0] >= all[i - 1][1]);
  let at = 0;
  for (const [start, end] of spans) {
    p.append(context.slice(at, start));
    const mark = el("mark", "source-quote", context.slice(start, end));
    mark.setAttribute("data-testid", "source-quote");
    p.append(mark);
    at = end;
  }
  p.append(context.slice(at));
  return p;
}
