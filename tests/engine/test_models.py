"""The model table: lookups, user overrides, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.engine.models import load_model_table


def test_longest_prefix_wins() -> None:
    table = load_model_table()
    assert table.lookup("gpt-5.6-sol").cache.profile == "openai-breakpoints"
    assert table.lookup("gpt-5-mini").cache.profile == "openai-legacy"
    assert table.lookup("gpt-4-0613").tokenizer == "cl100k_base"
    assert table.lookup("gpt-4o-mini").tokenizer == "o200k_base"
    assert table.lookup("claude-opus-4-7", "anthropic").cache.min_tokens == 2048
    assert table.lookup("claude-haiku-4-5-20251001", "anthropic").cache.min_tokens == 4096


def test_vendor_prefixes_and_defaults() -> None:
    table = load_model_table()
    bedrock = table.lookup("us.anthropic.claude-3-5-haiku-20241022-v1:0", "anthropic")
    assert bedrock.tokenizer == "claude" and bedrock.cache.min_tokens == 2048
    unknown = table.lookup("my-finetune", "anthropic")
    assert unknown.cache.profile == "anthropic" and unknown.tokenizer == "claude"
    assert table.lookup("my-finetune", "openai-chat").cache.profile == "openai-legacy"


def test_every_profile_names_its_source() -> None:
    table = load_model_table()
    for name, rules in table.profiles.items():
        assert rules.source and rules.date, name


def test_user_file_adds_models_and_overrides_profiles(tmp_path: Path) -> None:
    user = tmp_path / "models.yaml"
    user.write_text(
        "profiles:\n  anthropic: {ttl_seconds: 120}\n"
        "models:\n"
        "  - {match: 'llama-3', tokenizer: 'hf:/srv/llama/tokenizer.json', cache: vllm, granularity: 32}\n"
    )
    table = load_model_table(user)
    llama = table.lookup("llama-3.1-8b-instruct")
    assert llama.tokenizer == "hf:/srv/llama/tokenizer.json"
    assert llama.cache.mode == "blocks" and llama.cache.granularity == 32
    # The override changes one field and keeps the rest of the shipped profile.
    sonnet = table.lookup("claude-sonnet-4-5", "anthropic").cache
    assert sonnet.ttl_seconds == 120 and sonnet.lookback == 20


def test_environment_variable_names_the_user_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "m.yaml"
    user.write_text("models:\n  - {match: 'house-model', tokenizer: cl100k_base, cache: mistral}\n")
    monkeypatch.setenv("CACHEWARDEN_MODELS", str(user))
    assert load_model_table().lookup("house-model").cache.profile == "mistral"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("profiles: [", "not valid YAML"),
        ("- 1\n- 2\n", "must be a mapping"),
        ("profiles:\n  anthropic: {ttl: 3}\n", "unknown fields: ttl"),
        ("profiles:\n  x: {mode: lru, min_tokens: 0}\n", "mode must be one of"),
        ("models:\n  - {match: 'a', tokenizer: o200k_base, cache: nope}\n", "unknown cache profile 'nope'"),
        ("models:\n  - {match: 'a', tokenizer: sentencepiece, cache: vllm}\n", "bad tokenizer"),
    ],
)
def test_bad_user_file_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_model_table(user)


def test_missing_user_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read model table"):
        load_model_table(tmp_path / "absent.yaml")
