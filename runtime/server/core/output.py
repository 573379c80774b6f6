"""The engine's output -> what a reply holds, per choice: text, tool calls, a finish reason,
logprobs; streamed (`stream_steps`) or whole (`final_choices`). Every wire format renders these.

With tool_choice auto, a reply may be plain text or calls, and which one is only clear once
enough text has arrived. `ChoiceText` passes text on as long as it cannot be the start of a call
(`tool_calls.may_become_call`) and holds it back from the point where it might; at the end, held
text is either returned as calls (finish reason "tool_calls") or released as text. Forced calls
(`required` or a named function) are held whole: the grammar guarantees they parse.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from llmpack.runtime.engine.outputs import TokenLogprob
from llmpack.runtime.server.core.errors import ApiError
from llmpack.runtime.server.core.plan import OutputPlan
from llmpack.runtime.structured import tool_calls as T

if TYPE_CHECKING:
    from llmpack.runtime.server.core.generation import Generation


class ChoiceText:
    def __init__(self, plan: OutputPlan | None) -> None:
        self.plan = plan
        self.text = ""
        self.sent = 0

    def feed(self, delta: str) -> str:
        """Text that can be sent now."""
        if self.plan is None or not self.plan.reads_calls:
            return delta   # no calls to look for: nothing is held, so nothing is kept
        self.text += delta
        cut = 0 if self.plan.forced else T.may_become_call(self.text)
        if cut <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:cut], cut
        return out

    def finish(self) -> tuple[str, list[T.ToolCall]]:
        """(text not yet sent, tool calls)."""
        content, calls = read_calls(self.plan, self.text)
        if calls:
            return (content or "")[self.sent:], calls
        out, self.sent = self.text[self.sent:], len(self.text)
        return out, []


def read_calls(plan: OutputPlan | None, text: str) -> tuple[str | None, list[T.ToolCall]]:
    """(the reply's text without its calls, the calls), for a whole reply."""
    if plan is None or not plan.reads_calls:
        return text, []
    content, calls = T.parse_calls(text, plan.names)
    return content, calls if plan.parallel else calls[:1]


def cancelled() -> ApiError:
    return ApiError(503, "The request was cancelled because the server is shutting down.", code="cancelled")


@dataclass(slots=True)
class ChoiceEvent:
    """One choice's new output in one engine step."""

    index: int
    text: str = ""                                   # text to show now
    tool_calls: list[T.ToolCall] = field(default_factory=list)   # whole calls, at the choice's end
    logprobs: list[TokenLogprob] | None = None
    finish_reason: str | None = None                 # stop | length | tool_calls


@dataclass(slots=True)
class Step:
    """What one engine output adds to a streamed reply: prompt progress (llama-server's
    `prompt_progress`, when asked for and the prompt advanced) and the choices' events."""

    progress: dict | None
    choices: list[ChoiceEvent]


def stream_steps(gen: "Generation", chat: bool) -> Iterator[Step]:
    """A request's reply as it is made. Raises `cancelled()` when the server stops it."""
    held = [ChoiceText(gen.prep.plan) for _ in range(gen.num_choices)] if chat else []
    progress_sent = 0   # the last `processed` reported; each step that read more of the prompt reports
    for base, out in gen.outputs():
        progress = None
        if gen.prep.return_progress and gen.processed > progress_sent:
            progress = gen.prompt_progress()
            progress_sent = progress["processed"]
        events = []
        for c in out.outputs:
            if c.finish_reason == "abort":
                raise cancelled()
            if not (c.text or c.logprobs or c.finish_reason):
                continue
            event = ChoiceEvent(base + c.index, c.text, [], c.logprobs, c.finish_reason)
            if chat:
                _hold(held[event.index], event)
            events.append(event)
        yield Step(progress, events)


def _hold(held: ChoiceText, event: ChoiceEvent) -> None:
    """Text that may be a tool call is held back until the choice ends, when it becomes calls."""
    text = held.feed(event.text) if event.text else ""
    if event.finish_reason:
        rest, calls = held.finish()
        text += rest
        if calls:
            event.tool_calls, event.finish_reason = calls, "tool_calls"
    event.text = text


@dataclass(slots=True)
class FinalChoice:
    index: int
    text: str | None                 # None: the reply is only tool calls
    tool_calls: list[T.ToolCall]
    finish_reason: str
    logprobs: list[TokenLogprob]


def final_choices(gen: "Generation", chat: bool) -> list[FinalChoice]:
    """A request's whole reply, once it is made. Raises `cancelled()` when the server stopped it."""
    texts: dict[int, list[str]] = {}
    lps: dict[int, list[TokenLogprob]] = {}
    for base, out in gen.outputs():
        for c in out.outputs:
            texts.setdefault(base + c.index, []).append(c.text)
            if c.logprobs:
                lps.setdefault(base + c.index, []).extend(c.logprobs)
    if "abort" in gen.reasons.values():
        raise cancelled()
    choices = []
    for idx in range(gen.num_choices):
        text, reason = "".join(texts.get(idx, [])), gen.reasons.get(idx, "stop")
        content: str | None = text
        calls: list[T.ToolCall] = []
        if chat:
            content, calls = read_calls(gen.prep.plan, text)
            if calls:
                reason = "tool_calls"
            else:
                content = text
        choices.append(FinalChoice(idx, content, calls, reason, lps.get(idx, [])))
    return choices
