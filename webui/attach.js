// Attachments: files picked with the paperclip or dropped anywhere on the page become chips in
// the composer (name, size, words), each removable. The server reads them (POST /v1/extract:
// text, PDF, DOCX) and says how many tokens each takes; the meter shows how much of what the model
// can read at once they fill, and when they do not fit, sending asks first: the first N pages, or
// cancel. Files that cannot be attached say so above the chips, in plain words (errors.js), with
// the app's own message in a Details fold. Token counts stay in tooltips and Details.
//
// A sent user message keeps its attachments ({name, kind, size, tokens, text, note}); requests
// carry them as OpenAI `file` parts holding the extracted text, and the server writes them into
// the prompt (documents.format_message), so the page and the API send the same thing.
//
// A file too long to read whole is not cut: the server indexes it when it is read (/v1/extract
// answers `searched: true` and its `file_id`), and for each question the model reads the parts
// that match it (readparts.js shows which). Such a file costs the composer's meter only its
// one-line stand-in; its saved message keeps the file_id (the index) and the text (an export).
import { ApiError } from "./api.js";
import { audioDoc, audioPart, clipIcon, isAudio, wireMicrophone } from "./audio.js";
import { attachError } from "./errors.js";
import { apiKey } from "./settings.js";
import { state, ui } from "./state.js";
import { el, toast } from "./util.js";
import { countOf, fmtNumber, roughWords, wordCount } from "./words.js";

const MAX_FILE_BYTES = 32 * 1024 * 1024;   // documents.MAX_FILE_BYTES
const NOTE_TOKENS = 48;
const STAND_IN_TOKENS = 40;   // documents/reading.py's one-line stand-in for a searched file
const IMAGE = /\.(png|jpe?g|gif|webp|bmp|tiff?|heic|heif|avif)$/i;
const TAKEN = /^image\/(png|jpeg|webp|gif)$/;   // what the server's vision path reads (runtime/engine/images.py)
const PICTURE_SIDE = 1536;          // pictures are scaled down to this many pixels a side, as JPEG
const PICTURE_KEEP_BYTES = 1024 * 1024;   // a smaller PNG/JPEG/WebP/GIF within the side is sent as it is
const pending = [];     // {id, name, size, status: "reading"|"ready", doc?, chip}; doc.words: counted here
let onChange = () => {};
let nextId = 1;

