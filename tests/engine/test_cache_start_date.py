"""A provider's caching start date (CacheRules.since): requests made before it never read.

OpenAI introduced prompt caching on 2024-10-01 (openai.com/index/api-prompt-caching); the recorded
crewAI requests of September 2024 report no cached tokens where a shared prefix would have read.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

import pytest
from cachewarden.proxy.engine.cache_model import predict
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.engine.models import ModelTable, load_model_table
from cachewarden.proxy.engine.prompt import Prompt, Segment


@dataclass(frozen=True)
class Match:
    common_prefix_tokens: int
    held_prefix_tokens: int


def _epoch(day: str) -> float:
    return datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.UTC).timestamp()


def test_openai_reads_only_from_the_start_date_on() -> None:
    table = load_model_table()
    rules = table.lookup("gpt-4o", "openai-chat").cache
    assert rules.since == "2024-10-01"
    prompt = Prompt("openai-chat", "gpt-4o", (Segment("messages[0]", "message", "word " * 3000, "user", 0),))
    tp = PromptCounter(table).tokenize(prompt)
    shared = Match(len(tp.tokens), len(tp.tokens))

    def cached(now: float | None) -> int:
        return predict(prompt, tp, rules, shared, lambda _: {}, now=now).cached_tokens

    assert cached(_epoch("2024-09-24T21:40:33")) == 0
    after = cached(_epoch("2024-10-01T00:00:01"))
    assert after >= 1024 and after == cached(None)
    # A replay without timestamps counts from 0: that is no date, so the rule does not apply.
    assert cached(3.0) == after
    # Models without a start date read at any time.
    assert predict(prompt, tp, replace(rules, since=""), shared, lambda _: {}, now=0.0).cached_tokens == after


def test_since_must_be_a_date() -> None:
    raw = {"profiles": {"p": {"mode": "prefix", "min_tokens": 0, "since": "October"}}, "models": []}
    with pytest.raises(ConfigError, match="since"):
        ModelTable(raw)


def test_an_unquoted_yaml_date_is_read_as_its_iso_text() -> None:
    raw = {"profiles": {"p": {"mode": "prefix", "min_tokens": 0, "since": datetime.date(2024, 10, 1)}}}
    assert ModelTable({**raw, "models": []}).profiles["p"].since == "2024-10-01"
