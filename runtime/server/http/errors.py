"""Errors as HTTP responses, in the default (OpenAI) shape `{"error": {message, type, param, code}}`,
or in the shape of the protocol room whose route was asked (`register_shape`: Anthropic's, Ollama's),
the guards' 401 and 403 included; tracebacks go to stderr, never to clients."""
from __future__ import annotations

import sys
import traceback
from typing import Callable

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from llmpack.runtime.core.errors import ApiError
from llmpack.runtime.server.http.options import ServerOptions

_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large", 415: "unsupported_media_type"}


_SHAPES: dict[str, Callable[[ApiError], Response]] = {}


def register_shape(blueprint: str, render: Callable[[ApiError], Response]) -> None:
    """Errors on `blueprint`'s routes are rendered by `render` (a protocol room's own shape)."""
    _SHAPES[blueprint] = render


def error_response(status: int, message: str, type: str | None = None, code: str | None = None,
                   param: str | None = None, headers: dict | None = None) -> Response:
    err = ApiError(status, message, param=param, code=code, type=type, headers=headers)
    try:
        render = _SHAPES.get(request.blueprint or "")
    except RuntimeError:   # outside a request
        render = None
    if render is not None:
        return render(err)
    resp = jsonify(err.body())
    resp.status_code = status
    resp.headers.update(err.headers)
    return resp


def _body_limit(options: ServerOptions) -> int:
    """The limit of this request (routes that carry files raise it), else the app's."""
    try:
        return request.max_content_length or options.max_body
    except RuntimeError:   # outside a request
        return options.max_body


def install_error_handlers(app: Flask, options: ServerOptions) -> None:
    """Every error (ours, Flask's 404/405/413, an unexpected exception) answered in one shape."""

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.message, exc.type, exc.code, exc.param, exc.headers)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        status = exc.code or 500
        message = {404: "Not found.", 405: "Method not allowed for this route.",
                   413: f"The request body is larger than {_body_limit(options) // (1024 * 1024)} MiB."}.get(
            status, exc.description or exc.name)
        resp = error_response(status, message, code=_CODES.get(status))
        if status == 405:
            for key, value in exc.get_headers():
                if key.lower() == "allow":
                    resp.headers["Allow"] = value
        return resp

    @app.errorhandler(Exception)
    def _internal(exc: Exception):
        traceback.print_exc(file=sys.stderr)
        return error_response(500, "Internal server error.", code="internal_error")
