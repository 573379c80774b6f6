"""Server-sent events that carry their type in an `event:` line, as the Responses and Anthropic
streams do (OpenAI's chat stream has data lines only: server_fixtures.sse_events)."""
from __future__ import annotations

import json

import requests


def named_events(resp: requests.Response) -> list[tuple[str, dict]]:
    """(the `event:` name, the data) of each event; the name must equal the data's `type`."""
    out, name = [], None
    for line in resp.iter_lines():
        if line.startswith(b"event: "):
            name = line[7:].decode()
        elif line.startswith(b"data: "):
            data = json.loads(line[6:])
            assert data["type"] == name, (name, data)
            out.append((name, data))
    return out
