"""A free TCP port on the loopback, for a server a test starts itself."""
from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; another process could take it before the
    test's server binds it, which on a test machine does not happen in practice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
