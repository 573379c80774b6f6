// Long user messages (a pasted log, a whole file) fold to about FOLD_LINES lines, with a
// "Show all" / "Show less" button under them; everything else shows in full. The fold is
// measured on screen (lines wrap differently at each width), so it runs once a message is placed.
import { el } from "./util.js";

export const FOLD_LINES = 20;
let lastId = 0;

/** Fold `node` (a .message.user on the page) when its text is longer than FOLD_LINES lines. */
export function foldIfLong(node) {
  const content = node.querySelector(":scope > .content");
  if (!content || !content.isConnected || node.querySelector(":scope > .fold-toggle")) return;
  content.classList.add("folded");
  if (content.scrollHeight <= content.clientHeight + 1) {
    content.classList.remove("folded");
    return;
  }
  if (!content.id) content.id = "message-text-" + ++lastId;
  const toggle = el("button", "msg-action fold-toggle", "Show all");
  toggle.type = "button";
  toggle.setAttribute("data-testid", "fold-toggle");
  toggle.setAttribute("aria-controls", content.id);
  toggle.setAttribute("aria-expanded", "false");
  toggle.addEventListener("click", () => {
    const folded = content.classList.toggle("folded");
    toggle.textContent = folded ? "Show all" : "Show less";
    toggle.setAttribute("aria-expanded", folded ? "false" : "true");
    if (folded && toggle.getBoundingClientRect().top < 0) toggle.scrollIntoView({ block: "center" });
  });
  content.after(toggle);
}

/** Fold every long user message under `root`. */
export function foldAll(root) {
  for (const node of root.querySelectorAll(".message.user")) foldIfLong(node);
}
