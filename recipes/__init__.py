"""Per-model-family presets as TOML files (llmpack.recipes)."""
