"""Prices per model and the cost of one request's input and output tokens.

The shipped snapshot ``rules/pricing.json`` uses the format of LiteLLM's
``model_prices_and_context_window.json`` (model name -> USD per token), so a user can point
``PriceTable.load`` at a newer LiteLLM file, or at a small file with only the rows they pay differently
for; its fields are merged over the shipped ones, row by row and field by field.

Fallbacks when a row has no cache rates (LiteLLM has read rates for many more models than write
rates), as multiples of the input price:

- Anthropic-style providers (Anthropic, Bedrock, Vertex Claude): read 0.1×, write 1.25× (5 min)
  and 2× (1 h) — Anthropic's published multipliers.
- OpenAI before GPT-5.6: read 0.5× (the smallest discount of any family, so savings are never
  overstated); writes carry no premium, so a written token costs what an uncached one does (1×).
- OpenAI GPT-5.6 and later: read 0.5×, write 1.25×.
- Anyone else: no discount and no premium (1×): we do not invent savings we cannot source.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachewarden.rules import data_file

from .errors import ConfigError

_INPUT = "input_cost_per_token"
_OUTPUT = "output_cost_per_token"
_READ = "cache_read_input_token_cost"
_WRITE = "cache_creation_input_token_cost"
_WRITE_1H = "cache_creation_input_token_cost_above_1hr"
_PRICE_FIELDS = (_INPUT, _OUTPUT, _READ, _WRITE, _WRITE_1H)

# (read, write 5m, write 1h) as multiples of the input price; see the module docstring.
_ANTHROPIC_FALLBACK = (0.1, 1.25, 2.0)
_OPENAI_FALLBACK = (0.5, 1.0, 1.0)
_OPENAI_56_FALLBACK = (0.5, 1.25, 1.25)
_NEUTRAL_FALLBACK = (1.0, 1.0, 1.0)

# Suffixes that name a snapshot of a model rather than another model.
_DATED = re.compile(r"(?:-\d{8}|-\d{4}-\d{2}-\d{2}|@\d{8}|-latest)$")
_BEDROCK_VERSION = re.compile(r"-v\d+(?::\d+)?$")
# Bedrock cross-region inference profiles, then the vendor part of a Bedrock / Vertex model id.
_REGIONS = ("us.", "eu.", "apac.", "global.", "jp.", "au.", "ca.", "us-gov.")
_VENDORS = ("anthropic.", "openai.", "mistral.", "deepseek.", "meta.", "amazon.")
_GPT_VERSION = re.compile(r"gpt-(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per token."""

    input: float
    output: float
    cache_read: float
    cache_write_5m: float
    cache_write_1h: float


@dataclass(frozen=True, slots=True)
class Cost:
    """USD for one request. ``savings_usd`` is what caching saved against billing every input token
    uncached; it is negative when cache writes cost more than the reads saved."""

    input_usd: float
    cached_usd: float
    cache_write_usd: float
    output_usd: float
    total_usd: float
    savings_usd: float


def _bare(name: str) -> str:
    """``anthropic/claude-x``, ``us.anthropic.claude-x`` -> ``claude-x``."""
    bare = name.rsplit("/", 1)[-1]
    for prefix in _REGIONS:
        if bare.startswith(prefix):
            bare = bare[len(prefix) :]
            break
    for prefix in _VENDORS:
        if bare.startswith(prefix):
            bare = bare[len(prefix) :]
            break
    return bare


def _undated(name: str) -> str:
    previous = None
    while previous != name:
        previous = name
        name = _DATED.sub("", _BEDROCK_VERSION.sub("", name))
    return name


def _candidates(model: str) -> list[str]:
    """Names to try, most specific first: as given, without vendor prefixes, without a date."""
    name = model.strip().lower()
    bare = _bare(name)
    out: list[str] = []
    for candidate in (name, bare, _undated(bare)):
        if candidate and candidate not in out:
            out.append(candidate)
    return out


def _fallback(model: str, provider: str) -> tuple[float, float, float]:
    family = provider.lower()
    name = model.lower()
    if "anthropic" in family or "claude" in name:
        return _ANTHROPIC_FALLBACK
    if "openai" in family or "azure" in family or name.startswith(("gpt-", "o1", "o3", "o4")):
        version = _GPT_VERSION.search(name)
        if version and (int(version[1]), int(version[2] or 0)) >= (5, 6):
            return _OPENAI_56_FALLBACK
        return _OPENAI_FALLBACK
    return _NEUTRAL_FALLBACK


