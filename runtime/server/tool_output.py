"""Tool calls in responses: finding them in each choice's text, streamed or not.

With `tool_choice` auto, a reply may be plain text or calls, and which one is only clear once
enough text has arrived. `ChoiceText` streams text as content as long as it cannot be the start
of a call (see `tool_calls.may_become_call`) and holds it back from the point where it might;
at the end, held text is either returned as calls (`finish_reason: "tool_calls"`) or released
as content. Forced calls (`required` or a named function) are held whole: the grammar
guarantees they parse.
"""
from __future__ import annotations

from llmpack.runtime.structured import tool_calls as T


class ChoiceText:
    def __init__(self, plan) -> None:
        self.plan = plan
        self.text = ""
        self.sent = 0

    def feed(self, delta: str) -> str:
        """Content that can be sent now."""
        if self.plan is None or not self.plan.reads_calls:
            return delta   # no calls to look for: nothing is held, so nothing is kept
        self.text += delta
        if self.plan.forced:
            cut = 0
        else:
            cut = T.may_become_call(self.text)
        if cut <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:cut], cut
        return out

    def finish(self) -> tuple[str, list[T.ToolCall]]:
        """(content not yet sent, tool calls)."""
        content, calls = read_calls(self.plan, self.text)
        if calls:
            return (content or "")[self.sent:], calls
        out, self.sent = self.text[self.sent:], len(self.text)
        return out, []


def chat_message(plan, text: str, reason: str) -> tuple[dict, str]:
    """The assistant message of a whole (non-streamed) choice, and its finish_reason."""
    content, calls = read_calls(plan, text)
    if not calls:
        return {"role": "assistant", "content": text}, reason
    return {"role": "assistant", "content": content, "tool_calls": [c.to_openai() for c in calls]}, "tool_calls"


def read_calls(plan, text: str) -> tuple[str | None, list[T.ToolCall]]:
    if plan is None or not plan.reads_calls:
        return text, []
    content, calls = T.parse_calls(text, plan.names)
    return content, calls if plan.parallel else calls[:1]


def stream_calls(calls: list[T.ToolCall]) -> dict:
    """The delta that announces a choice's calls, each whole (name and all arguments at once)."""
    return {"tool_calls": [c.to_openai(index=i) for i, c in enumerate(calls)]}
