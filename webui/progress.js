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
