// The page's own API (/api/chats, /api/settings): this launch's secret rides in an HttpOnly
// cookie; the X-Llmpack-Chat header is what no other web page can add without a preflight.

export class ChatApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

export async function api(method, path, body) {
  const headers = { "X-Llmpack-Chat": "1" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method, headers, cache: "no-store", credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  let data = null;
  try {
    data = JSON.parse(text);
  } catch (e) {
    data = text;
  }
  if (!resp.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : `HTTP ${resp.status}`;
    throw new ChatApiError(msg, resp.status);
  }
  return data;
}
