// Fitting files that are to be read whole into what the model keeps for files: when they do not
// fit, sending asks first (the first N pages of the largest, or cancel). `composer` is the
// composer's view of its files (attach.js): {files, budget, cost(doc), updated(p), render()}.
import { state, ui } from "./state.js";
import { countOf, fmtNumber, roughWords, wordCount } from "./words.js";

const NOTE_TOKENS = 48;   // the note a cut adds to the file's heading ("first 12 of 40 pages")
const tokens = (n) => countOf(n, "token", "tokens");
const words = (n) => countOf(n, "word", "words");

/** How many segments (pages, parts) of `doc` fit in `room` tokens. */
function segmentsThatFit(doc, room) {
  let used = doc.tokens - doc.segments.reduce((n, s) => n + s.tokens, 0);   // the heading
  let n = 0;
  for (const s of doc.segments) {
    if (used + s.tokens > room) break;
    used += s.tokens;
    n += 1;
  }
  return n;
}

/** A plan to fit the files: cut the largest one to its first N segments. null: nothing fits. */
function fitPlan(c) {
  const files = c.files.filter((p) => !p.doc.searched);
  if (!files.length) return null;
  const largest = files.reduce((a, b) => (b.doc.tokens > a.doc.tokens ? b : a));
  // less room for the note the cut adds to the file's heading ("first 12 of 40 pages")
  const room = c.budget - (total(c) - largest.doc.tokens) - NOTE_TOKENS;
  const n = room > 0 ? segmentsThatFit(largest.doc, room) : 0;
  return n > 0 ? { file: largest, n } : null;
}

function cut(c, p, n) {
  const d = p.doc;
  const chars = d.segments.slice(0, n).reduce((k, s) => k + s.chars, 0);
  const unit = d.unit === "page" ? "page" : "part";
  // PDF pages are joined by a blank line; parts are consecutive slices of the text
  const sep = d.unit === "page" ? 2 : 0;
  d.text = d.text.slice(0, chars + sep * Math.max(0, n - 1)).trimEnd();
  d.note = unit === "page" ? "first " + n + " of " + d.segments.length + " pages"
    : "first " + Math.round((100 * chars) / Math.max(1, d.segments.reduce((k, s) => k + s.chars, 0))) + "% of the text";
  d.tokens = d.tokens - d.segments.slice(n).reduce((k, s) => k + s.tokens, 0);
  d.words = wordCount(d.text);
  d.segments = d.segments.slice(0, n);
  delete d.file_id;   // the index holds the whole file: the cut is sent as text
  c.updated(p);
}

/** Resolves true to send (after any cut the user chose), false to keep editing. */
export function confirmFit(c) {
  if (total(c) <= c.budget) return Promise.resolve(true);
  const plan = fitPlan(c);
  const files = c.files;
  const totalTokens = () => total(c);
  const totalWords = () => files.reduce((n, p) => n + p.doc.words, 0);
  const budget = () => c.budget;
  const what = files.length === 1 ? files[0].name + " has " : "The " + files.length + " files have ";
  // the words the model can read, at these files' own words per token
  const room = roughWords(budget(), totalWords() / Math.max(1, totalTokens()));
  ui.fitText.textContent = what + words(totalWords()) + ", but this model can read about " + fmtNumber(room)
    + " words of files at once.";
  ui.fitDetail.textContent = tokens(totalTokens()) + " of files; this model keeps " + tokens(budget())
    + " of its context window (" + tokens(state.nCtx) + ") for files.";
  if (plan) {
    const d = plan.file.doc;
    const unit = d.unit === "page" ? (plan.n === 1 ? "page" : "pages") : (plan.n === 1 ? "part" : "parts");
    ui.fitCut.textContent = d.unit === "page" ? "Send the first " + plan.n + " " + unit + " of " + plan.file.name
      : "Send the first " + plan.n + " of " + d.segments.length + " " + unit + " of " + plan.file.name;
    ui.fitCut.hidden = false;
  } else {
    ui.fitText.textContent += " Remove a file, or attach a shorter part.";
    ui.fitCut.hidden = true;
  }
  return new Promise((resolve) => {
    const done = (ok) => {
      ui.fitCut.onclick = ui.fitCancel.onclick = ui.fitDialog.oncancel = null;
      ui.fitDialog.close();
      if (ok) cut(c, plan.file, plan.n);
      c.render();
      resolve(ok);
    };
    ui.fitCut.onclick = () => done(true);
    ui.fitCancel.onclick = () => done(false);
    ui.fitDialog.oncancel = (ev) => { ev.preventDefault(); done(false); };
    ui.fitDialog.showModal();
    ui.fitCut.hidden ? ui.fitCancel.focus() : ui.fitCut.focus();
  });
}

function total(c) {
  return c.files.reduce((n, p) => n + c.cost(p.doc), 0);
}
