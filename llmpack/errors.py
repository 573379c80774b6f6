"""The one exception type the CLI turns into a single clear line instead of a traceback."""
from __future__ import annotations


class LlmpackError(Exception):
    """An error the user can act on. str(e) is one line that names the problem and, where
    possible, what to do next. Subclasses: GGUFError, RecipeError, ChatTemplateError, PackError, ..."""