def _number(where: str, model: str, field: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: {model}: {field} must be a non-negative number, got {value!r}")
    return float(value)


def _read_rows(where: str, text: str) -> dict[str, dict[str, Any]]:
    """Model rows of one pricing file (lower-case names), checked; metadata entries dropped."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: a pricing file must be a JSON object of model names")
    rows: dict[str, dict[str, Any]] = {}
    for name, row in raw.items():
        # "_meta" is ours; "sample_spec" is LiteLLM's documentation row with strings for values.
        if name.startswith("_") or name == "sample_spec":
            continue
        if not isinstance(row, Mapping):
            raise ConfigError(f"{where}: {name}: a model entry must be a JSON object")
        for field in _PRICE_FIELDS:
            _number(where, name, field, row.get(field))
        rows[name.lower()] = dict(row)
    return rows


class PriceTable:
    """Model name -> Price, from the shipped snapshot with an optional user file merged over it."""

    def __init__(self, rows: Mapping[str, Mapping[str, Any]]) -> None:
        self._rows = {name.lower(): dict(row) for name, row in rows.items()}
        # Rows keyed with a vendor prefix ("anthropic/claude-x") are also found by the bare name;
        # a row that already has the bare name keeps it.
        self._aliases: dict[str, str] = {}
        for name in self._rows:
            self._aliases.setdefault(_bare(name), name)
        self._memo: dict[tuple[str, str], Price | None] = {}

    @classmethod
    def load(cls, override: Path | None = None) -> PriceTable:
        """The shipped snapshot, with ``override`` (or ``$CACHEWARDEN_PRICES``) merged over it."""
        if override is None and os.environ.get("CACHEWARDEN_PRICES"):
            override = Path(os.environ["CACHEWARDEN_PRICES"])
        rows = _read_rows("pricing.json", data_file("pricing.json").read_text(encoding="utf-8"))
        if override is not None:
            try:
                text = Path(override).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"{override}: cannot read pricing file ({exc.strerror})") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{override}: pricing file is not UTF-8") from exc
            for name, row in _read_rows(str(override), text).items():
                rows[name] = {**rows.get(name, {}), **row}
        return cls(rows)

    def _row(self, model: str) -> Mapping[str, Any] | None:
        for candidate in _candidates(model):
            if candidate in self._rows:
                return self._rows[candidate]
            if candidate in self._aliases:
                return self._rows[self._aliases[candidate]]
        return None

    def price(self, model: str, provider: str) -> Price | None:
        """The price of ``model``, or None when the table does not know it (or has no input price)."""
        key = (model, provider)
        if key in self._memo:
            return self._memo[key]
        row = self._row(model)
        price = None
        if row is not None and row.get(_INPUT) is not None:
            price = self._price(model, provider, row)
        self._memo[key] = price
        return price

    @staticmethod
    def _price(model: str, provider: str, row: Mapping[str, Any]) -> Price:
        def rate(field: str) -> float | None:
            return _number("pricing", model, field, row.get(field))

        base = rate(_INPUT) or 0.0
        read_x, write_x, write_1h_x = _fallback(model, str(row.get("litellm_provider") or provider))
        read, write, write_1h = rate(_READ), rate(_WRITE), rate(_WRITE_1H)
        if write_1h is None:
            # A row with a 5-minute write rate but no 1-hour one: scale it like the fallback does.
            write_1h = write * write_1h_x / write_x if write is not None else base * write_1h_x
        return Price(
            input=base,
            output=rate(_OUTPUT) or 0.0,
            cache_read=read if read is not None else base * read_x,
            cache_write_5m=write if write is not None else base * write_x,
            cache_write_1h=write_1h,
        )

    def cost(
        self,
        model: str,
        provider: str,
        *,
        cached: int,
        write_5m: int,
        write_1h: int,
        uncached: int,
        output: int = 0,
    ) -> Cost | None:
        """USD for one request; ``write_5m`` and ``write_1h`` are disjoint (a Prediction's
        ``cache_write_tokens`` is their sum). None for a model without a price."""
        price = self.price(model, provider)
        if price is None:
            return None
        input_usd = uncached * price.input
        cached_usd = cached * price.cache_read
        write_usd = write_5m * price.cache_write_5m + write_1h * price.cache_write_1h
        output_usd = output * price.output
        all_uncached = (cached + write_5m + write_1h + uncached) * price.input
        return Cost(
            input_usd=input_usd,
            cached_usd=cached_usd,
            cache_write_usd=write_usd,
            output_usd=output_usd,
            total_usd=input_usd + cached_usd + write_usd + output_usd,
            savings_usd=all_uncached - (input_usd + cached_usd + write_usd),
        )

    def missed_savings(self, model: str, provider: str, tokens: int) -> float:
        """USD lost when ``tokens`` were billed uncached instead of as cache reads (0 when unknown)."""
        price = self.price(model, provider)
        if price is None or tokens <= 0:
            return 0.0
        return tokens * max(0.0, price.input - price.cache_read)
