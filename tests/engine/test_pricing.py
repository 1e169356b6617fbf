"""Price table: the shipped snapshot, name lookups, fallbacks, user overrides, cost arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.engine.pricing import Price, PriceTable
from cachewarden.rules import data_file

M = 1e-6  # prices in the tests are written per million tokens

SONNET = Price(input=3 * M, output=15 * M, cache_read=0.3 * M, cache_write_5m=3.75 * M, cache_write_1h=6 * M)


@pytest.fixture(scope="module")
def table() -> PriceTable:
    return PriceTable.load()


def close(a: Price | None, b: Price) -> bool:
    assert a is not None
    return all(
        getattr(a, f) == pytest.approx(getattr(b, f))
        for f in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
    )


# -- snapshot --------------------------------------------------------------------------------------------


def test_snapshot_is_litellm_shaped_and_sourced() -> None:
    raw = json.loads(data_file("pricing.json").read_text(encoding="utf-8"))
    assert {"source", "date"} <= set(raw["_meta"])
    for name, row in raw.items():
        if name == "_meta":
            continue
        assert row["input_cost_per_token"] > 0 and row["output_cost_per_token"] > 0, name
        assert 0 < row["cache_read_input_token_cost"] < row["input_cost_per_token"], name
        assert row["source"], name
        if row["litellm_provider"] == "anthropic":
            # Claude 3 Haiku's list price rounds the 1.25x write rate ($0.30 for $0.3125).
            assert row["cache_creation_input_token_cost"] == pytest.approx(
                row["input_cost_per_token"] * 1.25, rel=0.05
            )
            assert row["cache_creation_input_token_cost_above_1hr"] == pytest.approx(
                row["input_cost_per_token"] * 2
            )


COMMON_MODELS = (
    *(
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5-nano",
    ),
    *("gpt-5.2", "gpt-5.4", "gpt-5.5", "gpt-5.6", "o3", "o4-mini", "deepseek-chat", "mistral-large"),
    *("claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-3-5-haiku", "claude-sonnet-5"),
)


@pytest.mark.parametrize("model", COMMON_MODELS)
def test_snapshot_covers_common_models(table: PriceTable, model: str) -> None:
    assert table.price(model, "openai-chat") is not None


def test_reference_price_points(table: PriceTable) -> None:
    assert close(table.price("claude-sonnet-4-5", "anthropic"), SONNET)
    gpt4o = table.price("gpt-4o", "openai-chat")
    assert (
        gpt4o is not None
        and gpt4o.input == pytest.approx(2.5 * M)
        and gpt4o.cache_read == pytest.approx(1.25 * M)
    )
    opus = table.price("claude-opus-4-6", "anthropic")
    assert opus is not None and opus.cache_write_1h == pytest.approx(10 * M)
    gpt56 = table.price("gpt-5.6", "openai-responses")
    assert gpt56 is not None and gpt56.cache_write_5m == pytest.approx(gpt56.input * 1.25)


# -- lookups ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "same_as"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("GPT-4.1", "gpt-4.1"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("anthropic.claude-haiku-4-5-20251001-v1:0", "claude-haiku-4-5"),
        ("claude-opus-4-1@20250805", "claude-opus-4-1"),
        ("openai/gpt-5-mini", "gpt-5-mini"),
    ],
)
def test_lookup_variants(table: PriceTable, model: str, same_as: str) -> None:
    price = table.price(model, "anthropic")
    assert price is not None and price == table.price(same_as, "anthropic")


@pytest.mark.parametrize("model", ["no-such-model", "gpt-4o-audio-preview", "", "claude-unknown-9"])
def test_unknown_model_is_none(table: PriceTable, model: str) -> None:
    assert table.price(model, "openai-chat") is None
    assert table.cost(model, "openai-chat", cached=1, write_5m=0, write_1h=0, uncached=1) is None
    assert table.missed_savings(model, "openai-chat", 1000) == 0.0


# -- fallbacks -------------------------------------------------------------------------------------------


def _input_only(provider: str) -> dict[str, object]:
    return {"input_cost_per_token": 4 * M, "output_cost_per_token": 8 * M, "litellm_provider": provider}


def test_anthropic_fallback_multipliers() -> None:
    table = PriceTable({"claude-new": _input_only("anthropic")})
    assert close(table.price("claude-new", "anthropic"), Price(4 * M, 8 * M, 0.4 * M, 5 * M, 8 * M))


def test_openai_fallback_before_and_from_gpt_5_6() -> None:
    table = PriceTable({"gpt-5.3": _input_only("openai"), "gpt-5.7": _input_only("openai")})
    # No write premium before 5.6: a written token is billed like an uncached one.
    assert close(table.price("gpt-5.3", "openai-chat"), Price(4 * M, 8 * M, 2 * M, 4 * M, 4 * M))
    assert close(table.price("gpt-5.7", "openai-chat"), Price(4 * M, 8 * M, 2 * M, 5 * M, 5 * M))


def test_fallback_uses_request_format_when_the_row_has_no_provider() -> None:
    row = {"input_cost_per_token": 4 * M}
    table = PriceTable({"house-model": row})
    assert close(table.price("house-model", "anthropic"), Price(4 * M, 0.0, 0.4 * M, 5 * M, 8 * M))
    other = PriceTable({"house-model": {**row, "litellm_provider": "together_ai"}})
    assert close(other.price("house-model", "openai-chat"), Price(4 * M, 0.0, 4 * M, 4 * M, 4 * M))


def test_one_hour_rate_scales_a_given_five_minute_rate() -> None:
    row = {**_input_only("anthropic"), "cache_creation_input_token_cost": 6 * M}
    price = PriceTable({"claude-x": row}).price("claude-x", "anthropic")
    assert price is not None and price.cache_write_1h == pytest.approx(6 * M * 2 / 1.25)


def test_row_without_input_price_is_not_priced() -> None:
    assert PriceTable({"dall-e-3": {"output_cost_per_image": 0.04}}).price("dall-e-3", "openai-chat") is None


# -- user override ---------------------------------------------------------------------------------------


def test_override_changes_one_price_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "sample_spec": {"input_cost_per_token": "documentation string"},
                "gpt-4o": {"input_cost_per_token": 2e-6},
                "anthropic/house-claude": {"input_cost_per_token": 1e-6, "litellm_provider": "anthropic"},
            }
        ),
        encoding="utf-8",
    )
    table = PriceTable.load(path)
    gpt4o = table.price("gpt-4o-2024-08-06", "openai-chat")
    assert gpt4o is not None and gpt4o.input == pytest.approx(2e-6)
    assert gpt4o.output == pytest.approx(10e-6) and gpt4o.cache_read == pytest.approx(1.25e-6)
    assert close(table.price("claude-sonnet-4-5", "anthropic"), SONNET)
    house = table.price("house-claude", "anthropic")
    assert house is not None and house.cache_write_5m == pytest.approx(1.25e-6)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[1, 2]",
        '{"gpt-4o": 3}',
        '{"gpt-4o": {"input_cost_per_token": "cheap"}}',
        '{"gpt-4o": {"cache_read_input_token_cost": -1}}',
        '{"gpt-4o": {"output_cost_per_token": true}}',
    ],
)
def test_malformed_override_is_a_one_line_config_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        PriceTable.load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message


def test_missing_override_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        PriceTable.load(tmp_path / "absent.json")


# -- cost ------------------------------------------------------------------------------------------------


def test_cost_of_a_claude_sonnet_4_5_request(table: PriceTable) -> None:
    cost = table.cost(
        "claude-sonnet-4-5", "anthropic", cached=1000, write_5m=2000, write_1h=0, uncached=500, output=100
    )
    assert cost is not None
    assert cost.cached_usd == pytest.approx(0.0003)  # 1,000 x $0.30/M
    assert cost.cache_write_usd == pytest.approx(0.0075)  # 2,000 x $3.75/M
    assert cost.input_usd == pytest.approx(0.0015)  # 500 x $3/M
    assert cost.output_usd == pytest.approx(0.0015)  # 100 x $15/M
    assert cost.total_usd == pytest.approx(0.0108)
    assert cost.savings_usd == pytest.approx(3500 * 3e-6 - 0.0093)  # 0.0012


def test_first_write_costs_more_than_it_saves(table: PriceTable) -> None:
    cost = table.cost("claude-sonnet-4-5", "anthropic", cached=0, write_5m=1000, write_1h=1000, uncached=0)
    assert cost is not None
    assert cost.cache_write_usd == pytest.approx(1000 * 3.75e-6 + 1000 * 6e-6)
    assert cost.savings_usd == pytest.approx(2000 * 3e-6 - cost.cache_write_usd) and cost.savings_usd < 0


def test_openai_cached_tokens_are_a_discount(table: PriceTable) -> None:
    cost = table.cost("gpt-4o", "openai-chat", cached=1920, write_5m=0, write_1h=0, uncached=86)
    assert cost is not None
    assert cost.savings_usd == pytest.approx(1920 * 1.25e-6)
    assert cost.total_usd == pytest.approx(1920 * 1.25e-6 + 86 * 2.5e-6)


def test_missed_savings(table: PriceTable) -> None:
    assert table.missed_savings("claude-sonnet-4-5", "anthropic", 1000) == pytest.approx(1000 * 2.7e-6)
    assert table.missed_savings("gpt-4o", "openai-chat", 0) == 0.0