export function fmtSize(n) {
  if (n >= 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + " MB";
  if (n >= 1024) return Math.round(n / 1024) + " KB";
  return n + " B";
}

/** The composer's attachments that are read and ready. */
export function readyFiles() {
  return pending.filter((p) => p.status === "ready");
}

export function isReading() {
  return pending.some((p) => p.status === "reading");
}

export function hasFiles() {
  return pending.length > 0;
}

function budget() {
  const withBudget = pending.find((p) => p.doc && p.doc.budget);
  return withBudget ? withBudget.doc.budget : Math.max(state.nCtx - 1024, Math.floor(state.nCtx / 2));
}

/** Tokens a file takes of the budget: all of it, or the stand-in of a file that is searched. */
function costOf(doc) {
  return doc.searched ? STAND_IN_TOKENS : doc.tokens;
}

function totalTokens() {
  return readyFiles().reduce((n, p) => n + costOf(p.doc), 0);
}

function totalWords() {
  return readyFiles().reduce((n, p) => n + p.doc.words, 0);
}

const tokens = (n) => countOf(n, "token", "tokens");
const words = (n) => countOf(n, "word", "words");

/** "The files fill 3% of what the model can read at once", with the token figures as its tooltip. */
function meterWords(used, limit) {
  const share = Math.max(1, Math.round((100 * used) / Math.max(1, limit)));
  const files = readyFiles().length === 1 ? "This file" : "The files";
  ui.attachMeter.title = tokens(used) + " of the " + tokens(limit) + " this model keeps for files " +
    "(its context window is " + tokens(state.nCtx) + ").";
  if (used > limit) {
    return "Too long: " + files.toLowerCase() + " need " + share + "% of what the model can read at once · sending will ask what to keep";
  }
  const searched = readyFiles().filter((p) => p.doc.searched);
  if (searched.length) {
    const names = searched.length === 1 ? searched[0].name + " is" : searched.length + " files are";
    return names + " too long to read whole: for each question, the model reads the parts that match it";
  }
  return files + (files === "This file" ? " fills " : " fill ") + share + "% of what the model can read at once";
}

function render() {
  ui.attachments.hidden = pending.length === 0 && ui.attachProblems.childElementCount === 0;
  ui.attachChips.replaceChildren(...pending.map((p) => p.chip));
  ui.attachFit.hidden = pending.length === 0;
  const used = totalTokens();
  const limit = budget();
  const over = used > limit;
  ui.attachMeter.title = "";
  ui.attachMeter.textContent = pending.length === 0 ? "" : isReading() ? "Reading…" : meterWords(used, limit);
  ui.attachMeter.classList.toggle("warn", over);
  ui.attachBar.style.width = Math.min(100, (100 * used) / Math.max(1, limit)) + "%";
  ui.attachBar.classList.toggle("over", over);
  onChange();
}

function chipFor(p) {
  const chip = el("span", "chip");
  chip.setAttribute("data-testid", "attachment-chip");
  chip.appendChild(el("span", "chip-icon", p.name.split(".").pop().slice(0, 4).toUpperCase() || "FILE"));
  p.icon = chip.lastChild;
  const label = el("span", "chip-text");
  label.appendChild(el("span", "chip-name", p.name));
  const meta = el("span", "chip-meta");
  meta.setAttribute("data-testid", "attachment-meta");
  label.appendChild(meta);
  chip.appendChild(label);
  const remove = el("button", "chip-remove", "×");
  remove.type = "button";
  remove.title = "Remove " + p.name;
  remove.setAttribute("aria-label", "Remove " + p.name);
  remove.setAttribute("data-testid", "attachment-remove");
  remove.addEventListener("click", () => removeFile(p.id));
  chip.appendChild(remove);
  chip.title = p.name;
  p.chip = chip;
  p.meta = meta;
  updateChip(p);
  return chip;
}

function updateChip(p) {
  const parts = [fmtSize(p.size)];
  if (p.status === "reading") parts.push("reading…");
  else if (p.doc && p.doc.kind === "image") parts.push(p.doc.note || "picture");
  else if (p.doc && p.doc.audio_url) parts.push(p.doc.note);   // the clip's length, m:ss
  else if (p.doc) parts.push(words(p.doc.words));
  if (p.doc && p.doc.searched) parts.push("read in parts");
  p.meta.textContent = parts.join(" · ");
  if (p.doc && p.doc.data_url && p.icon) p.icon.replaceWith(p.icon = thumbnail(p.doc));
  if (p.doc && p.doc.audio_url && p.icon) p.icon.replaceWith(p.icon = clipIcon(el));
  p.chip.title = p.doc ? p.name + ": " + words(p.doc.words) + ", " + tokens(p.doc.tokens) + " for the model" : p.name;
  p.chip.classList.toggle("reading", p.status === "reading");
}

/** A file that was not attached: what happened and what to do; `detail` goes in a Details fold.
 * `testid` names other notes shown in the same place (a file the index forgot). */
function addProblem(text, detail, testid = "attach-problem") {
  const box = el("div", "attach-problem");
  box.setAttribute("role", testid === "attach-problem" ? "alert" : "status");
  box.setAttribute("data-testid", testid);
  box.classList.toggle("note", testid !== "attach-problem");
  const line = el("p", "attach-problem-text", text);
  if (detail) {
    const more = el("details", "notice-detail");
    more.append(el("summary", "", "Details"), el("code", "", detail));
    line.append(" ", more);
  }
  const close = el("button", "chip-remove", "×");
  close.type = "button";
  close.setAttribute("aria-label", "Hide this message");
  close.title = "Hide this message";
  close.addEventListener("click", () => {
    box.remove();
    render();
  });
  box.append(line, close);
  ui.attachProblems.appendChild(box);
}

function clearProblems() {
  ui.attachProblems.replaceChildren();
}

function removeFile(id) {
  const i = pending.findIndex((p) => p.id === id);
  if (i >= 0) pending.splice(i, 1);
  render();
}

export function clearFiles() {
  pending.length = 0;
  clearProblems();
  render();
}

/** Refusals the page can make at once, without sending the file. */
function refusal(file) {
  if (file.size > MAX_FILE_BYTES) {
    return file.name + " is " + fmtSize(file.size) + "; files can be at most 32 MB. Attach a shorter part of it.";
  }
  if (isPicture(file)) {
    if (!state.vision && state.hears) {
      return file.name + " is a picture; this model hears but cannot see (its projector has no vision encoder). "
        + "Attach a sound file, a PDF, a Word file (.docx) or a text file.";
    }
    if (!state.vision) {
      return file.name + " is a picture; this model reads only text (it was started without a vision projector). "
        + "Attach a PDF, a Word file (.docx) or a text file.";
    }
    if (!TAKEN.test(file.type)) return file.name + " is a kind of picture this model cannot read; send a PNG, JPEG, WebP or GIF.";
  }
  if (isAudio(file) && !state.hears) {
    return file.name + " is a sound file; this model cannot hear (it was started without an audio projector). "
      + "Attach a PDF, a Word file (.docx) or a text file.";
  }
  return "";
}

const isPicture = (file) => (file.type && file.type.startsWith("image/")) || IMAGE.test(file.name);

function readDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error || new Error("the file could not be read"));
    r.readAsDataURL(blob);
  });
}

