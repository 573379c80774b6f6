"""A saved chat as a file: JSON (the whole tree, which import reads back) or a Markdown
transcript of the branch shown, and the name the file is offered under."""
from __future__ import annotations

import html
import re
import time
import unicodedata
from urllib.parse import quote

from llmpack.runtime.chats.chat_shape import EXPORT_FORMAT, branch
from llmpack.runtime.chats.chat_sources import markdown_lines, plain
from llmpack.runtime.chats.chat_tools import markdown_lines as tool_lines


def to_json(chat: dict, model_name: str) -> dict:
    """The export format (ChatStore.import_chat reads it back): every message of every branch,
    the branch shown (`leaf`) and the chat's own system prompt."""
    out = {"format": EXPORT_FORMAT, "version": 2 if chat.get("leaf") else 1, "model": model_name,
           "title": chat["title"], "mode": chat["mode"], "created": chat["created"], "updated": chat["updated"],
           "messages": chat["messages"]}
    for key in ("leaf", "system"):
        if chat.get(key) is not None:
            out[key] = chat[key]
    return out


def to_markdown(chat: dict, model_name: str) -> str:
    """A readable transcript of the branch shown: title, model, then each turn under a heading."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat["updated"] / 1000))
    # the title may be attached files' names (webui/app.js titleFrom): plain text, as every name below (issue 46)
    out = [f"# {plain(chat['title'])}", "", f"*{model_name} · {when}*", ""]
    shown = branch(chat)
    if chat["mode"] == "complete":   # a text completion is one document
        out += [close_fences("".join(m["content"] for m in shown)), ""]
        return "\n".join(out)
    if chat.get("system"):
        out += ["## Instructions", "", close_fences(chat["system"].rstrip()), ""]
    names = {"user": "You", "assistant": model_name, "system": "System"}
    for m in shown:
        out += [f"## {names[m['role']]}", ""]
        for f in m.get("attachments", []):   # the name, with the text folded away; a picture or clip as itself
            if f.get("data_url"):
                out += [f"![{plain(f['name'])}]({f['data_url']})", ""]   # chat_shape: a data:image/ URL
                continue
            if f.get("audio_url"):           # a player where the viewer renders HTML, the name and length elsewhere
                label = f["name"] + (f" ({f['note']})" if f.get("note") else "")
                title, words = _attribute(label), plain(label)   # an attribute; then text Markdown reads
                out += [f'<audio controls src="{f["audio_url"]}" title="{title}">Sound: {words}</audio>', ""]
                continue
            # one line of an HTML block: entities only (Markdown is not read there), and no line break, which
            # would end the block and let the rest of the name be read as Markdown
            out += [f"<details><summary>Attached: {_attribute(f['name'])}</summary>", "", "````text",
                    f["text"].replace("````", "` ` ` `"), "````", "", "</details>", ""]
        out += tool_lines(m.get("rounds") or [])         # the tool calls before the answer, folded
        out += [close_fences(m["content"].rstrip()), ""]
        out += markdown_lines(m.get("sources") or [])   # the server's, under the reply
    return "\n".join(out)


def _attribute(text: str) -> str:
    """A name inside HTML (an attribute, or a line of an HTML block): entities, on one line."""
    return html.escape(" ".join(text.split()))


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def close_fences(text: str) -> str:
    """`text` with a code fence left open (a reply cut off inside a code block) closed at its
    end, so the turns after it are not read as code. Fences as CommonMark has them: three or more
    backticks or tildes, closed by at least as many of the same; a backtick fence's info string
    holds no backtick."""
    opener = ""
    for line in text.splitlines():
        m = _FENCE.fullmatch(line)
        if m is None:
            continue
        fence, rest = m.groups()
        if not opener:
            if not (fence[0] == "`" and "`" in rest):
                opener = fence
        elif fence[0] == opener[0] and len(fence) >= len(opener) and not rest.strip():
            opener = ""
    return f"{text}\n{opener}" if opener else text


def export_name(chat: dict, ext: str) -> str:
    """The file name an export is offered under: the title's letters, digits, '-' and '_' (in any
    script: titles come from the first message, in whatever language the user writes)."""
    stem = "-".join(re.sub(r"[^\w\- ]+", "", chat["title"]).split())[:60] or "chat"
    return f"{stem}.{ext}"


def content_disposition(name: str) -> str:
    """`attachment` with RFC 6266's two names: `filename*=UTF-8''...` (RFC 5987, percent-encoded:
    HTTP headers are Latin-1, so the raw name of a Russian or emoji title cannot be sent) and an
    ASCII `filename` for clients that know no better (accents dropped, other letters lost)."""
    stem, dot, ext = name.rpartition(".")
    ascii_stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode()
    ascii_stem = re.sub(r"[^A-Za-z0-9_\-]+", "", ascii_stem).strip("-") or "chat"
    fallback = f"{ascii_stem}{dot}{ext}"
    if fallback == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
