// A chat's messages as a tree. Editing a message or writing a reply again adds a sibling, so
// nothing is thrown away; the page shows one branch at a time (‹ 2/3 › switches).
//
//   chat.nodes     every message: {id, parent, role, content, stats?, attachments?}, a parent
//                  always before its children (the order they were written in)
//   chat.leaf      the id of the last message of the branch shown
//   chat.messages  that branch, first to last: what is drawn, sent and counted
//
// Chats saved before the tree (messages without ids) load as one branch. Pure data: no DOM.
import { newId } from "./util.js";

/** The branch that ends at `leafId`, first to last. */
export function branchOf(chat, leafId) {
  const byId = new Map(chat.nodes.map((n) => [n.id, n]));
  const out = [];
  for (let at = byId.get(leafId); at; at = at.parent == null ? null : byId.get(at.parent)) out.push(at);
  return out.reverse();
}

/** Recompute chat.messages after chat.leaf or chat.nodes changed. */
export function refresh(chat) {
  chat.messages = branchOf(chat, chat.leaf);
}

/** A saved chat's messages as nodes (ids m0, m1... for a chat from before the tree: the same in every tab). */
export function toNodes(messages) {
  let previous = null;
  return (Array.isArray(messages) ? messages : []).map((m, i) => {
    const n = { ...m };
    if (typeof n.id !== "string") {
      n.id = "m" + i;
      n.parent = previous;
    } else if (n.parent === undefined) {
      n.parent = null;
    }
    previous = n.id;
    return n;
  });
}

/** Fill `chat` from what GET /api/chats/ID answered. */
export function loadInto(chat, full) {
  chat.nodes = toNodes(full.messages);
  const last = chat.nodes.length ? chat.nodes[chat.nodes.length - 1].id : null;
  chat.leaf = typeof full.leaf === "string" && chat.nodes.some((n) => n.id === full.leaf) ? full.leaf : last;
  chat.version = typeof full.version === "number" ? full.version : 0;
  chat.system = typeof full.system === "string" ? full.system : undefined;
  for (const k of ["title", "mode", "created", "updated"]) if (full[k] !== undefined) chat[k] = full[k];
  refresh(chat);
}

/** Add `msg` under `parentId` (default: the end of the branch shown) and show its branch. */
export function addMessage(chat, msg, parentId) {
  if (!msg.id) msg.id = newId();
  msg.parent = parentId === undefined ? chat.leaf : parentId;
  msg.mine = true;   // written in this tab (not saved: see mergeRemote)
  chat.nodes.push(msg);
  chat.leaf = msg.id;
  refresh(chat);
  return msg;
}

/** Take out `msg` (a message that never got its reply, or a reply that never got any text; it has
 * no children) and show `leafId`'s branch (default: the newest one left under its parent). */
export function removeMessage(chat, msg, leafId) {
  const i = chat.nodes.indexOf(msg);
  if (i >= 0) chat.nodes.splice(i, 1);
  chat.leaf = leafId !== undefined ? leafId : leafUnder(chat, msg.parent);
  refresh(chat);
}

/** `msg` and the other versions of it (same parent, same role), oldest first. */
export function versionsOf(chat, msg) {
  if (!chat || !chat.nodes) return [msg];
  return chat.nodes.filter((n) => n.parent === msg.parent && n.role === msg.role);
}

/** The last message under `id`, following the newest child at each step. */
export function leafUnder(chat, id) {
  let at = id;
  for (;;) {
    let next = null;
    for (const n of chat.nodes) if (n.parent === at) next = n.id;
    if (next === null) return at;
    at = next;
  }
}

/** Show the version of `msg` `step` places along (-1: the one before); returns the message now shown. */
export function switchVersion(chat, msg, step) {
  const all = versionsOf(chat, msg);
  const to = all[all.indexOf(msg) + step];
  if (!to) return msg;
  chat.leaf = leafUnder(chat, to.id);
  refresh(chat);
  return to;
}

/**
 * Merge the saved copy `remote` (GET /api/chats/ID) into `chat`, losing nothing: messages only
 * one side has are kept (their ids are unique), and for messages both have, the saved text wins
 * unless this tab wrote it (`writing`: the reply being streamed here). When this tab had nothing
 * of its own, it follows the saved copy's branch, title and instructions; otherwise it stays on
 * its own branch. Returns {added, own}: how many messages came in, how many were only here.
 */
export function mergeRemote(chat, remote, writing) {
  const theirs = toNodes(remote.messages);
  const here = new Map(chat.nodes.map((n) => [n.id, n]));
  const saved = new Set(theirs.map((n) => n.id));
  const merged = theirs.map((t) => {
    const n = here.get(t.id);
    if (!n) return t;
    if (n !== writing && !n.mine) {
      n.content = t.content;
      if (t.stats) n.stats = t.stats;
      else delete n.stats;
    }
    return n;
  });
  const ownNodes = chat.nodes.filter((n) => !saved.has(n.id));
  const added = theirs.filter((t) => !here.has(t.id));
  // the saved order first (written earlier), then what only this tab has: parents stay before children
  chat.nodes = [...merged, ...ownNodes];
  chat.version = typeof remote.version === "number" ? remote.version : 0;
  if (!ownNodes.length) {
    if (typeof remote.leaf === "string" && saved.has(remote.leaf)) chat.leaf = remote.leaf;
    else if (added.length) chat.leaf = added[added.length - 1].id;
    chat.system = typeof remote.system === "string" ? remote.system : undefined;
    for (const k of ["title", "updated"]) if (remote[k] !== undefined) chat[k] = remote[k];
  }
  refresh(chat);
  return { added: added.length, own: ownNodes.length };
}
