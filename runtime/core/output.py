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

from llmpack.runtime.chat.reasoning import ReasoningParser, ReasoningSyntax, split_reasoning
from llmpack.runtime.engine.outputs import TokenLogprob
from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.core.plan import OutputPlan
from llmpack.runtime.documents.attribution import Source
from llmpack.runtime.structured import tool_calls as T

if TYPE_CHECKING:
    from llmpack.runtime.core.generation import Generation


class ChoiceText:
    """One choice's reply as it streams: a reasoning model's thinking split off first
    (runtime/chat/reasoning.py), then the answer's possible tool calls held back."""

    def __init__(self, plan: OutputPlan | None, reasoning: ReasoningSyntax | None = None,
                 thinking_open: bool = False) -> None:
        self.plan = plan
        self.text = ""
        self.sent = 0
        self.parser = ReasoningParser(reasoning, started_open=thinking_open) if reasoning is not None else None

    def split(self, delta: str) -> tuple[str, str]:
        """(thinking, answer text that can be sent now)."""
        if self.parser is None:
            return "", self.feed(delta)
        thinking, answer = self.parser.feed(delta)
        return thinking, self.feed(answer) if answer else ""

    def end_thinking(self) -> tuple[str, str]:
        """At the choice's end: (thinking, answer text) the reasoning parser still held."""
        if self.parser is None:
            return "", ""
        thinking, answer = self.parser.finish()
        return thinking, self.feed(answer) if answer else ""

    def feed(self, delta: str) -> str:
        """Answer text that can be sent now."""
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
    reasoning: str = ""                              # a reasoning model's thinking, to show now
    stop: str | None = None                          # the stop string that ended the choice, if one did
    sources: list[Source] | None = None              # at the choice's end, when the request read documents


@dataclass(slots=True)
class Step:
    """What one engine output adds to a streamed reply: prompt progress (llama-server's
    `prompt_progress`, when asked for and the prompt advanced) and the choices' events."""

    progress: dict | None
    choices: list[ChoiceEvent]


def stream_steps(gen: "Generation", chat: bool) -> Iterator[Step]:
    """A request's reply as it is made. Raises `cancelled()` when the server stops it."""
    prep = gen.prep
    held = [ChoiceText(prep.plan, prep.reasoning, prep.thinking_open) for _ in range(gen.num_choices)] if chat else []
    progress_sent = 0   # the last `processed` reported; each step that read more of the prompt reports
    said: dict[int, list[str]] = {}   # each choice's answer so far, to attribute at its end
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
            event = ChoiceEvent(base + c.index, c.text, [], c.logprobs, c.finish_reason,
                                stop=c.stop_reason if isinstance(c.stop_reason, str) else None)
            if chat:
                _hold(held[event.index], event)
                if prep.attribution is not None:
                    said.setdefault(event.index, []).append(event.text)
                    if event.finish_reason:
                        event.sources = prep.attribution.sources("".join(said.pop(event.index)))
            events.append(event)
        yield Step(progress, events)


def _hold(held: ChoiceText, event: ChoiceEvent) -> None:
    """Text that may be a tool call is held back until the choice ends, when it becomes calls."""
    thinking, text = held.split(event.text) if event.text else ("", "")
    if event.finish_reason:
        last_thinking, last_text = held.end_thinking()
        rest, calls = held.finish()
        thinking, text = thinking + last_thinking, text + last_text + rest
        if calls:
            event.tool_calls, event.finish_reason = calls, "tool_calls"
    event.text, event.reasoning = text, thinking


@dataclass(slots=True)
class FinalChoice:
    index: int
    text: str | None                 # None: the reply is only tool calls
    tool_calls: list[T.ToolCall]
    finish_reason: str
    logprobs: list[TokenLogprob]
    reasoning: str | None = None     # a reasoning model's thinking, split from the text
    stop: str | None = None          # the stop string that ended it, if one did
    sources: list[Source] | None = None   # the places that support its sentences; None: read no documents


def final_choices(gen: "Generation", chat: bool) -> list[FinalChoice]:
    """A request's whole reply, once it is made. Raises `cancelled()` when the server stopped it."""
    texts: dict[int, list[str]] = {}
    lps: dict[int, list[TokenLogprob]] = {}
    stops: dict[int, str] = {}
    for base, out in gen.outputs():
        for c in out.outputs:
            texts.setdefault(base + c.index, []).append(c.text)
            if isinstance(c.stop_reason, str):
                stops[base + c.index] = c.stop_reason
            if c.logprobs:
                lps.setdefault(base + c.index, []).extend(c.logprobs)
    if "abort" in gen.reasons.values():
        raise cancelled()
    choices = []
    for idx in range(gen.num_choices):
        text, reason = "".join(texts.get(idx, [])), gen.reasons.get(idx, "stop")
        thinking = None
        if chat and gen.prep.reasoning is not None:
            thinking, text = split_reasoning(text, gen.prep.reasoning, started_open=gen.prep.thinking_open)
        content: str | None = text
        calls: list[T.ToolCall] = []
        if chat:
            content, calls = read_calls(gen.prep.plan, text)
            if calls:
                reason = "tool_calls"
            else:
                content = text
        sources = gen.prep.attribution.sources(content or "") if chat and gen.prep.attribution is not None else None
        choices.append(FinalChoice(idx, content, calls, reason, lps.get(idx, []), thinking or None, stops.get(idx),
                                   sources))
    return choices
