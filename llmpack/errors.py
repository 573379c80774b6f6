"""The error contract: what the user sees when llmpack cannot do what was asked.

Every error the user can act on is an :class:`LlmpackError` subclass whose ``str()`` is one
line naming the problem and, where possible, what to do next. The CLI (``llmpack ...``) and a
built program print it as ``llmpack: error: <line>`` and exit with status 2; the server shows
it on the chat page and in ``/health`` when the model cannot be loaded. Anything else that
escapes is a bug: the CLI lets its traceback show (exit 1), a built program prints it and
asks for a report. Subclasses live next to the code that raises them; docs/ARCHITECTURE.md,
"The error contract", lists each one with where it is raised and how it reaches the user.
"""
from __future__ import annotations


class LlmpackError(Exception):
    """An error the user can act on; str(e) is one line that says what to do next."""
