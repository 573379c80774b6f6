"""The single-machine server as `serve --ray`'s deployments run it: `SERVED`, which the CLI hands
runtime/scale/ (scale imports nothing of the server: tests/test_layers.py). Here, beside the CLI,
because it is where the two meet. Ray pickles its names by reference, so a replica loads the model
in its own process and the ingress guards with the single server's own rules."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from llmpack.runtime.model.source import ModelFile
from llmpack.runtime.scale.served import ServedApp, Worded
from llmpack.runtime.server.app import create_app
from llmpack.runtime.server.config import ServeConfig
from llmpack.runtime.server.http import security
from llmpack.runtime.server.http.errors import error_response
from llmpack.runtime.server.http.options import ServerOptions
from llmpack.runtime.server.http.state import ServerState


def replica(model: ModelFile, config: ServeConfig, options: dict, warn: Callable[[str], None]) -> tuple[Any, Any]:
    """The single-machine app with `model` loaded, and its engine."""
    from llmpack.runtime.server.lifecycle.prepare import build_model   # lazy: llama.cpp, in the replica only

    state = ServerState(config.display_name)
    app = create_app(state, ServerOptions(**options))
    state.set_ready(build_model(model, config, warn=warn, files=state.files))
    return app, state.model.engine


class Gate:
    """The single server's guards on an app with no model: its routes say which are public and
    how large each body may be, and its error handlers word a refusal in the route's own shape."""

    def __init__(self, options: dict) -> None:
        self.options = ServerOptions(**options)
        self.app = create_app(ServerState("ingress"), self.options)
        self.names = security.allowed_names(self.options)

    def refusal(self, method: str, path: str, headers: Mapping[str, str], host: str,
                length: int | None) -> Worded | None:
        endpoint = security.endpoint_for(self.app, method, path)
        refused = security.refusal(self.app, self.options, self.names, method, endpoint, headers, host, length)
        return None if refused is None else self._word(refused, method, path, headers)

    def body_limit(self, method: str, path: str) -> int:
        endpoint = security.endpoint_for(self.app, method, path)
        return security.route_body_limit(self.app, endpoint, self.options.max_body)

    def too_large(self, method: str, path: str, headers: Mapping[str, str], limit: int) -> Worded:
        return self._word(security.too_large(limit), method, path, headers)

    def authorized(self, headers: Mapping[str, str]) -> bool:
        return security.authorized(self.options, headers)

    def _word(self, refused: security.Refusal, method: str, path: str, headers: Mapping[str, str]) -> Worded:
        with self.app.test_request_context(path, method=method, headers=list(headers.items())):
            resp = error_response(refused.status, refused.message, refused.type, refused.code)
        return resp.status_code, [(k, v) for k, v in resp.headers.items() if k.lower() != "content-length"], \
            resp.get_data()


SERVED = ServedApp(replica=replica, gate=Gate)
