"""The Responses API's streaming events, in the documented order:

    response.created, response.in_progress
    per output item:  response.output_item.added, response.content_part.added,
                      response.reasoning_text.delta | response.output_text.delta ...,
                      (a message that read files: response.output_text.annotation.added ..., the
                      server's file citations, once the text is whole)
                      response.reasoning_text.done | response.output_text.done,
                      response.content_part.done, response.output_item.done
    per call:         response.output_item.added, response.function_call_arguments.delta,
                      response.function_call_arguments.done, response.output_item.done
    response.completed (response.incomplete when max_output_tokens cut it; response.failed)

Each event is `event: TYPE` + `data: {...}` with a `sequence_number`; there is no `[DONE]`.
"""
from __future__ import annotations

import json
from typing import Any

from llmpack.runtime.server.responses.protocol import (call_item, message_item, new_id, output_items,
                                                       reasoning_item, response_object)


def sse(kind: str, data: dict) -> bytes:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return f"event: {kind}\ndata: ".encode() + payload + b"\n\n"


class ResponseStream:
    def __init__(self, body: dict, response_id: str, model: str, created: int) -> None:
        self.body, self.response_id, self.model, self.created = body, response_id, model, created
        self.seq = 0
        self.ids: dict[str, str] = {}
        self.index = -1                  # output_index of the latest item
        self.open: str | None = None     # "reasoning" | "message" while its text streams
        self.texts = {"reasoning": "", "message": ""}
        self.calls: list[Any] = []
        self.annotations: list[dict] = []   # the message's file citations, known once its text is whole

    def _ev(self, kind: str, **data: Any) -> bytes:
        out = sse(kind, {"type": kind, "sequence_number": self.seq, **data})
        self.seq += 1
        return out

    def start(self) -> list[bytes]:
        shell = response_object(self.body, self.response_id, self.model, self.created, status="in_progress", output=[])
        return [self._ev("response.created", response=shell), self._ev("response.in_progress", response=shell)]

    def _part(self, kind: str, text: str) -> dict:
        if kind == "reasoning":
            return {"type": "reasoning_text", "text": text}
        return {"type": "output_text", "text": text, "annotations": list(self.annotations), "logprobs": []}

    def _item(self, kind: str, text: str | None, status: str) -> dict:
        if kind == "reasoning":
            return reasoning_item(self.ids[kind], text, status)
        return message_item(self.ids[kind], text, status, list(self.annotations))

    def _open(self, kind: str) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = kind
        item_id = self.ids.setdefault(kind, new_id("rs" if kind == "reasoning" else "msg"))
        return out + [
            self._ev("response.output_item.added", output_index=self.index, item=self._item(kind, None, "in_progress")),
            self._ev("response.content_part.added", item_id=item_id, output_index=self.index, content_index=0,
                     part=self._part(kind, "")),
        ]

    def _close(self) -> list[bytes]:
        kind, self.open = self.open, None
        if kind is None:
            return []
        item_id, text = self.ids[kind], self.texts[kind]
        where = {"item_id": item_id, "output_index": self.index, "content_index": 0}
        done = (self._ev("response.reasoning_text.done", **where, text=text) if kind == "reasoning"
                else self._ev("response.output_text.done", **where, text=text, logprobs=[]))
        return [done, self._ev("response.content_part.done", **where, part=self._part(kind, text)),
                self._ev("response.output_item.done", output_index=self.index, item=self._item(kind, text, "completed"))]

    def delta(self, kind: str, text: str) -> list[bytes]:
        """More thinking (`kind` "reasoning") or answer ("message")."""
        if not text:
            return []
        out = [] if self.open == kind else self._open(kind)
        self.texts[kind] += text
        where = {"item_id": self.ids[kind], "output_index": self.index, "content_index": 0}
        if kind == "reasoning":
            return out + [self._ev("response.reasoning_text.delta", **where, delta=text)]
        return out + [self._ev("response.output_text.delta", **where, delta=text, logprobs=[])]

    def annotate(self, annotations: list[dict]) -> list[bytes]:
        """The message's file citations (at its end), each as response.output_text.annotation.added."""
        if not annotations or self.open != "message":
            return []
        where = {"item_id": self.ids["message"], "output_index": self.index, "content_index": 0}
        out = []
        for a in annotations:
            out.append(self._ev("response.output_text.annotation.added", **where,
                                annotation_index=len(self.annotations), annotation=a))
            self.annotations.append(a)
        return out

    def call(self, call: Any) -> list[bytes]:
        out = self._close()
        self.index += 1
        item_id = self.ids.setdefault(call.id, new_id("fc"))
        self.calls.append(call)
        return out + [
            self._ev("response.output_item.added", output_index=self.index, item=call_item(item_id, call, "in_progress", "")),
            self._ev("response.function_call_arguments.delta", item_id=item_id, output_index=self.index,
                     delta=call.arguments),
            self._ev("response.function_call_arguments.done", item_id=item_id, output_index=self.index,
                     name=call.name, arguments=call.arguments),
            self._ev("response.output_item.done", output_index=self.index, item=call_item(item_id, call, "completed")),
        ]

    def finish(self, finish: str | None, usage: dict) -> tuple[list[bytes], dict]:
        """The closing events and the final Response object (the one a stored response keeps)."""
        out = self._close()
        if self.index < 0:   # nothing was written: still one (empty) message, as the whole object has
            out += self._open("message") + self._close()
        status = "incomplete" if finish == "length" else "completed"
        final = response_object(self.body, self.response_id, self.model, self.created, status=status, usage=usage,
                                finish=finish, output=output_items(self.texts["reasoning"], self.texts["message"],
                                                                   self.calls, self.ids, annotations=self.annotations))
        return out + [self._ev(f"response.{status}", response=final)], final

    def failed(self, code: str, message: str) -> bytes:
        final = response_object(self.body, self.response_id, self.model, self.created, status="failed", output=[])
        final["error"] = {"code": code, "message": message}
        return self._ev("response.failed", response=final)
