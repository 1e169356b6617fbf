"""Token counts for size rules: the model's real tokenizer (o200k / cl100k / hf:PATH, Claude scaled)."""

from __future__ import annotations

import functools

from cachewarden.proxy.engine.models import ModelInfo, ModelTable, load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer

DEFAULT_MODEL = "gpt-4o"


@functools.cache
def _table() -> ModelTable:
    return load_model_table()  # read once per run, not once per model name


@functools.cache
def model_info(model: str | None, provider: str = "openai-chat") -> ModelInfo:
    return _table().lookup(model or DEFAULT_MODEL, provider)


def count_tokens(text: str, info: ModelInfo) -> int:
    """Input tokens the provider would count for ``text`` (Claude: o200k × the model's ratio)."""
    if not text:
        return 0
    n = len(get_tokenizer(info.tokenizer).encode(text))
    return round(n * info.ratio) if info.ratio != 1.0 else n