/** A picture as a data: URL the model can read: as it is when small, else scaled down to
 * PICTURE_SIDE pixels a side as a JPEG, which also keeps saved chats small. */
async function pictureDoc(file) {
  let bmp;
  try {
    bmp = await createImageBitmap(file);   // the first frame of a GIF
  } catch (err) {
    throw new Error(file.name + " could not be opened as a picture; it may be damaged.");
  }
  const { width, height } = bmp;
  const scale = Math.min(1, PICTURE_SIDE / Math.max(width, height));
  let url;
  if (scale === 1 && file.size <= PICTURE_KEEP_BYTES) {
    url = await readDataUrl(file);
  } else {
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(width * scale));
    canvas.height = Math.max(1, Math.round(height * scale));
    const g = canvas.getContext("2d");
    g.fillStyle = "#fff";   // transparent areas become white, not black, in a JPEG
    g.fillRect(0, 0, canvas.width, canvas.height);
    g.drawImage(bmp, 0, 0, canvas.width, canvas.height);
    url = canvas.toDataURL("image/jpeg", 0.9);
  }
  bmp.close();
  const note = scale < 1 ? "scaled down from " + width + " × " + height : "";
  return { name: file.name, kind: "image", size: Math.round((url.length - url.indexOf(",") - 1) * 0.75), tokens: 0,
    text: "", words: 0, note, data_url: url, segments: [], unit: "part" };
}

export async function addFiles(files) {
  clearProblems();   // the last attempt's messages give way to this one's
  render();
  for (const file of files) {
    const why = refusal(file);
    if (why) {
      addProblem(why);
      render();
      continue;
    }
    const p = { id: nextId++, name: file.name || "attachment", size: file.size, status: "reading", doc: null };
    chipFor(p);
    pending.push(p);
    render();
    try {
      p.doc = isPicture(file) ? await pictureDoc(file) : isAudio(file) ? await audioDoc(file, p.name) : await extract(file);
      p.doc.words = wordCount(p.doc.text);
      p.status = "ready";
      updateChip(p);
      if (p.doc.forgot && p.doc.forgot.length) addProblem(forgotWords(p.doc), undefined, "index-forgot");
    } catch (err) {
      const plain = attachError(p.name, err);
      addProblem(plain.text, plain.detail);
      removeFile(p.id);
      continue;
    }
    render();
  }
}

/** The index of long files on this computer is bounded: what it forgot to make room for `doc`. */
function forgotWords(doc) {
  const names = doc.forgot.map((n) => "“" + n + "”");
  const list = names.length === 1 ? names[0] : names.slice(0, -1).join(", ") + " and " + names[names.length - 1];
  return "To make room for " + doc.name + ", this computer forgot its copy of " + list +
    " (the long files used longest ago): it keeps at most " + fmtSize(doc.index_cap) + " of long files' text. " +
    "Chats that used " + (names.length === 1 ? "it" : "them") + " still have the text and send it again when you go on.";
}

