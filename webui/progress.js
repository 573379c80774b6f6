// Prompt progress: while the server reads a long message it sends chunks with no choices and
// `prompt_progress: {total, cache, processed, time_ms}` (llama-server's `return_progress`
// extension, README.md "API"). The reply that has no text yet then says "Reading your message…
// 1,800 / 4,162 tokens" in place of the three dots; the first words replace it as before.
import { el } from "./util.js";

const numbers = new Intl.NumberFormat();

/** The line for one prompt_progress object ("" when it is not one). */
export function progressText(p) {
  if (!p || typeof p.total !== "number" || typeof p.processed !== "number" || !(p.total > 0)) return "";
  const done = Math.max(0, Math.min(p.processed, p.total));
  return "Reading your message… " + numbers.format(done) + " / " + numbers.format(p.total) + " tokens";
}

/** Show `p` in `node` (the reply being streamed) while `msg` has no text. A prompt read in one
 * step (a short message) shows nothing: only a long one gets the line, not a flash of it. */
export function showPromptProgress(node, msg, p) {
  if (!node || !node.isConnected || msg.content) return;
  const text = progressText(p);
  const where = node.classList.contains("doc-part") ? node : node.querySelector(".content");
  if (!text || !where) return;
  let line = where.querySelector(".reading");
  if (!line) {
    if (p.processed >= p.total) return;
    line = el("span", "reading");
    line.setAttribute("role", "status");
    where.replaceChildren(line);
  }
  line.textContent = text;
}

const READING_EVERY_MS = 1000;

/** The line for one round that summarises a long file (GET /v1/documents/reading). */
export function readingText(r) {
  if (!r || typeof r.filename !== "string" || !(r.parts > 0)) return "";
  const where = r.pages > 0
    ? numbers.format(Math.max(0, r.page)) + " of " + numbers.format(r.pages) + " pages"
    : numbers.format(r.done) + " of " + numbers.format(r.parts) + " parts";
  return "Reading " + r.filename + " to answer about all of it: " + where + " so far…";
}

/** While a request that carries files waits for its reply to start, ask the server every second
 * whether it is reading a whole long file for it (a question about all of a file summarises each
 * part first: runtime/documents/overview.py) and show how far, so the wait is never silent.
 * Returns the function that stops asking. */
export function watchReading(node, msg, headers, fileIds) {
  let stopped = false;
  const ids = new Set(fileIds);
  const ask = async () => {
    if (stopped) return;
    try {
      const resp = await fetch("/v1/documents/reading", { headers, cache: "no-store" });
      const data = resp.ok ? await resp.json() : null;
      const round = data && Array.isArray(data.reading) ? data.reading.find((r) => r && (!ids.size || ids.has(r.file_id))) : null;
      if (!stopped && round) showLine(node, msg, readingText(round));
    } catch (e) {
      // the page's own request will say what went wrong
    }
    if (!stopped) timer = setTimeout(ask, READING_EVERY_MS);
  };
  let timer = setTimeout(ask, READING_EVERY_MS);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function showLine(node, msg, text) {
  if (!node || !node.isConnected || msg.content || !text) return;
  const where = node.querySelector(".content");
  if (!where) return;
  let line = where.querySelector(".reading");
  if (!line) {
    line = el("span", "reading");
    line.setAttribute("role", "status");
    where.replaceChildren(line);
  }
  line.textContent = text;
}
