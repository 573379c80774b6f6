// Numbers and technical facts in words a person reads without a manual: "4,162 tokens",
// "about 1 token", "3 min 15 s", "Remembers about 6,000 words", "Running on your processor".
// The exact figures stay available as tooltips (the callers' `title`s).

const NUMBER = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const DECIMAL = new Intl.NumberFormat(undefined, { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const PLURAL = new Intl.PluralRules(undefined);

/** Fewer tokens than this make a speed figure noise (one slow first token dominates it). */
export const MIN_TOKENS_FOR_SPEED = 8;
/** A token is about three quarters of an English word. */
export const WORDS_PER_TOKEN = 0.75;

export function fmtNumber(n) {
  return NUMBER.format(n);
}

/** "1 token", "4,162 tokens"; `about` puts "about " in front (an estimate). */
export function countOf(n, one, many, about) {
  const word = PLURAL.select(n) === "one" ? one : many;
  return (about ? "about " : "") + NUMBER.format(n) + " " + word;
}

/** "12.3 tokens/s", or "" when there are too few tokens for the rate to mean anything. */
export function speedText(tokens, perSecond) {
  if (!(tokens >= MIN_TOKENS_FOR_SPEED) || !(perSecond > 0) || !isFinite(perSecond)) return "";
  return DECIMAL.format(perSecond) + " tokens/s";
}

/** "4.2 s", "3 min 15 s". */
export function durationText(seconds) {
  if (!(seconds > 0)) return "";
  if (seconds < 60) return DECIMAL.format(seconds) + " s";
  const whole = Math.round(seconds);
  return Math.floor(whole / 60) + " min " + (whole % 60) + " s";
}

/** Words in `tokens`, rounded so that no false precision shows: 6,144 -> 6,000; 24,576 -> 25,000.
 *  `perToken`: words per token where a text's own ratio is known (else WORDS_PER_TOKEN). */
export function roughWords(tokens, perToken) {
  const words = tokens * (perToken > 0 ? perToken : WORDS_PER_TOKEN);
  const step = words < 1000 ? 50 : words < 10000 ? 500 : words < 100000 ? 1000 : 10000;
  return Math.max(step, Math.round(words / step) * step);
}

/** The context badge: what the model keeps in mind, in words; the token count in the tooltip. */
export function memoryText(nCtx) {
  if (!nCtx) return { text: "", title: "" };
  return {
    text: "Remembers about " + NUMBER.format(roughWords(nCtx)) + " words",
    title: "The model reads about " + NUMBER.format(roughWords(nCtx)) + " words of conversation at once " +
      "(your messages, attached files and its replies): its context window of " + NUMBER.format(nCtx) +
      " tokens. In longer chats, start a New chat.",
  };
}

const num = (v) => (typeof v === "number" && isFinite(v) ? v : undefined);

/** Where the model runs (/health's `backend`; absent: nothing), in words, with the details as a tooltip. */
export function backendWords(b) {
  if (!b || typeof b !== "object") return { text: "", title: "" };
  const details = [];
  if (typeof b.cpu_variant === "string" && b.cpu_variant) details.push("Processor code: " + b.cpu_variant + ".");
  const remote = (Array.isArray(b.remote) ? b.remote : []).filter((r) => r && typeof r.endpoint === "string");
  if (remote.length && num(b.gpu_layers) > 0) {   // --rpc: the layers are on other llmpack workers
    const all = num(b.n_layers);
    const partly = all !== undefined && b.gpu_layers < all;
    const who = remote.length === 1 ? "an RPC worker" : remote.length + " RPC workers";
    details.unshift("Layers on " + who + ": " + remote.map((r) => r.endpoint + " holds " + (num(r.layers) ?? "?") +
      " of " + (all ?? "?")).join(", ") + (partly ? "; the rest on this processor." : "."));
    return { text: "Running " + (partly ? "partly " : "") + "on " + who, title: details.join(" ") };
  }
  if (num(b.gpu_layers) > 0) {
    const dev = (Array.isArray(b.devices) ? b.devices : []).find((d) => d && d.id === b.gpu_device);
    const name = (dev && typeof dev.name === "string" && dev.name) || "";
    const all = num(b.n_layers);
    const partly = all !== undefined && b.gpu_layers < all;
    details.unshift("Graphics card " + [b.gpu_device, name].filter(Boolean).join(" ") + ": " +
      b.gpu_layers + " of " + (all ?? "?") + " layers" + (partly ? " (the rest on the processor)." : "."));
    return {
      text: "Running " + (partly ? "partly " : "") + "on your graphics card" + (name ? " (" + name + ")" : ""),
      title: details.concat(typeof b.note === "string" && b.note ? [b.note] : []).join(" "),
    };
  }
  if (typeof b.note === "string" && b.note) details.push(b.note);
  return { text: "Running on your processor", title: details.join(" ") };
}

const LOOPBACK = /^(127\.|localhost$|::1$|\[::1\]$)/;

/** The chat list's footer: which computers do the work. With --rpc, the other computers that hold
 * layers, by address; a worker reached at 127.0.0.1 may be on this computer or at the end of an SSH
 * tunnel (docs/SCALING.md), which the page cannot tell apart, so it says both. */
export function footerWords(b) {
  const remote = (b && Array.isArray(b.remote) ? b.remote : [])
    .filter((r) => r && typeof r.endpoint === "string" && num(r.layers) !== 0);
  const hosts = [...new Set(remote.map((r) => r.endpoint.replace(/:\d+$/, "")))];
  const others = hosts.filter((h) => !LOOPBACK.test(h));
  const title = "Parts of the model are worked on by llmpack RPC workers at " + remote.map((r) => r.endpoint).join(", ") +
    ". If one of them is switched off or unplugged, replies stop until it is back.";
  if (others.length) {
    return { text: "Uses this computer and " + (others.length === 1 ? "1 other" : others.length + " others") +
      " on your network (" + others.join(", ") + ").", title };
  }
  if (remote.length) {
    const at = remote.map((r) => r.endpoint).join(", ");
    return { text: remote.length === 1
      ? "Uses this computer and a helper at " + at + " (on this computer, or on another one through a tunnel)."
      : "Uses this computer and " + remote.length + " helpers at " + at + " (on this computer, or on others through a tunnel).",
    title };
  }
  return { text: "Runs entirely on this computer.", title: "" };
}

const WORDS = typeof Intl.Segmenter === "function" ? new Intl.Segmenter(undefined, { granularity: "word" }) : null;

/** How many words `text` holds (Intl.Segmenter's words, so text without spaces counts too). */
export function wordCount(text) {
  if (!text) return 0;
  if (!WORDS) return (text.match(/\S+/g) || []).length;
  let n = 0;
  for (const part of WORDS.segment(text)) if (part.isWordLike) n += 1;
  return n;
}
