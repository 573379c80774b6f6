// Shared page state and element lookups for the chat page's modules.

export const NARROW = window.matchMedia("(max-width: 800px)");

/** Every element with an id, by camelCase name: ui.chatList is #chat-list. */
export const ui = {};
for (const el of document.querySelectorAll("[id]")) {
  ui[el.id.replace(/-([a-z])/g, (_, c) => c.toUpperCase())] = el;
}

export const state = {
  ready: false,
  model: "",          // the model id requests name
  displayName: "",
  nCtx: 0,
  vision: false,      // /health vision: the model was started with a vision projector (--mmproj)
  hears: false,       // /health hears: the model was started with an audio projector (--mmproj)
  toolsNative: false, // /health tools: the chat template knows tools (the built-in ones are on by default)
  attach: null,       // /health attachments: the largest file, the files' budget, a stand-in's cost
  baseModel: false,   // no chat template and no instruct tag (/health base_model)
  defaults: {},       // from /health: system_prompt and the SAMPLING_KEYS of settings.js
  chats: [],          // summaries from /api/chats; .messages is null until the chat is opened
  locked: false,      // /api/chats refused: this page was not opened with the launch's token
  current: null,      // the chat on screen (may be an unsaved empty draft)
  gen: null,          // the reply being generated
  newMode: "chat",    // the mode a new chat starts in ("chat" or "complete")
  draftSystem: undefined,   // instructions set for the chat not yet begun (else Settings' are used)
};
