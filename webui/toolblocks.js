// A reply's tool calls on screen: above its answer, one folded block per call ("Calculator ·
// 0.1 s"), which opens on the arguments and the result. Everything in a block is set with
// textContent: a result is data from a program or another server, never markup, so an HTML tag or
// a javascript: link in it shows as the characters it is. Blocks are updated in place while the
// reply streams, so one the reader opened stays open.
import { renderMarkdown } from "./markdown.js";
import { el, part } from "./util.js";

const STATUS = {
  queued: "waiting to run", waiting: "waiting for your answer", running: "running…", ok: "",
  error: "failed", denied: "denied by you", stopped: "stopped",
};

function label(c) {
  return c.server ? c.tool + " · " + c.server : { calculator: "Calculator", date_time: "Date and time",
    run_javascript: "Run JavaScript", search_files: "Search attached files" }[c.tool || c.name] || c.tool || c.name;
}

function summaryText(c) {
  const parts = [label(c)];
  const st = STATUS[c.status] === undefined ? "interrupted" : STATUS[c.status];
  if (st) parts.push(st);
  if (["ok", "error", "denied", "stopped"].includes(c.status)) parts.push(c.seconds.toFixed(1) + " s");
  return parts.join(" · ");
}

function prettyArgs(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    return text;
  }
}

function callBlock(c) {
  const box = el("details", "tool-call");
  box.setAttribute("data-testid", "tool-call");
  box.append(el("summary"), el("div", "tool-call-body"));
  return box;
}

function fillCall(box, c) {
  box.dataset.status = c.status;
  box.dataset.tool = c.tool || c.name;
  box.firstChild.textContent = summaryText(c);
  const body = box.lastChild;
  const args = el("pre", "tool-args");
  args.setAttribute("data-testid", "tool-args");
  args.textContent = prettyArgs(c.arguments);
  const result = el("pre", "tool-result");
  result.setAttribute("data-testid", "tool-result");
  result.textContent = c.result || (c.status === "ok" ? "(empty)" : "");
  body.replaceChildren(el("div", "tool-head", "Arguments"), args);
  if (c.result || c.status === "ok") body.append(el("div", "tool-head", "Result"), result);
}

/** Draw (or update) `m.rounds` above `content`, the answer. */
export function showTools(node, content, m) {
  const box = part(node, m.rounds && m.rounds.length, "div", "tool-rounds", (b) => content.before(b));
  if (!box) return;
  const want = [];
  for (const r of m.rounds) {
    if (r.content && r.content.trim()) want.push({ said: r.content });
    for (const c of r.calls) want.push({ call: c });
  }
  const have = [...box.children];
  want.forEach((w, i) => {
    let n = have[i];
    const kind = w.said !== undefined ? "tool-said" : "tool-call";
    if (!n || !n.classList.contains(kind)) {
      const made = w.said !== undefined ? el("div", "tool-said markdown") : callBlock(w.call);
      if (n) n.replaceWith(made);
      else box.appendChild(made);
      n = made;
    }
    if (w.said !== undefined) {
      if (n._said !== w.said) n.replaceChildren(renderMarkdown(w.said));
      n._said = w.said;
    } else {
      fillCall(n, w.call);
    }
  });
  for (const extra of have.slice(want.length)) extra.remove();
}
