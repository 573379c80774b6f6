// Presets: instructions (a system prompt) and the sampling settings, saved under a name, so the
// same set-up is not typed again for every chat. Choosing one makes it this model's settings:
// new chats start with its instructions. The first preset is the app's own (the built file's
// --system and the model's defaults); the user's are kept by the app beside the chats
// (/api/presets) and can be exported to a file and imported on another computer.
import { api } from "./api.js";
import { importError, plainError } from "./errors.js";
import { renderCurrent } from "./render.js";
import { applyValues, effective, SAMPLING_KEYS, setSettingsHook } from "./settings.js";
import { state, ui } from "./state.js";
import { download, el, toast } from "./util.js";

const FORMAT = "llmpack-presets";
const KEYS = ["system_prompt", ...SAMPLING_KEYS];
let presets = [];   // the user's: [{name, system_prompt?, temperature?, ...}]
let chosen = "";    // the name last chosen or saved: shown while the settings still match it

function appDefault() {
  const p = { name: "This app's default", builtin: true };
  for (const k of KEYS) p[k] = k === "system_prompt" ? state.defaults.system_prompt || "" : state.defaults[k];
  return p;
}

function all() {
  return [appDefault(), ...presets];
}

/** A preset's value for `k` as a request would use it (missing: the model's default). */
function valueOf(p, k) {
  if (p[k] !== undefined) return p[k];
  return k === "system_prompt" ? state.defaults.system_prompt || "" : state.defaults[k];
}

function isCurrent(p) {
  const e = effective();
  return KEYS.every((k) => (valueOf(p, k) ?? null) === (e[k] ?? null));
}

function render() {
  const list = all();
  const named = list.findIndex((p) => p.name === chosen);
  const current = named >= 0 && isCurrent(list[named]) ? named : list.findIndex(isCurrent);
  const options = list.map((p, i) => {
    const o = el("option", "", p.name);
    o.value = String(i);
    return o;
  });
  if (current < 0) {
    const custom = el("option", "", "Your own settings (not saved as a preset)");
    custom.value = "";
    options.push(custom);
  }
  ui.presetSelect.replaceChildren(...options);
  ui.presetSelect.value = current < 0 ? "" : String(current);
  ui.presetDelete.disabled = current <= 0;
  ui.presetExport.disabled = presets.length === 0;
  const off = state.locked;
  for (const b of [ui.presetSave, ui.presetImport, ui.presetName]) b.disabled = off;
}

/** Once the app's saved chats are reachable: the user's presets. */
export async function loadPresets() {
  if (!state.locked) {
    try {
      presets = (await api("GET", "/api/presets")).presets || [];
    } catch (err) {
      toast("Saved presets could not be read. " + plainError(err).text);
    }
  }
  render();
}

async function store(next, said) {
  try {
    presets = (await api("PUT", "/api/presets", { presets: next })).presets;
    render();
    if (said) toast(said);
    return true;
  } catch (err) {
    const plain = plainError(err);
    toast("The presets were not saved. " + plain.text, undefined, undefined, 6000, plain.detail);
    return false;
  }
}

function choose() {
  const p = all()[Number(ui.presetSelect.value)];
  if (!p || ui.presetSelect.value === "") return;
  const values = {};
  for (const k of KEYS) values[k] = valueOf(p, k);
  chosen = p.name;
  applyValues(values);
  state.draftSystem = undefined;   // a chat not yet begun starts with the preset's instructions
  if (!state.current || state.current.messages.length === 0) renderCurrent();
  render();
  toast("Preset “" + p.name + "” chosen: new chats use it.");
}

function saveAs() {
  const name = ui.presetName.value.trim();
  if (!name) {
    ui.presetName.focus();
    toast("Type a name for the preset first.");
    return;
  }
  const e = effective();
  const p = { name };
  for (const k of KEYS) if (e[k] !== undefined) p[k] = e[k];
  const next = presets.filter((q) => q.name.toLowerCase() !== name.toLowerCase()).concat([p]);
  chosen = name;
  store(next, "Saved as the preset “" + name + "”.").then((ok) => {
    if (ok) ui.presetName.value = "";
  });
}

function remove() {
  const p = all()[Number(ui.presetSelect.value)];
  if (!p || p.builtin) return;
  store(presets.filter((q) => q !== p), "Preset “" + p.name + "” deleted.");
}

function exportAll() {
  const data = { format: FORMAT, version: 1, model: state.displayName, presets };
  download("presets.json", JSON.stringify(data, null, 2), "application/json");
}

async function importFile(file) {
  let incoming;
  try {
    const data = JSON.parse(await file.text());
    if (!data || data.format !== FORMAT || !Array.isArray(data.presets)) throw new SyntaxError("not a presets file");
    incoming = data.presets;
  } catch (err) {
    toast("This file is not a presets file saved by this app. Choose a file made with Export presets.", undefined,
      undefined, 6000, importError(err).detail);
    return;
  }
  const names = new Set(incoming.map((p) => p && typeof p.name === "string" && p.name.trim().toLowerCase()));
  const next = presets.filter((p) => !names.has(p.name.toLowerCase())).concat(incoming);
  const n = incoming.length;
  await store(next, n === 1 ? "1 preset imported." : n + " presets imported.");
}

export function wirePresets() {
  setSettingsHook(render);
  ui.presetSelect.addEventListener("change", choose);
  ui.presetSave.addEventListener("click", saveAs);
  ui.presetName.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") {
      ev.preventDefault();
      saveAs();
    }
  });
  ui.presetDelete.addEventListener("click", remove);
  ui.presetExport.addEventListener("click", exportAll);
  ui.presetImport.addEventListener("click", () => ui.presetFile.click());
  ui.presetFile.addEventListener("change", () => {
    const file = ui.presetFile.files && ui.presetFile.files[0];
    ui.presetFile.value = "";
    if (file) importFile(file);
  });
}
