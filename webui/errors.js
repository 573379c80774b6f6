// What went wrong, said plainly: one sentence of what happened and what to do, with the
// technical text (status, server message) kept as `detail` for a "Details" fold or a tooltip.
import { ApiError } from "./api.js";

export const STOPPED = "The app has stopped. Start it again, then reload this page.";
export const APP_SIDE = "Something went wrong on the app's side. Try again; if it keeps happening, close the app and start it again.";
export const NOT_A_CHAT = "This file is not a chat saved by this app.";
const NEEDS_KEY = "This app asks for an access key. Open Settings and enter the key you were given.";
const TOO_LONG = "This is more than the model can read at once, even without the older messages. Shorten your message (or attach a shorter part), or start a New chat.";
const BUSY = "The model is busy. Try again in a moment.";

/** The technical text of an error: its message and HTTP status. */
function technical(err) {
  const msg = (err && err.message) || String(err);
  return err instanceof ApiError && err.status && !msg.includes(String(err.status)) ? `${msg} (HTTP ${err.status})` : msg;
}

/** {text, detail} for an error from fetch (TypeError), the API (ApiError) or anything else. */
export function plainError(err) {
  const detail = technical(err);
  if (err && err.name === "TypeError") return { text: STOPPED, detail };
  const status = err instanceof ApiError ? err.status : 0;
  const msg = (err && err.message) || "";
  if (status === 401 || status === 403) return { text: NEEDS_KEY, detail };
  if (/context|too long|too many tokens|prompt_too_long|exceed/i.test(msg) && (status === 400 || status === 500)) {
    return { text: TOO_LONG, detail };
  }
  const forgot = status === 400 && /"([^"]+)"\) is no longer in this computer's document index/.exec(msg);
  if (forgot) {
    return { text: `This computer no longer has its copy of ${forgot[1]}, which this chat read. `
      + "Attach the file again with the paperclip, then send your message.", detail };
  }
  if (status === 503 || status === 429) return { text: BUSY, detail };
  if (status >= 500 || !status) return { text: APP_SIDE, detail };
  return { text: msg || APP_SIDE, detail };
}

/** An import that failed: the file was no chat (not JSON, wrong shape), or something else went wrong. */
export function importError(err) {
  if (err instanceof SyntaxError || (err instanceof ApiError && err.status === 400)) {
    return { text: NOT_A_CHAT + " Choose a file made with Export as JSON.", detail: technical(err) };
  }
  return plainError(err);
}

const KINDS = "a PDF, a Word file (.docx) or a text file";

/** A file the app could not read ("what happened + what to do"), with the app's own message as
 *  `detail`; `err` is from the fetch of /v1/extract. */
export function attachError(name, err) {
  const status = err instanceof ApiError ? err.status : 0;
  if (!(status === 400 || status === 413)) return plainError(err);
  const msg = (err && err.message) || "";
  const detail = technical(err);
  if (/password/i.test(msg)) {
    return { text: `${name} is locked with a password. Open it, save a copy without the password, and attach that.`, detail };
  }
  const other = /^.* is (.+), which llmpack cannot read: (.+)$/.exec(msg);   // a spreadsheet, a .doc ... and the way out
  if (other) {
    return { text: `${name} is ${other[1]}, which this app cannot open. To use it, ${other[2]}.`, detail };
  }
  if (/web page or mail with no text/i.test(msg)) {
    return { text: `${name} has no text this app can read: it may hold only pictures or attached files. Attach those files on their own, or copy its text into your message.`, detail };
  }
  if (/web page with no text/i.test(msg)) {
    return { text: `${name} has no text this app can read: the page may show its words only through scripts or pictures. Copy its text into your message instead.`, detail };
  }
  if (/no text layer|scanned|holds no text|only pictures/i.test(msg)) {
    return { text: `${name} has no text this app can read (it looks like scanned pages or pictures). Copy its text into your message instead.`, detail };
  }
  if (status === 413 || /at most|more than|took longer/i.test(msg)) {
    return { text: `${name} is too big to read. Attach a shorter part of it, or copy the part you need into your message.`, detail };
  }
  return { text: `${name} could not be read: it may be damaged, or of a kind this app cannot open. Attach it as ${KINDS}, or copy its text into your message.`, detail };
}
