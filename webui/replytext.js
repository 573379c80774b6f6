// Finding a piece of a reply's own text (a sentence, a page mark the model wrote) in the reply as
// drawn: the server counts in the reply's Markdown source, the page shows it rendered, so the
// source's characters are looked up in the rendered text, ignoring what Markdown turns into
// formatting (*, _, `, #, >) and differences in spaces. Used by sources.js to light up the
// sentence a source supports and to strike through a page mark the server's place contradicts.

const SKIP = /[\s*_`#>~]/;

/** Text offsets (in JavaScript's UTF-16 units) of Python's code-point offset `n` in `text`. */
export function utf16At(text, n) {
  if (!Number.isInteger(n) || n <= 0) return 0;
  let units = 0;
  let points = 0;
  while (units < text.length && points < n) {
    const c = text.codePointAt(units);
    units += c > 0xffff ? 2 : 1;
    points += 1;
  }
  return units;
}

/** The slice [start, end) of `text`, where start and end count code points (as the server does). */
export function slicePoints(text, start, end) {
  return text.slice(utf16At(text, start), utf16At(text, end));
}

/** Every text node under `root` with where it starts in their joined text. */
function textNodes(root) {
  const out = [];
  let at = 0;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement && n.parentElement.closest(".mark-fix")) continue;   // what sources.js added
    out.push({ node: n, at });
    at += n.data.length;
  }
  return out;
}

/** `text` without what Markdown turns into formatting or layout, with the index in `text` of each kept character. */
function squeeze(text) {
  let s = "";
  const map = [];
  for (let i = 0; i < text.length; i++) {
    if (SKIP.test(text[i])) continue;
    s += text[i].toLowerCase();
    map.push(i);
  }
  return { s, map };
}

/** A DOM Range over the rendered text of `piece` inside `root`, searched from `from` (an offset in the
 * joined text), or null when it is not there as such. */
export function findRange(root, piece, from) {
  const nodes = textNodes(root);
  const whole = nodes.map((n) => n.node.data).join("");
  const hay = squeeze(whole);
  const needle = squeeze(piece).s;
  if (!needle) return null;
  const startAt = hay.map.findIndex((i) => i >= (from || 0));
  const k = hay.s.indexOf(needle, startAt < 0 ? hay.s.length : startAt);
  if (k < 0) return null;
  const start = hay.map[k];
  const end = hay.map[k + needle.length - 1] + 1;
  return { range: rangeOf(nodes, start, end), start, end };
}

function rangeOf(nodes, start, end) {
  const range = document.createRange();
  const at = (offset, isEnd) => {
    for (const n of nodes) {
      const len = n.node.data.length;
      if (offset < n.at + len || (isEnd && offset === n.at + len)) return [n.node, offset - n.at];
    }
    const last = nodes[nodes.length - 1];
    return [last.node, last.node.data.length];
  };
  range.setStart(...at(start, false));
  range.setEnd(...at(end, true));
  return range;
}
