// Which parts of a long file the model read for one answer. A file too long to read whole is
// searched for each question on the server (runtime/documents/reading.py); the reply's
// `X-Llmpack-Read` header lists the parts it read ([{filename, pages, parts: [{label, page}]}]).
// The page shows them under the answer, in a reader's words ("Read from contract.pdf: pages
// 11–13 and 217"), from the moment the reply starts, and keeps that line in the saved chat (the
// reply's stats.read, plain text, at most 200 characters: chats.py keeps stats that size).
import { part } from "./util.js";

const MAX_TEXT = 200;   // runtime/chats/chat_shape.py MAX_STAT_TEXT (a saved chat's stats text)

/** The parts a reply read, from its response's header, or null. */
export function readFromResponse(resp) {
  const raw = resp.headers.get("X-Llmpack-Read");
  if (!raw) return null;
  try {
    const files = JSON.parse(raw);
    return Array.isArray(files) && files.length ? files : null;
  } catch {
    return null;
  }
}

/** "11–13, 45 and 217" from page numbers. */
function pageRanges(pages) {
  const sorted = [...new Set(pages)].sort((a, b) => a - b);
  const runs = [];
  for (const p of sorted) {
    const last = runs[runs.length - 1];
    if (last && p === last[1] + 1) last[1] = p;
    else runs.push([p, p]);
  }
  const words = runs.map(([a, b]) => (a === b ? String(a) : a + "–" + b));
  return words.length > 1 ? words.slice(0, -1).join(", ") + " and " + words[words.length - 1] : words[0];
}

function fileText(f) {
  const parts = f.parts || [];
  if (f.summarised) {   // a question about all of the file: every part summarised (runtime/documents/overview.py)
    const all = f.pages > 0 ? "all " + f.pages + " pages" : "all of it";
    return f.filename + ": " + all + ", " + (f.skimmed ? "skimmed" : "read") + " in " + parts.length + " parts and summarised";
  }
  const pages = parts.filter((p) => p.page > 0).map((p) => p.page);
  let where;
  if (pages.length) {
    where = (new Set(pages).size === 1 ? "page " : "pages ") + pageRanges(pages);
  } else {
    where = [...new Set(parts.map((p) => p.label))].join(", ");
  }
  const why = f.matched === false ? " (its beginning: nothing in it matched the question)" : "";
  return f.filename + ": " + where + why;
}

/** One line for a reply's stats: "Read from contract.pdf: pages 11–13 and 217". */
export function readText(files) {
  if (!files) return "";
  const text = "Read from " + files.map(fileText).join("; ");
  return text.length > MAX_TEXT ? text.slice(0, MAX_TEXT - 1) + "…" : text;
}

/** Show (or remove) the "Read from …" line of an assistant message node. */
export function showRead(node, m) {
  const text = m.read || (m.stats && m.stats.read) || "";
  const line = part(node, text, "div", "message-read",
    (l) => node.insertBefore(l, node.querySelector(":scope > .message-footer")));
  if (!line) return;
  line.textContent = text;
  line.title = "This file is too long to read whole, so for each question the model reads the parts that "
    + "match it. These are the parts it read for this answer.";
}
