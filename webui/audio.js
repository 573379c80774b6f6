// Sound, for a model that hears (/health "hears": started with an audio projector, --mmproj):
// the microphone button records through MediaRecorder (on localhost no network is involved: the
// page is a secure context, the browser asks for the microphone once), and sound files can be
// attached like any file (attach.js hands them here). Either becomes a chip in the composer that
// shows the clip's length and can be discarded (×) before sending.
//
// What MediaRecorder gives (webm/opus in Chromium, ogg or mp4 elsewhere) and most files people
// have are not what the server reads (WAV, MP3, FLAC), so every clip is decoded here with Web
// Audio (decodeAudioData), resampled to 16 kHz mono (the rate of Whisper-style encoders; the
// server resamples anything else) and sent as 16-bit PCM WAV: the same bytes whatever the
// browser recorded, small enough to keep in a saved chat (32 KB a second).
import { state, ui } from "./state.js";

export const MAX_SECONDS = 90;      // a clip kept in a saved chat; the API itself takes up to 300 s
const RATE = 16000;
const AUDIO = /\.(wav|mp3|flac|ogg|oga|opus|m4a|aac|webm|weba)$/i;
let recorder = null;     // {media, stream, chunks, started, timer} while recording
let taken = 0;           // recordings made on this page, for their names

export const isAudio = (file) => (file.type && file.type.startsWith("audio/")) || AUDIO.test(file.name || "");

/** m:ss, as a recording's length reads. */
export function clock(seconds) {
  const s = Math.max(0, Math.round(seconds));
  return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
}

/** A recording or a sound file as the attachment the composer keeps: a WAV data: URL and its length. */
export async function audioDoc(blob, name) {
  let decoded;
  try {
    decoded = await new OfflineAudioContext(1, 1, RATE).decodeAudioData(await blob.arrayBuffer());
  } catch (err) {
    throw new Error(name + " could not be read as sound; it may be damaged, or a kind of file this browser cannot play.");
  }
  if (decoded.duration > MAX_SECONDS + 0.5) {
    throw new Error(name + " is " + clock(decoded.duration) + " long; clips can be at most " + clock(MAX_SECONDS)
      + " here. Send a shorter part of it.");
  }
  const frames = Math.max(1, Math.ceil(decoded.duration * RATE));
  const mix = new OfflineAudioContext(1, frames, RATE);   // down-mixed to one channel, resampled
  const source = mix.createBufferSource();
  source.buffer = decoded;
  source.connect(mix.destination);
  source.start();
  const wav = wavBytes((await mix.startRendering()).getChannelData(0));
  return { name, kind: "audio", size: wav.length, tokens: 0, text: "", words: 0, note: clock(decoded.duration),
    seconds: decoded.duration, audio_url: "data:audio/wav;base64," + base64(wav), segments: [], unit: "part" };
}

function wavBytes(samples) {
  const out = new DataView(new ArrayBuffer(44 + samples.length * 2));
  const text = (at, s) => { for (let i = 0; i < s.length; i++) out.setUint8(at + i, s.charCodeAt(i)); };
  text(0, "RIFF"); out.setUint32(4, 36 + samples.length * 2, true); text(8, "WAVE");
  text(12, "fmt "); out.setUint32(16, 16, true); out.setUint16(20, 1, true); out.setUint16(22, 1, true);
  out.setUint32(24, RATE, true); out.setUint32(28, RATE * 2, true); out.setUint16(32, 2, true); out.setUint16(34, 16, true);
  text(36, "data"); out.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const x = Math.max(-1, Math.min(1, samples[i]));
    out.setInt16(44 + i * 2, Math.round(x * 32767), true);
  }
  return new Uint8Array(out.buffer);
}

function base64(bytes) {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/** A sound chip's icon: a note, in place of a file type. */
export function clipIcon(el) {
  const icon = el("span", "chip-icon clip-icon", "♪");
  icon.setAttribute("aria-hidden", "true");
  return icon;
}

/** The input_audio part a clip is sent as (OpenAI's and llama-server's shape). */
export function audioPart(a) {
  return { type: "input_audio", input_audio: { data: a.audio_url.slice(a.audio_url.indexOf(",") + 1), format: "wav" } };
}

// ------------------------------------------------------------------ the microphone

/** Show the microphone button only for a model that hears (and never in text-completion mode: CSS). */
export function showMicrophone() {
  ui.mic.hidden = !state.hears;
  if (state.hears && !ui.attach.title.includes("sound")) {   // the paperclip takes sound files too
    ui.attach.title = ui.attach.title.replace(" (or drop", ", sound files (or drop");
  }
}

/** The microphone button: click to record, click again (or Stop) to keep it, ✕ to throw it away.
 * `keep(file)` gets the recording as a File, which attach.js turns into a chip. */
export function wireMicrophone(keep, problem) {
  ui.mic.addEventListener("click", () => (recorder ? stop(true) : start(keep, problem)));
  ui.recordCancel.addEventListener("click", () => stop(false));
}

async function start(keep, problem) {
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (err) {
    problem("The microphone could not be opened: allow this page to use it (the browser asks once), "
      + "or attach a sound file instead.", String(err && err.message || err));
    return;
  }
  let media;
  try {
    media = new MediaRecorder(stream);
  } catch (err) {   // a browser without MediaRecorder, or none of its formats
    stream.getTracks().forEach((t) => t.stop());
    problem("This browser cannot record sound here; attach a sound file instead.", String(err && err.message || err));
    return;
  }
  const rec = { media, stream, chunks: [], started: performance.now(), keep: false };
  recorder = rec;
  media.ondataavailable = (ev) => { if (ev.data && ev.data.size) rec.chunks.push(ev.data); };
  media.onstop = () => {
    stream.getTracks().forEach((t) => t.stop());
    if (!rec.keep || !rec.chunks.length) return;
    taken += 1;
    const type = media.mimeType || rec.chunks[0].type || "audio/webm";
    keep(new File(rec.chunks, "Recording " + taken, { type }));
  };
  media.start(250);
  rec.timer = setInterval(tick, 250);
  ui.app.classList.add("recording");
  ui.recording.hidden = false;
  ui.mic.setAttribute("aria-pressed", "true");
  label("Stop recording and attach it");
  tick();
}

function label(text) {
  ui.mic.title = text;
  ui.mic.setAttribute("aria-label", text);
}

function tick() {
  if (!recorder) return;
  const seconds = (performance.now() - recorder.started) / 1000;
  ui.recordTime.textContent = clock(seconds);
  if (seconds >= MAX_SECONDS) stop(true);
}

function stop(keep) {
  const rec = recorder;
  if (!rec) return;
  recorder = null;
  clearInterval(rec.timer);
  rec.keep = keep;
  if (rec.media.state !== "inactive") rec.media.stop();
  ui.app.classList.remove("recording");
  ui.recording.hidden = true;
  ui.mic.setAttribute("aria-pressed", "false");
  label("Record a voice message");
}
