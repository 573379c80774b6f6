"""The one error type the core and the HTTP layer raise: a status, a message, and the request
field at fault. The core knows no wire format, so `body()` is only the default shape (OpenAI's
`{"error": {message, type, param, code}}`, also used by /health and the page's routes); each
protocol room renders the same fields in its own shape."""
from __future__ import annotations

_ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "rate_limit_error"}


class ApiError(Exception):
    """An error answered with `status`; `param` names the request field at fault."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str | None, message: str, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)
