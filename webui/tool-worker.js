// The run_javascript tool's sandbox: a dedicated Web Worker, started fresh for each run and ended
// by the page after its time limit (tools.js). A worker has no DOM, no page storage and no
// cookies; the server sends this one file with its own Content-Security-Policy
// (http/security.py WORKER_CSP: connect-src 'none', no scripts to import), so it reaches no
// network either, and the network names are taken away below as well. What it may do is run
// the model's code (eval is allowed in this worker only, never in the page) and say what it printed.
"use strict";

const MAX_OUTPUT = 20000;
const post = self.postMessage.bind(self);
const Run = Function;   // taken before the names below go
for (const name of ["fetch", "XMLHttpRequest", "WebSocket", "EventSource", "importScripts", "indexedDB", "caches",
  "BroadcastChannel", "Worker", "SharedWorker", "WebTransport", "RTCPeerConnection", "navigator", "location"]) {
  try {
    Object.defineProperty(self, name, { value: undefined, configurable: false, writable: false });
  } catch (e) {
    // a name this browser does not have
  }
}

function show(v) {
  if (typeof v === "string") return v;
  try {
    const s = JSON.stringify(v, (k, x) => (typeof x === "bigint" ? x.toString() : x));
    return s === undefined ? String(v) : s;
  } catch (e) {
    return String(v);
  }
}

self.onmessage = async (ev) => {
  let out = "";
  let cut = false;
  const write = (...args) => {
    if (cut) return;
    out += args.map(show).join(" ") + "\n";
    if (out.length > MAX_OUTPUT) {
      out = out.slice(0, MAX_OUTPUT);
      cut = true;
    }
  };
  const console = { log: write, info: write, warn: write, error: write, debug: write };
  try {
    const fn = new Run("console", '"use strict";\n' + String(ev.data.code));
    let value = fn(console);
    if (value && typeof value.then === "function") value = await value;
    post({ ok: true, output: out, cut, value: value === undefined ? undefined : show(value).slice(0, MAX_OUTPUT) });
  } catch (e) {
    post({ ok: false, output: out, cut, error: (e && e.name ? e.name + ": " : "") + (e && e.message ? e.message : String(e)) });
  }
};
