// Model output as Markdown: markdown-it (raw HTML off) and highlight.js, both fetched from npm at
// set-up into /static/vendor/ (see webui/vendor.py), plus a copy button on each code block.
//
// Safety, in two layers. markdown-it with html:false escapes every tag in the text, links pass
// only http(s) and mailto (validateLink), and images are off. Its HTML is then parsed in an
// inert document (DOMParser runs no script and loads nothing) and copied into the page element
// by element through an allowlist of tags and attributes, so even a renderer bug cannot put a
// <script>, an on* handler or a javascript: URL on the page. Nothing assigns innerHTML.
import { el } from "./util.js";

const SAFE_URL = /^(https?:|mailto:)/i;
const TAGS = new Set([
  "p", "br", "hr", "em", "strong", "s", "del", "code", "pre", "blockquote", "a", "span",
  "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
  "table", "thead", "tbody", "tr", "th", "td", "sup", "sub",
]);
const CODE_CLASS = /^(hljs[\w-]*|language-[\w+#.-]+|function_|class_)$/;

let md = null;
let hljs = null;

/** Resolves once the libraries are in (or failed to load: then text is shown plain). */
export const markdownReady = Promise.all([
  import("./vendor/markdown-it.js"),
  import("./vendor/highlight.js"),
]).then(([mdModule, hlModule]) => {
  hljs = hlModule.default;
  md = mdModule.default({ html: false, linkify: false, typographer: false, highlight });
  md.disable("image");   // a model's image link would make the browser fetch a URL
  md.validateLink = (url) => SAFE_URL.test(url.trim());
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

/** `text` rendered as Markdown, as a DocumentFragment built from DOM nodes. */
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  if (!md) {
    const p = el("p", "plain", text);
    frag.appendChild(p);
    return frag;
  }
  const inert = new DOMParser().parseFromString(md.render(text), "text/html");
  copyChildren(inert.body, frag);
  for (const pre of frag.querySelectorAll("pre")) wrapCode(pre);
  for (const table of frag.querySelectorAll("table")) {
    const wrap = el("div", "table-wrap");
    table.replaceWith(wrap);
    wrap.appendChild(table);
  }
  return frag;
}

function copyChildren(from, to) {
  for (const node of from.childNodes) {
    if (node.nodeType === Node.TEXT_NODE) {
      to.appendChild(document.createTextNode(node.data));
    } else if (node.nodeType === Node.ELEMENT_NODE) {
      const tag = node.tagName.toLowerCase();
      if (!TAGS.has(tag)) {
        to.appendChild(document.createTextNode(node.textContent));
        continue;
      }
      const copy = document.createElement(tag);
      copyAttributes(node, copy, tag);
      copyChildren(node, copy);
      to.appendChild(copy);
    }
  }
}

function copyAttributes(src, dst, tag) {
  if (tag === "a") {
    const href = src.getAttribute("href") || "";
    if (SAFE_URL.test(href.trim())) {
      dst.setAttribute("href", href);
      dst.setAttribute("target", "_blank");
      dst.setAttribute("rel", "noopener noreferrer nofollow");
    }
  } else if (tag === "code" || tag === "span") {
    const classes = (src.getAttribute("class") || "").split(/\s+/).filter((c) => CODE_CLASS.test(c));
    if (classes.length) dst.className = classes.join(" ");
  } else if (tag === "ol") {
    const start = parseInt(src.getAttribute("start"), 10);
    if (start > 0 && start < 1e9) dst.setAttribute("start", String(start));
  } else if (tag === "th" || tag === "td") {
    // markdown-it aligns cells with style="text-align:x"; the CSP allows no inline styles
    const align = /text-align:\s*(left|center|right)/.exec(src.getAttribute("style") || "");
    if (align) dst.className = "align-" + align[1];
  }
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
