"""Splitting a reasoning model's thinking from its answer, as the text streams.

Reasoning models write their thinking before the answer, in a syntax their chat template knows:
Qwen3, QwQ and the DeepSeek-R1 distills wrap it in `<think>…</think>`; gpt-oss writes it in the
"analysis" channel of OpenAI's harmony format and the answer in the "final" one. Every API hands
the two apart (OpenAI-compatible `reasoning_content`/`reasoning`, Responses reasoning items,
Anthropic `thinking` blocks, Ollama's `thinking`), and the next turn's prompt must not carry the
thinking back. This module is protocol-neutral: it sees text deltas and returns
(thinking, answer) deltas; each API names them its own way.

Streaming-safe: a marker may arrive cut in half across deltas (`<thi` + `nk>`), so any tail that
could still grow into a marker is held back until it cannot, and nothing is emitted twice. Like
llama-server, an opening marker counts only at the very start of the output (after blank space):
a model quoting `<think>` in its answer keeps it. When the template itself opened the thinking
(DeepSeek-R1 ends its generation prompt with `<think>\\n`), the parser starts inside it
(`started_open`, see `opens_thinking`).
"""
from __future__ import annotations

from dataclasses import dataclass

START, THINKING, BETWEEN, ANSWER = "start", "thinking", "between", "answer"


@dataclass(frozen=True)
class ReasoningSyntax:
    """How one family marks its thinking. `answer` markers are dropped where the answer begins
    (harmony's `<|start|>assistant<|channel|>final<|message|>`); a template may also skip the
    thinking and open the answer channel directly."""

    name: str
    open: tuple[str, ...]
    close: tuple[str, ...]
    answer: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()     # dropped between thinking and answer (harmony's `<|start|>assistant`)
    cut: str = ""                  # appended to end the thinking early (--reasoning-budget); the model writes what follows

    def markers(self, state: str) -> tuple[str, ...]:
        if state == THINKING:
            return self.close
        if state in (START, BETWEEN):
            return self.open + self.answer + self.skip
        return ()


THINK = ReasoningSyntax("think", open=("<think>",), close=("</think>",), cut="\n</think>")
HARMONY = ReasoningSyntax(
    "harmony",
    open=("<|channel|>analysis<|message|>",),
    close=("<|end|>",),
    answer=("<|channel|>final<|message|>",),
    skip=("<|start|>assistant",),
    cut="<|end|><|start|>assistant<|channel|>final<|message|>",
)
SYNTAXES = {s.name: s for s in (THINK, HARMONY)}
REASONING_FORMATS = ("auto", "none", *SYNTAXES)   # --reasoning-format: auto reads the template


def syntax_for_template(template: str | None, fmt: str = "auto") -> ReasoningSyntax | None:
    """The syntax a chat template's model thinks in, or None (not a reasoning model, or
    `--reasoning-format none`, which leaves thinking in the answer as llama-server's `none` does)."""
    if fmt not in REASONING_FORMATS:
        raise ValueError(f"reasoning format must be one of {', '.join(REASONING_FORMATS)}; got {fmt!r}")
    if fmt == "none":
        return None
    if fmt != "auto":
        return SYNTAXES[fmt]
    text = template or ""
    if "<|channel|>" in text and "<|message|>" in text:
        return HARMONY
    if "<think>" in text or "</think>" in text:
        return THINK
    return None


def opens_thinking(prompt: str, syntax: ReasoningSyntax | None) -> bool:
    """True when the rendered prompt already opened the thinking (DeepSeek-R1's template ends with
    `<think>\\n`; Qwen3 with enable_thinking=false ends with a closed, empty `<think></think>`)."""
    if syntax is None:
        return False
    tail = prompt.rstrip()
    return any(tail.endswith(m) for m in syntax.open)


THINK_LEVELS = ("low", "medium", "high")


class ThinkingSwitchError(ValueError):
    """A request's thinking switch cannot be honoured (an unknown level, or thinking asked of a
    model that does not think); the message names the value (HTTP 400)."""


def thinking_switch(template: str | None) -> str | None:
    """The variable a chat template reads to turn thinking on, off or to a level, if any:
    Qwen3's `enable_thinking`, gpt-oss's `reasoning_effort`. DeepSeek-R1 has none: it always thinks."""
    text = template or ""
    for name in ("enable_thinking", "reasoning_effort"):
        if name in text:
            return name
    return None


