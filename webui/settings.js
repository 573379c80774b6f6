// Settings: per-model system prompt and sampling overrides, saved by the app beside the chats
// (/api/settings, so they survive a restart on another port) and in this browser; the API key
// stays in this browser only.
import { api } from "./api.js";
import { plainError } from "./errors.js";
import { NARROW, state, ui } from "./state.js";
import { loadJSON, saveJSON, toast } from "./util.js";

const SETTINGS_KEY = "llmpack.settings.v1";
const store = { models: {}, api_key: "" };

const FIELDS = [
  { key: "temperature", input: "temperature", kind: "float", ok: (v) => v >= 0 && v <= 100, msg: "Creativity (temperature) must be between 0 and 100." },
  { key: "top_p", input: "topP", kind: "float", ok: (v) => v > 0 && v <= 1, msg: "Top P must be more than 0 and at most 1." },
  { key: "top_k", input: "topK", kind: "int", ok: (v) => v >= -1, msg: "Top K must be a whole number, 0 or more." },
  { key: "min_p", input: "minP", kind: "float", ok: (v) => v >= 0 && v <= 1, msg: "Min P must be between 0 and 1." },
  { key: "max_tokens", input: "maxTokens", kind: "int", ok: (v) => v >= 1, msg: "Longest reply must be a whole number of at least 1 (or empty for no limit)." },
];

/** The sampling values a request may carry, in the order it sends them. */
export const SAMPLING_KEYS = FIELDS.map((f) => f.key);

export function apiKey() {
  return store.api_key;
}

function overrides() {
  let m = store.models[state.model];
  if (!m || typeof m !== "object") m = store.models[state.model] = {};
  return m;
}

/** The sampling values and system prompt a request uses: the user's, else the model's. */
export function effective() {
  const o = overrides();
  const out = {
    system_prompt: typeof o.system_prompt === "string" ? o.system_prompt : state.defaults.system_prompt || "",
  };
  for (const f of FIELDS) out[f.key] = o[f.key] !== undefined ? o[f.key] : state.defaults[f.key];
  out.context_overflow = o.context_overflow === "ask" ? "ask" : "forget";   // the page's own default: forget
  return out;
}

/** Make `values` (a preset: system_prompt and SAMPLING_KEYS; missing ones are the model's) this
 * model's settings, keeping how long chats are handled. */
export function applyValues(values) {
  const o = overrides();
  for (const k of ["system_prompt", ...SAMPLING_KEYS]) {
    const v = values[k];
    const d = k === "system_prompt" ? state.defaults.system_prompt || "" : state.defaults[k];
    if (v === undefined || v === d) delete o[k];
    else o[k] = v;
  }
  saveSettings();
  fillSettings();
}

export function loadSettings() {
  const s = loadJSON(SETTINGS_KEY, null);
  if (s && typeof s === "object") {
    store.models = s.models && typeof s.models === "object" ? s.models : {};
    store.api_key = typeof s.api_key === "string" ? s.api_key : "";
  }
}

let onChanged = () => {};
/** presets.js: fn() after the settings changed (the preset shown may change with them). */
export function setSettingsHook(fn) {
  onChanged = fn;
}

let pushTimer = 0;
function saveSettings() {
  saveJSON(SETTINGS_KEY, store);
  if (state.locked) return;
  clearTimeout(pushTimer);
  const model = state.model;
  pushTimer = setTimeout(() => {
    api("PUT", "/api/settings", store.models[model] || {}).catch((err) => toast("Settings were not saved. " + plainError(err).text));
  }, 300);
}

/** Once the saved chats are reachable: the app's copy of this model's settings wins; settings
 * made in this browser before (when they lived only here) move over to the app. */
export async function syncSettings() {
  if (state.locked) return;
  try {
    const saved = (await api("GET", "/api/settings")).data || {};
    if (Object.keys(saved).length) {
      store.models[state.model] = saved;
      saveJSON(SETTINGS_KEY, store);
      fillSettings();
      onChanged();
    } else if (Object.keys(overrides()).length) {
      saveSettings();
    }
  } catch (err) {
    toast("Saved settings could not be read. " + plainError(err).text);
  }
}

