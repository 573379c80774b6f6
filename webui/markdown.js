// Model output as Markdown: markdown-it (raw HTML off), highlight.js and DOMPurify, all fetched
// from npm at set-up into /static/vendor/ (see webui/vendor.py), plus a copy button on each code block.
//
// Safety, in two layers. markdown-it with html:false escapes every tag in the text, links pass
// only http(s) and mailto (validateLink), and images are off. Its HTML then goes through
// DOMPurify with an allowlist of tags and attributes (sanitize below), which returns DOM nodes,
// so even a renderer bug cannot put a <script>, an on* handler or a javascript: URL on the page.
// Nothing assigns innerHTML.
import { el } from "./util.js";

const SAFE_URL = /^(https?:|mailto:)/i;
const TAGS = [
  "p", "br", "hr", "em", "strong", "s", "del", "code", "pre", "blockquote", "a", "span",
  "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
  "table", "thead", "tbody", "tr", "th", "td", "sup", "sub",
];
const KEEP_CLASS = /^(hljs[\w-]*|language-[\w+#.-]+|function_|class_|align-(left|center|right))$/;

let md = null;
let hljs = null;
let purify = null;

/** Resolves once the libraries are in (or failed to load: then text is shown plain). */
export const markdownReady = Promise.all([
  import("./vendor/markdown-it.js"),
  import("./vendor/highlight.js"),
  import("./vendor/purify.js"),
]).then(([mdModule, hlModule, purifyModule]) => {
  hljs = hlModule.default;
  md = mdModule.default({ html: false, linkify: false, typographer: false, highlight });
  md.disable("image");   // a model's image link would make the browser fetch a URL
  md.validateLink = (url) => SAFE_URL.test(url.trim());
  for (const cell of ["th_open", "td_open"]) md.renderer.rules[cell] = alignByClass;
  purify = purifyModule.default;
  purify.addHook("afterSanitizeAttributes", tidyAttributes);
}).catch((err) => {
  console.error("llmpack: the Markdown libraries did not load (run ./dev setup); showing plain text.", err);
});

function highlight(code, lang) {
  const name = (lang || "").trim().split(/\s+/)[0].toLowerCase();
  if (hljs && name && hljs.getLanguage(name)) {
    try {
      return hljs.highlight(code, { language: name, ignoreIllegals: true }).value;
    } catch (e) {
      return "";
    }
  }
  return "";   // markdown-it escapes the code itself
}

/** markdown-it aligns table cells with style="text-align:x"; the CSP allows no inline styles. */
function alignByClass(tokens, idx, options, env, self) {
  const token = tokens[idx];
  const style = token.attrGet("style") || "";
  const align = /text-align:\s*(left|center|right)/.exec(style);
  token.attrs = (token.attrs || []).filter(([name]) => name !== "style");
  if (align) token.attrSet("class", "align-" + align[1]);
  return self.renderToken(tokens, idx, options);
}

/** After DOMPurify's own checks: only highlighting and alignment classes, and links open apart. */
function tidyAttributes(node) {
  if (node.hasAttribute("class")) {
    const keep = node.getAttribute("class").split(/\s+/).filter((c) => KEEP_CLASS.test(c));
    if (keep.length) node.setAttribute("class", keep.join(" "));
    else node.removeAttribute("class");
  }
  if (node.tagName === "A" && node.hasAttribute("href")) {
    if (SAFE_URL.test(node.getAttribute("href").trim())) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer nofollow");
    } else {
      node.removeAttribute("href");
    }
  }
  if (node.tagName === "OL" && node.hasAttribute("start")) {
    const start = parseInt(node.getAttribute("start"), 10);
    if (start > 0 && start < 1e9) node.setAttribute("start", String(start));
    else node.removeAttribute("start");
  }
}

/** `html` as a DocumentFragment holding only the allowed tags and attributes (DOMPurify). */
export function sanitize(html) {
  return purify.sanitize(html, {
    ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ["href", "class", "start"],   // tidyAttributes adds target and rel
    ALLOWED_URI_REGEXP: SAFE_URL, ALLOW_DATA_ATTR: false, RETURN_DOM_FRAGMENT: true,
  });
}

/** `text` rendered as Markdown, as a DocumentFragment built from DOM nodes. */
export function renderMarkdown(text) {
  if (!md) {
    const frag = document.createDocumentFragment();
    frag.appendChild(el("p", "plain", text));
    return frag;
  }
  const frag = sanitize(md.render(text));
  for (const pre of frag.querySelectorAll("pre")) wrapCode(pre);
  for (const table of frag.querySelectorAll("table")) {
    const wrap = el("div", "table-wrap");
    table.replaceWith(wrap);
    wrap.appendChild(table);
  }
  return frag;
}

function wrapCode(pre) {
  const code = pre.querySelector("code");
  const lang = code && /(?:^|\s)language-([\w+#.-]+)/.exec(code.className);
  const block = el("div", "code-block");
  const head = el("div", "code-header");
  head.appendChild(el("span", "code-lang", lang ? lang[1] : "text"));
  const copy = el("button", "copy-code", "Copy");
  copy.type = "button";
  copy.title = "Copy this code";
  copy.setAttribute("data-testid", "copy-code");
  head.appendChild(copy);
  pre.replaceWith(block);
  block.appendChild(head);
  block.appendChild(pre);
}