def thinking_template_kwargs(template: str | None, think: bool | str | None) -> dict[str, object]:
    """The template variables that carry a request's thinking switch, in one neutral shape:
    `think` is None (the model's default), True/False, or a level "low"/"medium"/"high"
    (Ollama's `think`; OpenAI's `reasoning_effort` and Anthropic's `thinking` map onto it).

    Qwen3 takes a level as "on"; gpt-oss cannot stop thinking, so False asks for the least
    ("low"), as Ollama does. A model with no switch is left as it is: Codex- and Claude-style
    clients send their thinking settings to every model (Ollama's room refuses `think` for a
    model that does not think, as Ollama does)."""
    if think is None:
        return {}
    if isinstance(think, str) and think not in THINK_LEVELS:
        raise ThinkingSwitchError(f"think must be true, false or one of {', '.join(THINK_LEVELS)}; got {think!r}")
    if not isinstance(think, (bool, str)):
        raise ThinkingSwitchError(f"think must be true, false or one of {', '.join(THINK_LEVELS)}; got {think!r}")
    switch = thinking_switch(template)
    if switch == "enable_thinking":
        return {"enable_thinking": think is not False}
    if switch == "reasoning_effort":
        return {"reasoning_effort": think if isinstance(think, str) else ("medium" if think else "low")}
    return {}


def _partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of one of `markers`."""
    longest = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), longest, -1):
            if text.endswith(m[:k]):
                longest = k
                break
    return longest


class ReasoningParser:
    """Feed text deltas in order; each call returns the (thinking, answer) text now safe to emit.

    `in_thinking` says whether the model is thinking right now (the server counts tokens against
    --reasoning-budget while it is). Blank space around the thinking is trimmed, as the peers do:
    it is held back until a word or the closing marker shows which side it belongs to."""

    def __init__(self, syntax: ReasoningSyntax, *, started_open: bool = False) -> None:
        self.syntax = syntax
        self.state = THINKING if started_open else START
        self._buf = ""
        self.thinking = ""     # everything split out so far, whole
        self.answer = ""
        self.saw_thinking = started_open
        self._thought = False  # has this thinking block emitted text yet (leading blank space is trimmed)

    @property
    def in_thinking(self) -> bool:
        return self.state == THINKING

    def feed(self, delta: str) -> tuple[str, str]:
        self._buf += delta
        think_out: list[str] = []
        answer_out: list[str] = []
        while self._buf:
            if self.state == ANSWER:
                answer_out.append(self._buf)
                self._buf = ""
                break
            if self.state != THINKING or not self._thought:
                self._buf = self._buf.lstrip()   # blank space before thinking or answer
                if not self._buf:
                    break
            markers = self.syntax.markers(self.state)
            hit, marker = self._earliest(markers)
            if self.state == THINKING:
                if hit == -1:
                    keep = _partial_marker(self._buf, markers)
                    body = self._buf[:len(self._buf) - keep]
                    keep += len(body) - len(body.rstrip())   # trailing blank space: wait and see
                    cut = len(self._buf) - keep
                    think_out.append(self._buf[:cut])
                    self._thought = self._thought or cut > 0
                    self._buf = self._buf[cut:]
                    break
                think_out.append(self._buf[:hit].rstrip())
                self._buf = self._buf[hit + len(marker):]
                self.state = BETWEEN
                continue
            if hit != 0:   # START/BETWEEN: text that is no marker, or could not become one, is the answer
                if hit == -1 and _partial_marker(self._buf, markers) == len(self._buf):
                    break  # the whole buffer may still grow into a marker
                self.state = ANSWER
                continue
            self._buf = self._buf[len(marker):]
            if marker in self.syntax.open:
                self.state, self.saw_thinking, self._thought = THINKING, True, False
            elif marker in self.syntax.answer:
                self.state = ANSWER
                self._buf = self._buf.lstrip()
        return self._collect(think_out, answer_out)

    def finish(self) -> tuple[str, str]:
        """The end of the output: release what was held back. An unclosed thinking stays thinking
        (the model ran out of tokens mid-thought); a held partial marker was just text."""
        rest, self._buf = self._buf, ""
        if self.state == THINKING:
            return self._collect([rest.rstrip() if self._thought else rest.strip()], [])
        if self.state in (START, BETWEEN) and not rest.strip():
            return self._collect([], [])
        return self._collect([], [rest])

    def _earliest(self, markers: tuple[str, ...]) -> tuple[int, str]:
        best, found = -1, ""
        for m in markers:
            i = self._buf.find(m)
            if i != -1 and (best == -1 or i < best or (i == best and len(m) > len(found))):
                best, found = i, m
        return best, found

    def _collect(self, think_out: list[str], answer_out: list[str]) -> tuple[str, str]:
        thinking, answer = "".join(think_out), "".join(answer_out)
        self.thinking += thinking
        self.answer += answer
        return thinking, answer


def split_reasoning(text: str, syntax: ReasoningSyntax | None, *, started_open: bool = False) -> tuple[str, str]:
    """(thinking, answer) of a whole output; with no syntax, the text is all answer."""
    if syntax is None:
        return "", text
    parser = ReasoningParser(syntax, started_open=started_open)
    parser.feed(text)
    parser.finish()
    return parser.thinking, parser.answer
