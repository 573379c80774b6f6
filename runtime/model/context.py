"""How many tokens of context to serve with, decided in one place for `llmpack run`, a built file
and `llmpack build` (which records the number the file will use): what was asked (--ctx), else
the recipe's, capped by what the model was trained on. No imports: the command line reads it."""
from __future__ import annotations

DEFAULT_N_CTX = 4096   # when neither the user, the recipe nor the model says


def choose_n_ctx(asked: int | None, recipe_context: int | None, trained: int | None) -> int:
    if asked:
        return asked
    wanted = recipe_context or DEFAULT_N_CTX
    return min(wanted, trained) if trained else wanted
