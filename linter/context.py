"""What a check may know besides the file: settings from configuration and the model table."""

from __future__ import annotations

from dataclasses import dataclass

from cachewarden.proxy.engine.models import ModelInfo

from .sources import Source
from .tokens import count_tokens, model_info

# Static text after a volatile value shorter than this (a closing word or punctuation) is "the very end".
VOLATILE_TAIL_TOKENS = 5
LARGE_STATIC_BLOCK_TOKENS = 500
LOW_SHARE = 0.4
SHARE_MIN_STATIC_TOKENS = 128


@dataclass(frozen=True, slots=True)
class Settings:
    model: str | None = None
    tojson_sort_keys: bool = True  # jinja2's default policy json.dumps_kwargs = {"sort_keys": True}


@dataclass(slots=True)
class Context:
    source: Source
    settings: Settings
    model: str | None = None  # from the file itself (request body `model`, prompty front matter)
    provider: str = "openai-chat"

    @property
    def info(self) -> ModelInfo:
        return model_info(self.model or self.settings.model, self.provider)

    def tokens(self, text: str) -> int:
        return count_tokens(text, self.info)
