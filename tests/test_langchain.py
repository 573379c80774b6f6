"""A widely used framework as a second real client: LangChain's ChatOpenAI against `llmpack run`
on the demo model - `with_structured_output(PydanticModel)` and `bind_tools(...)`, including
sending the tool's result back; and LangChain's ChatOllama (langchain-ollama) and ChatAnthropic
(langchain-anthropic) against the instruct demo model: invoke, stream and a tool call."""
from __future__ import annotations


import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from server_fixtures import LiveServer



class Pancakes(BaseModel):
    """A pancake recipe."""

    title: str = Field(max_length=40)
    minutes: int
    vegetarian: bool
    ingredients: list[str] = Field(max_length=4)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return "sunny"


def llm(srv: LiveServer, **kw) -> ChatOpenAI:
    return ChatOpenAI(base_url=srv.url + "/v1", api_key="not-needed", model=srv.model_id, max_retries=0,
                      timeout=900, **{"max_tokens": 80, "temperature": 0, **kw})


@pytest.mark.demo
@pytest.mark.parametrize("method", ["json_schema", "json_mode", "function_calling"])
def test_with_structured_output(demo_server: LiveServer, method):
    prompt = "Give me a quick pancake recipe." + (" Reply in JSON." if method == "json_mode" else "")
    out = llm(demo_server).with_structured_output(Pancakes, method=method).invoke(prompt) if method != "json_mode" \
        else llm(demo_server).with_structured_output(Pancakes.model_json_schema(), method=method).invoke(prompt)
    if method == "json_mode":   # JSON mode promises JSON, not this schema: LangChain returns a dict
        assert isinstance(out, dict)
    else:
        assert isinstance(out, Pancakes) and len(out.title) <= 40 and len(out.ingredients) <= 4


@pytest.mark.demo
def test_bind_tools_and_send_the_result_back(demo_server: LiveServer):
    # one call: a base model forced to call would otherwise go on calling as long as it may
    chat = llm(demo_server).bind_tools([add, get_weather], tool_choice="add", parallel_tool_calls=False)
    question = HumanMessage("What is 2 + 3?")
    msg = chat.invoke([question])
    (call,) = msg.tool_calls
    assert call["name"] == "add" and set(call["args"]) == {"a", "b"}
    assert all(isinstance(v, int) for v in call["args"].values())
    result = ToolMessage(content=str(add.invoke(call["args"])), tool_call_id=call["id"])
    final = llm(demo_server, max_tokens=10).bind_tools([add, get_weather]).invoke([question, msg, result])
    assert isinstance(final.content, str)


@pytest.mark.demo
def test_bind_tools_any_streams(demo_server: LiveServer):
    chunks = list(llm(demo_server).bind_tools([get_weather], tool_choice="any").stream("Weather in Rome?"))
    merged = chunks[0]
    for c in chunks[1:]:
        merged += c
    (call,) = merged.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)


# ---------------------------------------------------------------- LangChain's Ollama and Anthropic chat models
# Against the instruct demo model (a model that answers): ChatOllama sends /api/chat with
# `keep_alive` and `options`, ChatAnthropic /v1/messages with x-api-key.

def ollama_llm(srv: LiveServer):
    from langchain_ollama import ChatOllama

    return ChatOllama(base_url=srv.url, model="qwen", temperature=0, num_predict=40, keep_alive="5m")


def anthropic_llm(srv: LiveServer):
    from langchain_anthropic import ChatAnthropic

    return ChatAnthropic(base_url=srv.url, api_key="not-needed", model="claude-sonnet-4-5", temperature=0,
                         max_tokens=40, max_retries=0, default_request_timeout=300)


CHAT_MODELS = {"langchain-ollama": ollama_llm, "langchain-anthropic": anthropic_llm}


@pytest.mark.instruct
@pytest.mark.parametrize("client", list(CHAT_MODELS))
def test_invoke_stream_and_tool_call(instruct_server: LiveServer, client: str):
    chat = CHAT_MODELS[client](instruct_server)
    question = "What is the capital of France? Answer in one sentence."
    answer = chat.invoke(question).content
    assert "Paris" in answer, answer
    pieces = [c.content for c in chat.stream(question)]
    assert len([p for p in pieces if p]) > 1 and "".join(map(str, pieces)) == answer
    msg = chat.bind_tools([get_weather]).invoke("What is the weather like in Paris right now?")
    (call,) = msg.tool_calls
    assert call["name"] == "get_weather" and call["args"]["city"] == "Paris"
