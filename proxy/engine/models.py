"""The provider / model table (``rules/models.yaml``): tokenizer and cache rules per model.

The shipped table is data; a user file with the same shape is merged over it (its profiles replace
or extend profiles field by field, its models are matched before the shipped ones).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from cachewarden.rules import data_file

from .errors import ConfigError

CacheMode = Literal["prefix", "breakpoints", "blocks", "radix"]
_MODES = ("prefix", "breakpoints", "blocks", "radix")


@dataclass(frozen=True, slots=True)
class CacheRules:
    """How one provider (or engine) caches a model's prompts. Times in seconds, sizes in tokens."""

    profile: str
    mode: CacheMode
    min_tokens: int
    granularity: int = 1
    ttl_seconds: float = 300.0
    max_ttl_seconds: float = 0.0
    max_breakpoints: int = 4
    lookback: int = 20
    lookback_unit: Literal["blocks", "breakpoints"] = "blocks"
    implicit_breakpoint: str | None = None
    last_token_uncached: bool = False
    write_multiplier: float = 0.0
    write_multiplier_1h: float = 2.0
    source: str = ""
    date: str = ""
    # The day (ISO, UTC) the provider started caching these models: a request made before it never
    # reads (OpenAI: 2024-10-01). Empty: no such date.
    since: str = ""

    @property
    def since_epoch(self) -> float:
        """``since`` as epoch seconds (0.0 when there is none)."""
        if not self.since:
            return 0.0
        day = datetime.date.fromisoformat(self.since)
        return datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.UTC).timestamp()


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What cachewarden knows about one model name."""

    model: str
    tokenizer: str  # o200k_base | cl100k_base | claude | hf:PATH
    ratio: float  # provider tokens per tokenizer token (1.0 where the tokenizer is exact)
    cache: CacheRules

    @property
    def exact(self) -> bool:
        return self.tokenizer != "claude"


_RULE_FIELDS = {f.name for f in fields(CacheRules)} - {"profile"}


def _profile(name: str, raw: object, base: CacheRules | None) -> CacheRules:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"model table: profile {name!r} must be a mapping")
    unknown = set(raw) - _RULE_FIELDS
    if unknown:
        raise ConfigError(f"model table: profile {name!r} has unknown fields: {', '.join(sorted(unknown))}")
    try:
        rules = replace(base, profile=name, **raw) if base is not None else CacheRules(profile=name, **raw)
    except TypeError as exc:
        raise ConfigError(f"model table: profile {name!r}: {exc}") from exc
    if rules.mode not in _MODES:
        raise ConfigError(f"model table: profile {name!r}: mode must be one of {', '.join(_MODES)}")
    since: object = rules.since
    if not isinstance(since, str):  # YAML reads an unquoted 2024-10-01 as a date
        rules = replace(rules, since=str(since))
    try:
        rules.since_epoch  # noqa: B018 (validates the date)
    except ValueError as exc:
        raise ConfigError(f"model table: profile {name!r}: since must be an ISO date: {exc}") from exc
    if rules.granularity < 1 or rules.min_tokens < 0:
        raise ConfigError(f"model table: profile {name!r}: granularity must be >= 1, min_tokens >= 0")
    return rules


class ModelTable:
    """Model name → ModelInfo, by longest matching prefix; request format → default."""

    def __init__(self, raw: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> None:
        self.profiles: dict[str, CacheRules] = {}
        for name, body in (raw.get("profiles") or {}).items():
            self.profiles[name] = _profile(name, body, None)
        entries: list[Mapping[str, Any]] = list(raw.get("models") or [])
        defaults: dict[str, Mapping[str, Any]] = dict(raw.get("defaults") or {})
        if overrides:
            for name, body in (overrides.get("profiles") or {}).items():
                self.profiles[name] = _profile(name, body, self.profiles.get(name))
            entries = list(overrides.get("models") or []) + entries
            defaults.update(overrides.get("defaults") or {})
        self._entries = [self._check_entry(e) for e in entries]
        # Longest prefix first; stable, so among equal prefixes the user's entry wins.
        self._entries.sort(key=lambda e: -len(e["match"]))
        self._defaults = {k: self._check_entry({"match": "", **v}) for k, v in defaults.items()}
        self._cache: dict[tuple[str, str], ModelInfo] = {}

    def _check_entry(self, entry: object) -> dict[str, Any]:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("match"), str):
            raise ConfigError(f"model table: entry {entry!r} needs a string 'match'")
        cache = entry.get("cache")
        if cache not in self.profiles:
            raise ConfigError(f"model table: entry {entry['match']!r} names unknown cache profile {cache!r}")
        tok = entry.get("tokenizer")
        if not isinstance(tok, str) or not (
            tok in ("o200k_base", "cl100k_base", "claude") or tok.startswith("hf:")
        ):
            raise ConfigError(f"model table: entry {entry['match']!r}: bad tokenizer {tok!r}")
        extra = set(entry) - {"match", "cache", "tokenizer", "ratio"} - _RULE_FIELDS
        if extra:
            raise ConfigError(
                f"model table: entry {entry['match']!r} has unknown fields: {', '.join(sorted(extra))}"
            )
        return dict(entry)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Match ``entry`` before the table's own entries of the same length (e.g. a named upstream)."""
        self._entries.insert(0, self._check_entry(entry))
        self._entries.sort(key=lambda e: -len(e["match"]))
        self._cache.clear()

    def lookup(self, model: str, provider: str = "openai-chat") -> ModelInfo:
        key = (model, provider)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        name = model.lower()
        # Bedrock / Vertex ids carry a vendor prefix ("anthropic.claude-...", "us.anthropic.claude-...").
        bare = name.rsplit("anthropic.", 1)[-1].rsplit("/", 1)[-1]
        # Azure OpenAI spells GPT-3.5 without the dot ("gpt-35-turbo", "gpt-35-turbo-16k"): the same
        # models, cl100k like OpenAI's gpt-3.5 (a gpt-35-turbo answer in the cassettes' dev half,
        # counted with o200k one over, is exact with cl100k).
        if bare.startswith("gpt-35"):
            bare = "gpt-3.5" + bare[len("gpt-35") :]
        entry = next((e for e in self._entries if bare.startswith(e["match"])), None)
        if entry is None:
            entry = self._defaults.get(provider) or self._defaults.get("openai-chat")
            if entry is None:
                raise ConfigError(f"model table: no entry for model {model!r} and no default for {provider}")
        rules = self.profiles[entry["cache"]]
        overrides = {k: v for k, v in entry.items() if k in _RULE_FIELDS}
        if overrides:
            rules = replace(rules, **overrides)
        info = ModelInfo(
            model=model, tokenizer=entry["tokenizer"], ratio=float(entry.get("ratio", 1.0)), cache=rules
        )
        self._cache[key] = info
        return info


def _read_yaml(path: Path | str, text: str) -> Mapping[str, Any]:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc.__class__.__name__})") from exc
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: the model table must be a mapping")
    return raw


def load_model_table(override: Path | None = None) -> ModelTable:
    """The shipped table, with the user's file (``override`` or ``$CACHEWARDEN_MODELS``) merged over it."""
    if override is None and os.environ.get("CACHEWARDEN_MODELS"):
        override = Path(os.environ["CACHEWARDEN_MODELS"])
    shipped = data_file("models.yaml")
    raw = _read_yaml("models.yaml", shipped.read_text(encoding="utf-8"))
    user = None
    if override is not None:
        try:
            user = _read_yaml(override, Path(override).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{override}: cannot read model table ({exc.strerror})") from exc
    return ModelTable(raw, user)
