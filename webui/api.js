// The page's own API (/api/chats, /api/settings): this launch's secret rides in an HttpOnly
// cookie; the X-Llmpack-Chat header is what no other web page can add without a preflight.

/** An HTTP error from the app (this API or the OpenAI-compatible one), with its status. */
export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

/** A response's body: its JSON, or its text where that is not JSON. */
export async function readBody(resp) {
  const text = await resp.text();
  try {
    return JSON.parse(text);
  } catch (e) {
    return text;
  }
}

export async function api(method, path, body) {
  const headers = { "X-Llmpack-Chat": "1" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method, headers, cache: "no-store", credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await readBody(resp);
  if (!resp.ok) {
    const msg = data && data.error && data.error.message ? data.error.message : `HTTP ${resp.status}`;
    throw new ApiError(msg, resp.status);
  }
  return data;
}
