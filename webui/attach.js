// Attachments: files picked with the paperclip or dropped anywhere on the page become chips in
// the composer (name, size, words), each removable. The server reads them (POST /v1/extract:
// text, PDF, DOCX) and says how many tokens each takes; the meter shows how much of what the model
// can read at once they fill, and when they do not fit, sending asks first: the first N pages, or
// cancel. Files that cannot be attached say so above the chips, in plain words (errors.js), with
// the app's own message in a Details fold. Token counts stay in tooltips and Details.
//
// A sent user message keeps its attachments ({name, kind, size, tokens, text, note, file_id?});
// requests carry them as OpenAI `file` parts (fileparts.js), and the server writes them into the
// prompt (documents.format_message), so the page and the API send the same thing. The jobs are
// split: upload.js reads a file (the server's /v1/extract, pictures in the page), fit.js asks
// what to keep when files do not fit, fileparts.js builds requests and sent chips.
//
// The server keeps every file it reads in its index (/v1/extract answers its `file_id`), and the
// page sends that id, never the text, from then on: read whole, or searched (`read: "auto"`). A
// file too long to read whole is not cut: /v1/extract answers `searched: true`, and for each
// question the model reads the parts that match it (readparts.js shows which). Such a file costs
// the composer's meter only its one-line stand-in; its saved message keeps the file_id (the
// index) and the text (an export).
import { audioDoc, clipIcon, isAudio, wireMicrophone } from "./audio.js";
import { attachError } from "./errors.js";
import { thumbnail } from "./fileparts.js";
import * as fitting from "./fit.js";
import { state, ui } from "./state.js";
import { extract, fmtSize, isPicture, pictureDoc, refusal } from "./upload.js";
import { el, toast } from "./util.js";
import { countOf, wordCount } from "./words.js";

export { requestContent, sentChips } from "./fileparts.js";
const SHOW_WAIT_S = 3;  // a file still being read after this long shows the seconds so far on its chip
const pending = [];     // {id, name, size, status: "reading"|"ready", doc?, chip}; doc.words: counted here
let onChange = () => {};
let nextId = 1;

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

/** Tokens the server lets files take (core/attachments.budget, served in /health). */
function budget() {
  const withBudget = pending.find((p) => p.doc && p.doc.budget);
  if (withBudget) return withBudget.doc.budget;
  return (state.attach && state.attach.budget) || Math.max(state.nCtx - 1024, Math.floor(state.nCtx / 2));
}

/** Tokens a file takes of the budget: all of it, or the stand-in of a file that is searched. */
function costOf(doc) {
  return doc.searched ? ((state.attach && state.attach.stand_in_tokens) || 40) : doc.tokens;
}

function totalTokens() {
  return readyFiles().reduce((n, p) => n + costOf(p.doc), 0);
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
  if (p.status === "reading") {   // a long manual takes a minute on a slow computer: show that it goes on
    const s = Math.floor((Date.now() - p.began) / 1000);
    parts.push(s >= SHOW_WAIT_S ? "reading… " + s + " s" : "reading…");
  } else if (p.doc && p.doc.kind === "image") parts.push(p.doc.note || "picture");
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
function addProblem(text, detail, testid = "attach-problem", action = null) {
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
  if (action) {   // one thing the note offers to do ("Read the whole file")
    const act = el("button", "attach-action", action.label);
    act.type = "button";
    act.setAttribute("data-testid", testid + "-action");
    act.addEventListener("click", () => {
      action.run();
      box.remove();
      render();
    });
    line.append(" ", act);
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
    const p = { id: nextId++, name: file.name || "attachment", size: file.size, status: "reading", doc: null,
      began: Date.now() };
    chipFor(p);
    pending.push(p);
    render();
    const ticking = setInterval(() => updateChip(p), 1000);
    try {
      p.doc = isPicture(file) ? await pictureDoc(file) : isAudio(file) ? await audioDoc(file, p.name) : await extract(file);
      p.doc.words = wordCount(p.doc.text);
      p.status = "ready";
      updateChip(p);
      if (p.doc.forgot && p.doc.forgot.length) addProblem(forgotWords(p.doc), undefined, "index-forgot");
      if (p.doc.why === "slow") offerWhole(p);
    } catch (err) {
      const plain = attachError(p.name, err);
      addProblem(plain.text, plain.detail);
      removeFile(p.id);
      continue;
    } finally {
      clearInterval(ticking);
    }
    render();
  }
}

/** A file that fits but that this computer reads slowly is searched for each question (the server
 * measured its prompt speed: documents/reading.py); the note says so and offers to read it whole,
 * with the wait that takes. */
function offerWhole(p) {
  const wait = Math.max(1, Math.round(p.doc.whole_s));
  addProblem(p.name + " will be read in parts: the model answers from the parts that match each question, in about "
    + Math.round(p.doc.first_word_s) + " s. Read whole, its answers would start after about " + wait + " s.",
  undefined, "read-choice", { label: "Read the whole file (about " + wait + " s)", run: () => {
    p.doc.searched = false;
    p.doc.read = "whole";
    updateChip(p);
  } });
}

/** The index of files on this computer is bounded: what it forgot to make room for `doc`. */
function forgotWords(doc) {
  const names = doc.forgot.map((n) => "“" + n + "”");
  const list = names.length === 1 ? names[0] : names.slice(0, -1).join(", ") + " and " + names[names.length - 1];
  return "To make room for " + doc.name + ", this computer forgot its copy of " + list +
    " (the files used longest ago): it keeps at most " + fmtSize(doc.index_cap) + " of files' text. " +
    "A chat that used " + (names.length === 1 ? "it" : "one of them") + " asks you to attach it again when you go on.";
}

/** Resolves true to send (after any cut the user chose), false to keep editing. */
export function confirmFit() {
  return fitting.confirmFit({ files: readyFiles(), budget: budget(), cost: costOf, updated: updateChip, render });
}

/** Put a message's files back into the composer (its reply failed), as they were sent. */
export function restoreFiles(files) {
  for (const a of files || []) {
    const doc = { name: a.name, kind: a.kind, size: a.size, tokens: a.tokens, text: a.text, note: a.note,
      unit: "part", segments: a.data_url || a.audio_url ? [] : [{ chars: a.text.length, tokens: a.tokens }],
      budget: budget(), words: wordCount(a.text), file_id: a.file_id, searched: !!a.file_id && a.read !== "whole",
      read: a.read, data_url: a.data_url,
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
    if (d.file_id) a.file_id = d.file_id;
    if (d.searched) a.note = "read in parts";
    else if (!d.data_url && !d.audio_url) a.read = "whole";   // it fits, or was chosen over searching it
    return a;
  });
  clearFiles();
  return out;
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
