/*
 * llmpack chat page: a small, safe Markdown renderer.
 *
 * renderMarkdown(text) -> DocumentFragment
 *
 * Safety rule: the input (model output) is never parsed as HTML. Every node is
 * made with document.createElement / createTextNode and text is only ever set
 * through text nodes, so "<script>" or "<img onerror=...>" shows as literal text.
 * Links are emitted only for absolute http(s) URLs, with rel="noopener noreferrer"
 * and target="_blank". Images are never loaded (shown as links instead).
 *
 * Supported: paragraphs (single newlines become line breaks), ATX headings,
 * **bold**, *italic*, ***both***, __bold__, _italic_, ~~strike~~, `inline code`,
 * fenced code blocks (``` or ~~~, an unclosed fence runs to the end, which suits
 * streaming), bullet / numbered / nested lists, task items, block quotes,
 * horizontal rules, GFM tables, [links](https://...), <https://autolinks>,
 * bare https:// URLs, backslash escapes and literal <br> inside text.
 */
(function (global) {
  "use strict";

  var MAX_DEPTH = 12; // nesting guard for quotes / lists / emphasis

  // ---------------------------------------------------------------- helpers

  function el(tag, className) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  function text(s) {
    return document.createTextNode(s);
  }

  function indentOf(line) {
    var n = 0;
    for (var i = 0; i < line.length; i++) {
      var c = line.charAt(i);
      if (c === " ") n += 1;
      else if (c === "\t") n += 4 - (n % 4);
      else break;
    }
    return n;
  }

  // Remove up to `n` columns of leading indentation (tabs count as 4).
  function dedent(line, n) {
    var col = 0;
    var i = 0;
    while (i < line.length && col < n) {
      var c = line.charAt(i);
      if (c === " ") col += 1;
      else if (c === "\t") col += 4 - (col % 4);
      else break;
      i++;
    }
    return line.slice(i);
  }

  function isBlank(line) {
    return /^\s*$/.test(line);
  }

  function safeUrl(raw) {
    if (typeof raw !== "string") return null;
    var s = raw.trim();
    if (s.charAt(0) === "<" && s.charAt(s.length - 1) === ">") s = s.slice(1, -1);
    if (!/^https?:\/\//i.test(s)) return null;
    try {
      var u = new URL(s);
      if (u.protocol !== "http:" && u.protocol !== "https:") return null;
      return u.href;
    } catch (e) {
      return null;
    }
  }

  function makeLink(href) {
    var a = el("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    return a;
  }

  // ---------------------------------------------------------------- block patterns

  var RE_FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/;
  var RE_HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
  var RE_HR = /^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$/;
  var RE_QUOTE = /^ {0,3}> ?/;
  var RE_LIST = /^([ \t]*)([*+-]|\d{1,9}[.)])([ \t]+|$)(.*)$/;
  var RE_TABLE_DELIM = /^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

  function listMatch(line) {
    var m = RE_LIST.exec(line);
    if (!m) return null;
    if (RE_HR.test(line)) return null; // "* * *" is a rule, not a list
    var marker = m[2];
    var ordered = /\d/.test(marker.charAt(0));
    var spaces = m[3].replace(/\t/g, "    ").length;
    var indent = indentOf(m[1]);
    // more than 4 spaces after the marker: the item's text is indented code; keep it simple
    var contentIndent = indent + marker.length + (spaces >= 1 && spaces <= 4 ? spaces : 1);
    return {
      indent: indent,
      ordered: ordered,
      bulletChar: ordered ? marker.charAt(marker.length - 1) : marker,
      start: ordered ? parseInt(marker, 10) : 1,
      contentIndent: contentIndent,
      content: m[4],
      empty: m[4] === "" && m[3] === "",
    };
  }

  function splitRow(line) {
    var s = line.trim();
    if (s.charAt(0) === "|") s = s.slice(1);
    if (s.charAt(s.length - 1) === "|" && s.charAt(s.length - 2) !== "\\") s = s.slice(0, -1);
    var cells = [];
    var cur = "";
    var inCode = 0;
    for (var i = 0; i < s.length; i++) {
      var c = s.charAt(i);
      if (c === "\\" && s.charAt(i + 1) === "|") {
        cur += "|";
        i++;
      } else if (c === "`") {
        var run = 1;
        while (s.charAt(i + run) === "`") run++;
        if (inCode === 0) inCode = run;
        else if (inCode === run) inCode = 0;
        cur += s.substr(i, run);
        i += run - 1;
      } else if (c === "|" && inCode === 0) {
        cells.push(cur.trim());
        cur = "";
      } else {
        cur += c;
      }
    }
    cells.push(cur.trim());
    return cells;
  }

  function isTableStart(lines, i) {
    if (i + 1 >= lines.length) return false;
    var head = lines[i];
    if (head.indexOf("|") < 0) return false;
    var delim = lines[i + 1];
    if (!RE_TABLE_DELIM.test(delim) || delim.indexOf("-") < 0) return false;
    if (delim.indexOf("|") < 0 && head.trim().charAt(0) !== "|") {
      // "a | b" over "---" could be a paragraph + rule; require a pipe in the delimiter then
      return false;
    }
    return splitRow(head).length === splitRow(delim).length;
  }

  function startsBlock(lines, i) {
    var line = lines[i];
    return (
      RE_FENCE_OPEN.test(line) ||
      RE_HEADING.test(line) ||
      RE_HR.test(line) ||
      RE_QUOTE.test(line) ||
      (listMatch(line) !== null && !listMatch(line).empty) ||
      isTableStart(lines, i)
    );
  }

  // ---------------------------------------------------------------- block parser

  function renderBlocks(lines, parent, depth) {
    var i = 0;
    var n = lines.length;
    while (i < n) {
      var line = lines[i];
      if (isBlank(line)) {
        i++;
        continue;
      }
      var m;

      // fenced code
      if ((m = RE_FENCE_OPEN.exec(line))) {
        var fence = m[1];
        var lang = m[2] || "";
        var openIndent = indentOf(line);
        var body = [];
        var closeRe = new RegExp("^ {0,3}" + (fence.charAt(0) === "`" ? "`" : "~") + "{" + fence.length + ",}[ \\t]*$");
        i++;
        while (i < n && !closeRe.test(lines[i])) {
          body.push(dedent(lines[i], openIndent));
          i++;
        }
        var closed = i < n;
        i++; // skip the closing fence (or run past the end)
        parent.appendChild(codeBlock(body.join("\n"), lang, closed));
        continue;
      }

      // heading
      if ((m = RE_HEADING.exec(line))) {
        var h = el("h" + m[1].length);
        renderInline(m[2] || "", h, depth);
        parent.appendChild(h);
        i++;
        continue;
      }

      // horizontal rule
      if (RE_HR.test(line)) {
        parent.appendChild(el("hr"));
        i++;
        continue;
      }

      // block quote
      if (RE_QUOTE.test(line)) {
        var q = [];
        while (i < n && !isBlank(lines[i])) {
          if (RE_QUOTE.test(lines[i])) q.push(lines[i].replace(RE_QUOTE, ""));
          else if (q.length && !startsBlock(lines, i)) q.push(lines[i]); // lazy continuation
          else break;
          i++;
        }
        var bq = el("blockquote");
        if (depth < MAX_DEPTH) renderBlocks(q, bq, depth + 1);
        else bq.appendChild(text(q.join("\n")));
        parent.appendChild(bq);
        continue;
      }

      // list
      var lm = listMatch(line);
      if (lm && !lm.empty) {
        i = renderList(lines, i, parent, depth, lm);
        continue;
      }

      // table
      if (isTableStart(lines, i)) {
        i = renderTable(lines, i, parent, depth);
        continue;
      }

      // indented code (4+ spaces, not inside a paragraph)
      if (indentOf(line) >= 4) {
        var code = [];
        while (i < n && (indentOf(lines[i]) >= 4 || isBlank(lines[i]))) {
          code.push(dedent(lines[i], 4));
          i++;
        }
        while (code.length && isBlank(code[code.length - 1])) code.pop();
        parent.appendChild(codeBlock(code.join("\n"), "", true));
        continue;
      }

      // paragraph
      var para = [line.replace(/^[ \t]+/, "")];
      i++;
      while (i < n && !isBlank(lines[i]) && !startsBlock(lines, i)) {
        para.push(lines[i].replace(/^[ \t]+/, ""));
        i++;
      }
      var p = el("p");
      renderInline(para.join("\n").replace(/[ \t]+$/, ""), p, depth);
      parent.appendChild(p);
    }
  }

  function codeBlock(source, lang, closed) {
    var wrap = el("div", "code-block");
    if (!closed) wrap.classList.add("code-open");
    var header = el("div", "code-header");
    var label = el("span", "code-lang");
    label.textContent = lang || "code";
    var btn = el("button", "copy-code");
    btn.type = "button";
    btn.setAttribute("data-testid", "copy-code");
    btn.setAttribute("aria-label", "Copy code");
    btn.textContent = "Copy";
    header.appendChild(label);
    header.appendChild(btn);
    var pre = el("pre");
    var code = el("code");
    if (lang && /^[A-Za-z0-9_+#.-]{1,32}$/.test(lang)) code.className = "language-" + lang;
    code.textContent = source;
    pre.appendChild(code);
    wrap.appendChild(header);
    wrap.appendChild(pre);
    return wrap;
  }

  function renderList(lines, i, parent, depth, first) {
    var n = lines.length;
    var list = el(first.ordered ? "ol" : "ul");
    if (first.ordered && first.start !== 1) list.setAttribute("start", String(first.start));
    var items = [];
    var cur = null;
    var loose = false;
    var sawBlank = false;

    while (i < n) {
      var line = lines[i];
      var m = listMatch(line);
      if (
        m &&
        m.ordered === first.ordered &&
        m.bulletChar === first.bulletChar &&
        m.indent < (cur ? cur.contentIndent : first.contentIndent) &&
        m.indent <= first.indent + 3
      ) {
        if (sawBlank && cur) loose = true;
        cur = { lines: [m.content], contentIndent: m.contentIndent };
        items.push(cur);
        sawBlank = false;
        i++;
        continue;
      }
      if (isBlank(line)) {
        // keep going only if the next non-blank line continues this list
        var j = i + 1;
        while (j < n && isBlank(lines[j])) j++;
        if (j >= n) break;
        var nm = listMatch(lines[j]);
        var continues =
          indentOf(lines[j]) >= cur.contentIndent ||
          (nm && nm.ordered === first.ordered && nm.bulletChar === first.bulletChar && nm.indent <= first.indent + 3);
        if (!continues) break;
        cur.lines.push("");
        sawBlank = true;
        i++;
        continue;
      }
      if (indentOf(line) >= cur.contentIndent) {
        if (sawBlank) loose = true;
        cur.lines.push(dedent(line, cur.contentIndent));
        sawBlank = false;
        i++;
        continue;
      }
      if (!sawBlank && m && indentOf(line) > first.indent) {
        // a nested list indented less than the content column: still nest it
        cur.lines.push(dedent(line, Math.min(indentOf(line), cur.contentIndent)));
        i++;
        continue;
      }
      if (!sawBlank && !startsBlock(lines, i)) {
        cur.lines.push(line.replace(/^[ \t]+/, "")); // lazy paragraph continuation
        i++;
        continue;
      }
      break;
    }

    for (var k = 0; k < items.length; k++) {
      var li = el("li");
      var itemLines = items[k].lines;
      while (itemLines.length && isBlank(itemLines[itemLines.length - 1])) itemLines.pop();
      // task list item: "[ ] todo" / "[x] done"
      var task = /^\[([ xX])\][ \t]+/.exec(itemLines[0] || "");
      if (task) {
        itemLines[0] = itemLines[0].slice(task[0].length);
        var box = el("input", "task");
        box.type = "checkbox";
        box.disabled = true;
        box.checked = task[1] !== " ";
        li.appendChild(box);
        li.classList.add("task-item");
      }
      if (depth < MAX_DEPTH) {
        var holder = document.createDocumentFragment();
        renderBlocks(itemLines, holder, depth + 1);
        // tight list: unwrap paragraphs so items don't get paragraph margins
        if (!loose) {
          var kids = Array.prototype.slice.call(holder.childNodes);
          for (var c = 0; c < kids.length; c++) {
            var kid = kids[c];
            if (kid.nodeName === "P") {
              while (kid.firstChild) li.appendChild(kid.firstChild);
              if (c < kids.length - 1 && kids[c + 1].nodeName === "P") li.appendChild(el("br"));
            } else {
              li.appendChild(kid);
            }
          }
        } else {
          li.appendChild(holder);
        }
      } else {
        li.appendChild(text(itemLines.join("\n")));
      }
      list.appendChild(li);
    }
    parent.appendChild(list);
    return i;
  }

  function renderTable(lines, i, parent, depth) {
    var head = splitRow(lines[i]);
    var aligns = splitRow(lines[i + 1]).map(function (d) {
      var l = d.charAt(0) === ":";
      var r = d.charAt(d.length - 1) === ":";
      return l && r ? "center" : r ? "right" : l ? "left" : "";
    });
    i += 2;
    var wrap = el("div", "table-wrap");
    var table = el("table");
    var thead = el("thead");
    var tr = el("tr");
    for (var c = 0; c < head.length; c++) {
      var th = el("th");
      if (aligns[c]) th.className = "align-" + aligns[c];
      renderInline(head[c], th, depth);
      tr.appendChild(th);
    }
    thead.appendChild(tr);
    table.appendChild(thead);
    var tbody = el("tbody");
    while (i < lines.length && !isBlank(lines[i]) && lines[i].indexOf("|") >= 0 && !RE_FENCE_OPEN.test(lines[i])) {
      var cells = splitRow(lines[i]);
      var row = el("tr");
      for (var k = 0; k < head.length; k++) {
        var td = el("td");
        if (aligns[k]) td.className = "align-" + aligns[k];
        renderInline(cells[k] || "", td, depth);
        row.appendChild(td);
      }
      tbody.appendChild(row);
      i++;
    }
    table.appendChild(tbody);
    wrap.appendChild(table);
    parent.appendChild(wrap);
    return i;
  }

  // ---------------------------------------------------------------- inline parser

  var PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

  function isSpace(c) {
    return c === "" || /\s/.test(c);
  }

  function isWordChar(c) {
    return c !== "" && /[\p{L}\p{N}]/u.test(c);
  }

  // Find the closing backtick run of exactly `len` backticks at or after `from`.
  function findCodeClose(s, from, len) {
    var i = from;
    while (i < s.length) {
      var j = s.indexOf("`", i);
      if (j < 0) return -1;
      var run = 1;
      while (s.charAt(j + run) === "`") run++;
      if (run === len) return j;
      i = j + run;
    }
    return -1;
  }

  // Find a closing emphasis run of exactly `len` chars `ch` after `from`.
  function findEmphasisClose(s, from, ch, len) {
    var i = from;
    while (i < s.length) {
      var c = s.charAt(i);
      if (c === "\\") {
        i += 2;
        continue;
      }
      if (c === "`") {
        var run = 1;
        while (s.charAt(i + run) === "`") run++;
        var close = findCodeClose(s, i + run, run);
        i = close < 0 ? i + run : close + run;
        continue;
      }
      if (c === ch) {
        var r = 1;
        while (s.charAt(i + r) === ch) r++;
        var prev = s.charAt(i - 1);
        var next = s.charAt(i + r);
        var canClose = !isSpace(prev) && i > from;
        if (ch === "_" && isWordChar(next)) canClose = false;
        if (canClose && r === len) return i;
        if (canClose && r > len && ch !== "~" && i + r >= s.length) return i + r - len; // "**a***" style endings
        i += r;
        continue;
      }
      i++;
    }
    return -1;
  }

  // Find the index of the "]" matching the "[" at `open`, or -1.
  function findBracketClose(s, open) {
    var level = 0;
    for (var i = open; i < s.length; i++) {
      var c = s.charAt(i);
      if (c === "\\") {
        i++;
      } else if (c === "`") {
        var run = 1;
        while (s.charAt(i + run) === "`") run++;
        var close = findCodeClose(s, i + run, run);
        if (close >= 0) i = close + run - 1;
        else i += run - 1;
      } else if (c === "[") {
        level++;
      } else if (c === "]") {
        level--;
        if (level === 0) return i;
      }
    }
    return -1;
  }

  // Parse "(url "title")" starting at `open` (which holds "("); returns {url, end} or null.
  function parseLinkTarget(s, open) {
    var i = open + 1;
    while (s.charAt(i) === " ") i++;
    var url = "";
    if (s.charAt(i) === "<") {
      var gt = s.indexOf(">", i);
      if (gt < 0) return null;
      url = s.slice(i + 1, gt);
      i = gt + 1;
    } else {
      var level = 0;
      var start = i;
      while (i < s.length) {
        var c = s.charAt(i);
        if (c === "\\") {
          i += 2;
          continue;
        }
        if (c === "(") level++;
        else if (c === ")") {
          if (level === 0) break;
          level--;
        } else if (/\s/.test(c)) break;
        i++;
      }
      url = s.slice(start, i);
    }
    while (s.charAt(i) === " ") i++;
    var q = s.charAt(i);
    if (q === '"' || q === "'") {
      var endq = s.indexOf(q, i + 1);
      if (endq < 0) return null;
      i = endq + 1;
      while (s.charAt(i) === " ") i++;
    }
    if (s.charAt(i) !== ")") return null;
    return { url: url.replace(/\\(.)/g, "$1"), end: i + 1 };
  }

  var RE_BARE_URL = /^https?:\/\/[^\s<>"'`]+/i;

  function trimUrlTail(u) {
    // drop trailing punctuation and unbalanced closing parens / brackets
    for (;;) {
      var last = u.charAt(u.length - 1);
      if (/[.,;:!?*_~]/.test(last)) {
        u = u.slice(0, -1);
        continue;
      }
      if (last === ")" || last === "]") {
        var open = last === ")" ? "(" : "[";
        var opens = u.split(open).length - 1;
        var closes = u.split(last).length - 1;
        if (closes > opens) {
          u = u.slice(0, -1);
          continue;
        }
      }
      return u;
    }
  }

  function renderInline(s, parent, depth, noLinks) {
    var buf = "";
    function flush() {
      if (buf) {
        parent.appendChild(text(buf));
        buf = "";
      }
    }
    var i = 0;
    var n = s.length;
    while (i < n) {
      var c = s.charAt(i);

      // backslash escape / hard break
      if (c === "\\") {
        var nx = s.charAt(i + 1);
        if (nx && PUNCT.indexOf(nx) >= 0) {
          buf += nx;
          i += 2;
          continue;
        }
        if (nx === "\n") {
          flush();
          parent.appendChild(el("br"));
          i += 2;
          continue;
        }
        buf += c;
        i++;
        continue;
      }

      // line break (chat-style: every newline inside a paragraph is a break)
      if (c === "\n") {
        buf = buf.replace(/[ \t]+$/, "");
        flush();
        parent.appendChild(el("br"));
        i++;
        while (s.charAt(i) === " " || s.charAt(i) === "\t") i++;
        continue;
      }

      // code span
      if (c === "`") {
        var run = 1;
        while (s.charAt(i + run) === "`") run++;
        var close = findCodeClose(s, i + run, run);
        if (close >= 0) {
          var inner = s.slice(i + run, close).replace(/\n/g, " ");
          if (inner.length > 2 && inner.charAt(0) === " " && inner.charAt(inner.length - 1) === " " && inner.trim()) {
            inner = inner.slice(1, -1);
          }
          flush();
          var code = el("code");
          code.textContent = inner;
          parent.appendChild(code);
          i = close + run;
          continue;
        }
        buf += s.substr(i, run);
        i += run;
        continue;
      }

      // literal <br> (common in model-written tables) and <autolinks>
      if (c === "<") {
        var br = /^<br\s*\/?>/i.exec(s.slice(i, i + 6));
        if (br) {
          flush();
          parent.appendChild(el("br"));
          i += br[0].length;
          continue;
        }
        var gt = s.indexOf(">", i);
        if (gt > i && !noLinks) {
          var auto = safeUrl(s.slice(i + 1, gt));
          if (auto && !/\s/.test(s.slice(i + 1, gt))) {
            flush();
            var al = makeLink(auto);
            al.textContent = s.slice(i + 1, gt);
            parent.appendChild(al);
            i = gt + 1;
            continue;
          }
        }
        buf += c;
        i++;
        continue;
      }

      // links and images: [text](url) / ![alt](url)
      if ((c === "[" || (c === "!" && s.charAt(i + 1) === "[")) && !noLinks) {
        var isImage = c === "!";
        var openB = isImage ? i + 1 : i;
        var closeB = findBracketClose(s, openB);
        if (closeB > openB && s.charAt(closeB + 1) === "(") {
          var target = parseLinkTarget(s, closeB + 1);
          if (target) {
            var label = s.slice(openB + 1, closeB);
            var href = safeUrl(target.url);
            flush();
            if (href) {
              var a = makeLink(href);
              if (isImage) {
                a.className = "image-link";
                a.textContent = label ? "[image: " + label + "]" : "[image]";
              } else if (label.trim()) {
                if (depth < MAX_DEPTH) renderInline(label, a, depth + 1, true);
                else a.textContent = label;
              } else {
                a.textContent = href;
              }
              a.title = href;
              parent.appendChild(a);
            } else {
              // not an http(s) link: keep only the visible text
              var span = el("span", "unsafe-link");
              if (isImage) span.textContent = label ? "[image: " + label + "]" : "[image]";
              else if (depth < MAX_DEPTH) renderInline(label, span, depth + 1, true);
              else span.textContent = label;
              parent.appendChild(span);
            }
            i = target.end;
            continue;
          }
        }
        buf += isImage ? "![" : "[";
        i += isImage ? 2 : 1;
        continue;
      }

      // bare URLs
      if ((c === "h" || c === "H") && !noLinks && !isWordChar(s.charAt(i - 1))) {
        var um = RE_BARE_URL.exec(s.slice(i, i + 2048));
        if (um) {
          var raw = trimUrlTail(um[0]);
          var bare = safeUrl(raw);
          if (bare && raw.length > 8) {
            flush();
            var bl = makeLink(bare);
            bl.textContent = raw;
            parent.appendChild(bl);
            i += raw.length;
            continue;
          }
        }
      }

      // emphasis: * _ ~~
      if (c === "*" || c === "_" || c === "~") {
        var r = 1;
        while (s.charAt(i + r) === c) r++;
        var after = s.charAt(i + r);
        var before = s.charAt(i - 1);
        var canOpen = !isSpace(after) && depth < MAX_DEPTH;
        if (c === "_" && isWordChar(before)) canOpen = false; // snake_case_names
        if (c === "~" && r !== 2) canOpen = false;
        if (r > 3) canOpen = false; // "****" is just text
        if (canOpen) {
          var len = c === "~" ? 2 : Math.min(r, 3);
          var extra = r - len; // e.g. "****" -> treat the surplus as text
          var closeAt = findEmphasisClose(s, i + r, c, len);
          // "5*3*2", "a*b*c": a lone * between letters or digits on both ends is math, not emphasis
          if (closeAt >= 0 && c === "*" && len === 1 && isWordChar(before) && isWordChar(s.charAt(closeAt + 1))) closeAt = -1;
          if (closeAt >= 0) {
            buf += s.substr(i, extra);
            flush();
            var node;
            var innerHost;
            if (c === "~") {
              node = innerHost = el("del");
            } else if (len === 3) {
              node = el("strong");
              innerHost = el("em");
              node.appendChild(innerHost);
            } else {
              node = innerHost = el(len === 2 ? "strong" : "em");
            }
            renderInline(s.slice(i + r, closeAt), innerHost, depth + 1, noLinks);
            parent.appendChild(node);
            i = closeAt + len;
            continue;
          }
        }
        buf += s.substr(i, r);
        i += r;
        continue;
      }

      buf += c;
      i++;
    }
    flush();
  }

  // ---------------------------------------------------------------- entry point

  function renderMarkdown(source) {
    var frag = document.createDocumentFragment();
    var s = String(source == null ? "" : source).replace(/\r\n?/g, "\n").replace(/\u0000/g, "\uFFFD");
    renderBlocks(s.split("\n"), frag, 0);
    return frag;
  }

  var api = { renderMarkdown: renderMarkdown, safeUrl: safeUrl };
  global.LlmpackMarkdown = api;
  if (typeof module !== "undefined" && module.exports) module.exports = api;
})(typeof window !== "undefined" ? window : this);
