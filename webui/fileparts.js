// A sent message's files: as a request sends them (OpenAI `file` parts; a file the server read
// goes by its file_id alone, so a chat never re-sends its text, and a PDF read whole keeps its
// pages as the server read them), and as chips on the sent message.
import { audioPart, clipIcon } from "./audio.js";
import { fmtSize } from "./upload.js";
import { el } from "./util.js";
import { countOf, wordCount } from "./words.js";

const tokens = (n) => countOf(n, "token", "tokens");
const words = (n) => countOf(n, "word", "words");


function base64Utf8(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** A message's content for /v1/chat/completions: text, or text and `file` parts. */
export function requestContent(m) {
  if (!m.attachments || !m.attachments.length) return m.content;
  const parts = m.attachments.map((a) => {
    if (a.data_url) return { type: "image_url", image_url: { url: a.data_url } };   // a picture (vision models)
    if (a.audio_url) return audioPart(a);                                            // a clip (models that hear)
    if (a.file_id) {   // in the index: by its file_id alone, read whole or searched as when it was sent
      return { type: "file", file: { filename: a.name, file_id: a.file_id, read: a.read === "whole" ? "whole" : "auto" } };
    }
    // no file_id (cut to its first pages, or saved before the index kept every file): its text
    const data = "data:text/plain;base64," + base64Utf8(a.text);
    return { type: "file", file: { filename: a.note ? a.name + " (" + a.note + ")" : a.name, file_data: data, read: "whole" } };
  });
  if (m.content) parts.push({ type: "text", text: m.content });
  return parts;
}

/** Chips (not removable) shown on a sent message. */
export function sentChips(m) {
  const box = el("div", "message-files");
  for (const a of m.attachments || []) {
    const chip = el("span", "chip sent");
    chip.setAttribute("data-testid", "sent-attachment");
    chip.appendChild(a.data_url ? thumbnail(a) : a.audio_url ? clipIcon(el)
      : el("span", "chip-icon", a.name.split(".").pop().slice(0, 4).toUpperCase()));
    const label = el("span", "chip-text");
    label.appendChild(el("span", "chip-name", a.name));
    const n = wordCount(a.text);
    const meta = [a.size ? fmtSize(a.size) : "", a.text ? words(n) : a.data_url ? "picture" : a.audio_url ? "sound" : "",
      a.note || ""];
    label.appendChild(el("span", "chip-meta", meta.filter(Boolean).join(" · ")));
    chip.appendChild(label);
    chip.title = a.name + (a.tokens ? ": " + words(n) + ", " + tokens(a.tokens) + " for the model" : "");
    box.appendChild(chip);
  }
  return box;
}

/** A picture's thumbnail, for a chip in the composer or on a sent message. */
export function thumbnail(a) {
  const img = el("img", "chip-thumb");
  img.src = a.data_url;
  img.alt = a.name;
  img.setAttribute("data-testid", "attachment-thumbnail");
  return img;
}