export function fillSettings() {
  const e = effective();
  ui.systemPrompt.value = e.system_prompt;
  for (const f of FIELDS) {
    const input = ui[f.input];
    input.value = e[f.key] === undefined || e[f.key] === null ? "" : String(e[f.key]);
    const d = state.defaults[f.key];
    input.placeholder = d === undefined || d === null ? (f.key === "max_tokens" ? "No limit" : "Automatic") : String(d);
    input.removeAttribute("aria-invalid");
  }
  ui.apiKey.value = store.api_key || "";
  (e.context_overflow === "ask" ? ui.overflowAsk : ui.overflowForget).checked = true;
  ui.settingsError.textContent = "";
}

function onSettingInput(ev) {
  const target = ev.target;
  const o = overrides();
  if (target === ui.systemPrompt) {
    if (target.value === (state.defaults.system_prompt || "")) delete o.system_prompt;
    else o.system_prompt = target.value;
    saveSettings();
    onChanged();
    return;
  }
  if (target === ui.apiKey) {
    store.api_key = target.value.trim();
    saveSettings();
    return;
  }
  if (target.name === "context-overflow") {
    if (target.value === "ask") o.context_overflow = "ask";
    else delete o.context_overflow;
    saveSettings();
    return;
  }
  if (!target.closest(".field-grid")) return;   // the presets' own controls (presets.js)
  const errors = [];
  for (const f of FIELDS) {
    const input = ui[f.input];
    if (input !== target) {
      if (input.getAttribute("aria-invalid") === "true") errors.push(f.msg);
      continue;
    }
    const raw = input.value.trim();
    if (raw === "") {
      delete o[f.key];   // back to the model's default ("no limit" for max tokens)
      if (f.key === "max_tokens" && state.defaults.max_tokens != null) o[f.key] = null;   // "no limit" over a set default
      input.removeAttribute("aria-invalid");
      continue;
    }
    const v = f.kind === "int" ? Number(raw) : parseFloat(raw);
    if (!isFinite(v) || (f.kind === "int" && Math.floor(v) !== v) || !f.ok(v)) {
      input.setAttribute("aria-invalid", "true");
      errors.push(f.msg);
      continue;
    }
    input.removeAttribute("aria-invalid");
    if (v === state.defaults[f.key]) delete o[f.key];
    else o[f.key] = v;
  }
  ui.settingsError.textContent = errors.join(" ");
  saveSettings();
  onChanged();
}

export function openSettings() {
  fillSettings();
  ui.settings.hidden = false;
  ui.settingsBackdrop.hidden = false;
  ui.settingsButton.setAttribute("aria-expanded", "true");
  ui.systemPrompt.focus();
}

export function closeSettings() {
  if (ui.settings.hidden) return;
  ui.settings.hidden = true;
  ui.settingsBackdrop.hidden = true;
  ui.settingsButton.setAttribute("aria-expanded", "false");
  fillSettings();   // drop any invalid, unsaved input
  if (!NARROW.matches) ui.prompt.focus();
}

export function wireSettings() {
  ui.settingsButton.addEventListener("click", () => (ui.settings.hidden ? openSettings() : closeSettings()));
  ui.settingsClose.addEventListener("click", closeSettings);
  ui.settingsDone.addEventListener("click", closeSettings);
  ui.settingsBackdrop.addEventListener("click", closeSettings);
  ui.settingsForm.addEventListener("submit", (ev) => ev.preventDefault());
  ui.settingsForm.addEventListener("input", onSettingInput);
  ui.settingsForm.addEventListener("change", (ev) => {
    if (ev.target.name === "context-overflow") onSettingInput(ev);   // radio buttons say so on change
  });
  ui.settingsReset.addEventListener("click", () => {
    store.models[state.model] = {};
    saveSettings();
    fillSettings();
    onChanged();
    toast("Settings reset to the model's defaults.");
  });
}