async function extract(file) {
  const headers = { "Content-Type": file.type || "application/octet-stream", "X-Filename": encodeURIComponent(file.name) };
  if (apiKey()) headers.Authorization = "Bearer " + apiKey();
  const resp = await fetch("/v1/extract", { method: "POST", headers, body: file, cache: "no-store" });
  const data = await resp.json().catch(() => null);
  if (!resp.ok) {
    const msg = data && data.error && data.error.message;
    throw new ApiError(msg || "HTTP " + resp.status, resp.status);
  }
  return data;
}

// ------------------------------------------------------------------ fitting the context

/** How many segments (pages, parts) of `doc` fit in `room` tokens. */
function segmentsThatFit(doc, room) {
  let used = doc.tokens - doc.segments.reduce((n, s) => n + s.tokens, 0);   // the heading
  let n = 0;
  for (const s of doc.segments) {
    if (used + s.tokens > room) break;
    used += s.tokens;
    n += 1;
  }
  return n;
}

/** A plan to fit the files: cut the largest one to its first N segments. null: nothing fits. */
function fitPlan() {
  const files = readyFiles().filter((p) => !p.doc.searched);
  if (!files.length) return null;
  const largest = files.reduce((a, b) => (b.doc.tokens > a.doc.tokens ? b : a));
  // less room for the note the cut adds to the file's heading ("first 12 of 40 pages")
  const room = budget() - (totalTokens() - largest.doc.tokens) - NOTE_TOKENS;
  const n = room > 0 ? segmentsThatFit(largest.doc, room) : 0;
  return n > 0 ? { file: largest, n } : null;
}

function cut(p, n) {
  const d = p.doc;
  const chars = d.segments.slice(0, n).reduce((k, s) => k + s.chars, 0);
  const unit = d.unit === "page" ? "page" : "part";
  // PDF pages are joined by a blank line; parts are consecutive slices of the text
  const sep = d.unit === "page" ? 2 : 0;
  d.text = d.text.slice(0, chars + sep * Math.max(0, n - 1)).trimEnd();
  d.note = unit === "page" ? "first " + n + " of " + d.segments.length + " pages"
    : "first " + Math.round((100 * chars) / Math.max(1, d.segments.reduce((k, s) => k + s.chars, 0))) + "% of the text";
  d.tokens = d.tokens - d.segments.slice(n).reduce((k, s) => k + s.tokens, 0);
  d.words = wordCount(d.text);
  d.segments = d.segments.slice(0, n);
  updateChip(p);
}

/** Resolves true to send (after any cut the user chose), false to keep editing. */
export function confirmFit() {
  if (totalTokens() <= budget()) return Promise.resolve(true);
  const plan = fitPlan();
  const files = readyFiles();
  const what = files.length === 1 ? files[0].name + " has " : "The " + files.length + " files have ";
  // the words the model can read, at these files' own words per token
  const room = roughWords(budget(), totalWords() / Math.max(1, totalTokens()));
  ui.fitText.textContent = what + words(totalWords()) + ", but this model can read about " + fmtNumber(room)
    + " words of files at once.";
  ui.fitDetail.textContent = tokens(totalTokens()) + " of files; this model keeps " + tokens(budget())
    + " of its context window (" + tokens(state.nCtx) + ") for files.";
  if (plan) {
    const d = plan.file.doc;
    const unit = d.unit === "page" ? (plan.n === 1 ? "page" : "pages") : (plan.n === 1 ? "part" : "parts");
    ui.fitCut.textContent = d.unit === "page" ? "Send the first " + plan.n + " " + unit + " of " + plan.file.name
      : "Send the first " + plan.n + " of " + d.segments.length + " " + unit + " of " + plan.file.name;
    ui.fitCut.hidden = false;
  } else {
    ui.fitText.textContent += " Remove a file, or attach a shorter part.";
    ui.fitCut.hidden = true;
  }
  return new Promise((resolve) => {
    const done = (ok) => {
      ui.fitCut.onclick = ui.fitCancel.onclick = ui.fitDialog.oncancel = null;
      ui.fitDialog.close();
      if (ok) cut(plan.file, plan.n);
      render();
      resolve(ok);
    };
    ui.fitCut.onclick = () => done(true);
    ui.fitCancel.onclick = () => done(false);
    ui.fitDialog.oncancel = (ev) => { ev.preventDefault(); done(false); };
    ui.fitDialog.showModal();
    ui.fitCut.hidden ? ui.fitCancel.focus() : ui.fitCut.focus();
  });
}

