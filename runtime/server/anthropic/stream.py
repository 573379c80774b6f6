"""Anthropic's streaming events, in the documented order: message_start; for each content block
(thinking, text, tool_use, in the order the model wrote them) content_block_start, its
content_block_delta events (thinking_delta, text_delta, input_json_delta; a text block of a request
that read documents ends with the server's citations as citations_delta) and content_block_stop;
then message_delta (stop reason, output tokens) and message_stop. An error after the stream began
is an `error` event in Anthropic's error shape."""
from __future__ import annotations

import json

from llmpack.runtime.server.anthropic.protocol import stop_reason, tool_use_block


def event(name: str, data: dict) -> bytes:
    """One server-sent event, named as Anthropic names it (`event: message_start` ...)."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return f"event: {name}\ndata: ".encode() + payload + b"\n\n"


class MessageStream:
    def __init__(self, msg_id: str, model: str, usage: dict) -> None:
        self.msg_id, self.model, self.usage = msg_id, model, usage
        self.index = -1
        self.open: str | None = None

    def start(self) -> bytes:
        return event("message_start", {"type": "message_start", "message": {
            "id": self.msg_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": self.usage}})

    def _begin(self, kind: str, block: dict) -> list[bytes]:
        out = self._end()
        self.index += 1
        self.open = kind
        return out + [event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                    "content_block": block})]

    def _end(self) -> list[bytes]:
        if self.open is None:
            return []
        out = [self._delta({"type": "signature_delta", "signature": ""})] if self.open == "thinking" else []
        self.open = None
        return out + [event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _delta(self, delta: dict) -> bytes:
        return event("content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta})

    def thinking(self, text: str) -> list[bytes]:
        if not text:
            return []
        out = [] if self.open == "thinking" else self._begin("thinking", {"type": "thinking", "thinking": "",
                                                                           "signature": ""})
        return out + [self._delta({"type": "thinking_delta", "thinking": text})]

    def text(self, text: str) -> list[bytes]:
        if not text:
            return []
        out = [] if self.open == "text" else self._begin("text", {"type": "text", "text": ""})
        return out + [self._delta({"type": "text_delta", "text": text})]

    def citations(self, cited: list[dict]) -> list[bytes]:
        """The text block's citations (the server's sources, once its text is whole), each a citations_delta."""
        if self.open != "text":
            return []
        return [self._delta({"type": "citations_delta", "citation": c}) for c in cited]

    def tool_use(self, call_id: str, name: str, arguments: str) -> list[bytes]:
        block = tool_use_block(call_id, name, arguments)
        out = self._begin("tool_use", {"type": "tool_use", "id": call_id, "name": name, "input": {}})
        out.append(self._delta({"type": "input_json_delta",
                                "partial_json": json.dumps(block["input"], ensure_ascii=False)}))
        return out + self._end()

    def finish(self, finish: str | None, stop_sequence: str | None, output_tokens: int) -> list[bytes]:
        out = self._end()
        if self.index < 0:   # nothing was written: one empty text block, as a whole Message has
            out += self._begin("text", {"type": "text", "text": ""}) + self._end()
        out.append(event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": stop_reason(finish, stop_sequence),
                                                     "stop_sequence": stop_sequence},
                                           "usage": {"output_tokens": output_tokens}}))
        return out + [event("message_stop", {"type": "message_stop"})]
