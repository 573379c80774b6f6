// The top bar's facts about the model, in words (words.js), and the base-model note under it,
// which a person can put away: remembered per model in this browser. The detail the top bar
// keeps in tooltips is also under "About this model" in Settings, for the keyboard and for
// phones (a tooltip needs a mouse; a phone's top bar has no room for the badges).
import { state, ui } from "./state.js";
import { el, loadJSON, saveJSON } from "./util.js";
import { backendWords, footerWords, memoryText } from "./words.js";

const NOTE_KEY = "llmpack.base-notice-hidden.v1";   // {model id: true}

function noteHidden() {
  const hidden = loadJSON(NOTE_KEY, {});
  return !!(hidden && typeof hidden === "object" && hidden[state.model]);
}

/** Fill the top bar from /health's answer (`h`); state.model etc. are set already. */
export function showModelInfo(h) {
  ui.modelName.textContent = state.displayName;
  // the whole name on hover, where a narrow screen ends it with an ellipsis (and the id other programs use)
  ui.modelName.title = state.displayName + (state.model && state.model !== state.displayName ? " (" + state.model + ")" : "");
  const memory = memoryText(state.nCtx);
  ui.ctxSize.textContent = memory.text;
  ui.ctxSize.title = memory.title;
  ui.ctxSize.hidden = !memory.text;
  const where = backendWords(h.backend);
  ui.backend.textContent = where.text;
  ui.backend.title = where.title;
  ui.backend.hidden = !where.text;
  const footer = footerWords(h.backend);
  ui.whereRuns.textContent = footer.text;
  ui.whereRuns.title = footer.title;
  ui.baseNotice.hidden = !state.baseModel || noteHidden();
  ui.app.classList.toggle("base-model", state.baseModel);
  showAbout(memory, where);
}

/** Settings' "About this model": the top bar's words and their tooltips' detail, as text. */
function showAbout(memory, where) {
  const facts = [["Model", state.displayName]];
  if (state.model && state.model !== state.displayName) facts.push(["Name other programs use", state.model]);
  if (memory.text) facts.push(["Memory", memory.text + (memory.title ? ". " + memory.title : ".")]);
  if (where.text) facts.push(["Where it runs", where.text + (where.title ? ". " + where.title : ".")]);
  ui.aboutFacts.replaceChildren(...facts.flatMap(([term, text]) => [el("dt", "", term), el("dd", "", text)]));
}

export function wireBaseNotice() {
  ui.baseNoticeDismiss.addEventListener("click", () => {
    const hidden = loadJSON(NOTE_KEY, {});
    const all = hidden && typeof hidden === "object" ? hidden : {};
    all[state.model] = true;
    saveJSON(NOTE_KEY, all);
    ui.baseNotice.hidden = true;
    ui.prompt.focus();
  });
}
