// The upload client: what the page refuses at once (too large, a picture or a sound this model
// cannot take), pictures scaled down in the page, and every other file read by the server
// (POST /v1/extract: its text, token counts per page or part, and a file_id when the server
// indexed it). The limits are the server's, from /health's `attachments` (state.attach), never
// copied here.
import { ApiError } from "./api.js";
import { isAudio } from "./audio.js";
import { apiKey } from "./settings.js";
import { state } from "./state.js";

const IMAGE = /\.(png|jpe?g|gif|webp|bmp|tiff?|heic|heif|avif)$/i;
const TAKEN = /^image\/(png|jpeg|webp|gif)$/;   // what the server's vision path reads (runtime/engine/images.py)
const PICTURE_SIDE = 1536;          // pictures are scaled down to this many pixels a side, as JPEG
const PICTURE_KEEP_BYTES = 1024 * 1024;   // a smaller PNG/JPEG/WebP/GIF within the side is sent as it is

export function fmtSize(n) {
  if (n >= 1024 * 1024) return (n / 1024 / 1024).toFixed(1) + " MB";
  if (n >= 1024) return Math.round(n / 1024) + " KB";
  return n + " B";
}

/** The largest file the server reads (documents.MAX_FILE_BYTES, served in /health). */
export function maxFileBytes() {
  return (state.attach && state.attach.max_file_bytes) || 32 * 1024 * 1024;
}

/** Refusals the page can make at once, without sending the file. */
export function refusal(file) {
  const most = maxFileBytes();
  if (file.size > most) {
    return file.name + " is " + fmtSize(file.size) + "; files can be at most " + Math.round(most / 1024 / 1024) + " MB. Attach a shorter part of it.";
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

export const isPicture = (file) => (file.type && file.type.startsWith("image/")) || IMAGE.test(file.name);

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
export async function pictureDoc(file) {
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

export async function extract(file) {
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