/** Put a message's files back into the composer (its reply failed), as they were sent. */
export function restoreFiles(files) {
  for (const a of files || []) {
    const doc = { name: a.name, kind: a.kind, size: a.size, tokens: a.tokens, text: a.text, note: a.note,
      unit: "part", segments: a.data_url || a.audio_url ? [] : [{ chars: a.text.length, tokens: a.tokens }],
      budget: budget(), words: wordCount(a.text), file_id: a.file_id, searched: !!a.file_id, data_url: a.data_url,
      audio_url: a.audio_url };
    const p = { id: nextId++, name: a.name, size: a.size || 0, status: "ready", doc };
    chipFor(p);
    pending.push(p);
  }
  render();
}

/** What a sent message keeps of the composer's files. */
export function takeFiles() {
  const out = readyFiles().map((p) => {
    const d = p.doc;
    const a = { name: d.name, kind: d.kind, size: d.size, tokens: d.tokens, text: d.text };
    if (d.note) a.note = d.note;
    if (d.data_url) a.data_url = d.data_url;
    if (d.audio_url) a.audio_url = d.audio_url;
    if (d.searched && d.file_id) {
      a.file_id = d.file_id;
      a.note = "read in parts";
    }
    return a;
  });
  clearFiles();
  return out;
}

// ------------------------------------------------------------------ requests

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
    const data = "data:text/plain;base64," + base64Utf8(a.text);
    if (a.file_id) {   // searched: the index has its pages; the text is there in case it does not any more
      return { type: "file", file: { filename: a.name, file_id: a.file_id, file_data: data, read: "auto" } };
    }
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
function thumbnail(a) {
  const img = el("img", "chip-thumb");
  img.src = a.data_url;
  img.alt = a.name;
  img.setAttribute("data-testid", "attachment-thumbnail");
  return img;
}

// ------------------------------------------------------------------ wiring

export function wireAttachments(changed) {
  onChange = changed;
  ui.attach.addEventListener("click", () => ui.attachFile.click());
  wireMicrophone((file) => addFiles([file]), (text, detail) => { addProblem(text, detail); render(); });
  ui.prompt.addEventListener("paste", (ev) => {   // a screenshot pasted into the message box
    const files = [...((ev.clipboardData && ev.clipboardData.files) || [])];
    if (!files.length || ui.app.classList.contains("completion-mode")) return;
    ev.preventDefault();
    addFiles(files);
  });
  ui.attachFile.addEventListener("change", () => {
    const files = [...(ui.attachFile.files || [])];
    ui.attachFile.value = "";
    addFiles(files);
  });
  let depth = 0;
  const hasFilesIn = (ev) => ev.dataTransfer && [...ev.dataTransfer.types].includes("Files");
  document.addEventListener("dragenter", (ev) => {
    if (!hasFilesIn(ev) || ui.app.hidden || ui.app.classList.contains("completion-mode")) return;
    depth += 1;
    ui.app.classList.add("dropping");
  });
  document.addEventListener("dragleave", (ev) => {
    if (!hasFilesIn(ev)) return;
    depth = Math.max(0, depth - 1);
    if (!depth) ui.app.classList.remove("dropping");
  });
  document.addEventListener("dragover", (ev) => {
    if (hasFilesIn(ev)) ev.preventDefault();   // allow dropping anywhere, never navigate to the file
  });
  document.addEventListener("drop", (ev) => {
    if (!hasFilesIn(ev)) return;
    ev.preventDefault();
    depth = 0;
    ui.app.classList.remove("dropping");
    if (ui.app.hidden) return;
    if (ui.app.classList.contains("completion-mode")) {
      toast("Attachments work in Chat mode.", undefined, undefined, 5000);
      return;
    }
    addFiles([...ev.dataTransfer.files]);
  });
  render();
}
