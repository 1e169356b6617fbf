"""Settings of `cachewarden proxy`: flags > ``CACHEWARDEN_*`` environment > config file > defaults.

Every scalar setting has one flag (``--openai-upstream``), one environment variable
(``CACHEWARDEN_OPENAI_UPSTREAM``) and one file key (``openai_upstream`` or ``openai-upstream``).
Named OpenAI-compatible upstreams exist only in the file::

    upstreams:
      vllm: {url: "http://10.0.0.5:8000", tokenizer: /models/qwen/tokenizer.json}

Any problem is a ``ConfigError`` with a one-line message; the command turns it into exit 2.

This module is long because each setting is declared here once with its parser and its flag, side
by side, so that flags, environment and file cannot drift apart (an assert checks the parsers).
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar, cast
from urllib.parse import urlsplit

import yaml
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.transforms.canonicalize import UNSAFE_TRANSFORMS

Mode = Literal["observe", "canonicalize", "optimize"]
MODES: tuple[Mode, ...] = ("observe", "canonicalize", "optimize")
UpstreamClient = Literal["auto", "aiohttp", "httpx"]
UPSTREAM_CLIENTS: tuple[UpstreamClient, ...] = ("auto", "aiohttp", "httpx")
_Choice = TypeVar("_Choice", bound=str)
ENV_PREFIX = "CACHEWARDEN_"
# Path prefixes the proxy serves itself or routes by provider: a named upstream must not shadow them.
_RESERVED_NAMES = frozenset({"v1", "metrics", "healthz", "readyz"})
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|kib|mb|mib|gb|gib)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30}


@dataclass(frozen=True, slots=True)
class NamedUpstream:
    """An OpenAI-compatible server reached under ``/NAME/…`` (e.g. ``/vllm/v1/chat/completions``)."""

    name: str
    url: str
    tokenizer: str | None = None
    # The cache profile of the model table that describes this engine (vllm, sglang, generic-engine).
    cache: str = "vllm"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the proxy reads at start-up; immutable while it runs."""

    host: str = "127.0.0.1"
    port: int = 8787
    mode: Mode = "observe"
    openai_upstream: str = "https://api.openai.com"
    anthropic_upstream: str = "https://api.anthropic.com"
    upstreams: Mapping[str, NamedUpstream] = field(default_factory=dict)
    max_body_bytes: int = 32 * 2**20
    # Read / write timeout; the SDKs' own default is 600 s, and a long non-streamed answer needs it.
    upstream_timeout: float = 600.0
    connect_timeout: float = 10.0
    # What carries the upstream hop (forward.py ``upstream_client``): aiohttp's pool and C parser
    # under httpx's API, or httpx's own transport; auto: aiohttp unless an HTTP(S)_PROXY is set.
    upstream_client: UpstreamClient = "auto"
    tenant_header: str | None = None
    # Optimize mode: a header whose value (with the tenant) keys OpenAI's prompt_cache_key per session.
    session_header: str | None = None
    # Canonicalize / optimize mode: unsafe transforms the user opted into (safe ones always run).
    unsafe_transforms: tuple[str, ...] = ()
    access_log: str | None = None
    capture: str | None = None
    models: str | None = None
    prices: str | None = None
    # Salt of the API-key hash used as tenant id; random per process when unset, so several replicas
    # sharing one index must configure the same salt.
    key_salt: str | None = None
    # Bound on distinct `model` label values; later models are reported as "other".
    max_model_labels: int = 64
    # Tenants (values of the tenant header) that get a `tenant` label of their own; every other
    # tenant is "other". Empty: no tenant label at all.
    tenant_labels: tuple[str, ...] = ()
    graceful_timeout: float = 30.0
    log_level: str = "info"
    # The prefix index: in memory (default) or shared by several replicas (redis://host:6379/0).
    index: str = "memory://"
    # Keys the hashes a shared index stores: the same on every replica.
    index_secret: str | None = None
    # Analysis runs beside the forwarding, on ``analysis_workers`` worker processes or threads;
    # beyond this backlog of requests waiting for analysis, new ones are forwarded unanalysed
    # (counted) rather than queued.
    analysis_workers: int = 2
    analysis_backlog: int = 256
    # Where the analysis runs (cli/proxy.py ``uses_processes``). None (default): in worker processes
    # (analysis_workers.py) wherever they can work, i.e. in observe mode without --otel or
    # --anthropic-diagnostics, which read the analysis' state in the forwarding process; on its
    # threads otherwise. True: worker processes, and a configuration where they cannot work is
    # refused. False: threads of the forwarding process (e.g. to patch the engine in a test).
    analysis_processes: bool | None = None
    # OpenTelemetry export (spans + metrics over OTLP/HTTP, beside /metrics); the exporter itself is
    # configured by the standard OTEL_* environment variables (server/otel_config.py).
    otel: bool = False
    # Ask Anthropic why requests miss (``diagnostics.previous_message_id``, added by the proxy and
    # removed from the response); optimize mode does it towards api.anthropic.com by itself.
    anthropic_diagnostics: bool = False


# -- value parsers: raw (str from flag/env, any from file) -> typed, or ConfigError -------------------


def _fail(name: str, value: object, why: str) -> NoReturn:
    raise ConfigError(f"{name}: {why} (got {value!r})")


def parse_url(name: str, value: object) -> str:
    if not isinstance(value, str):
        _fail(name, value, "expected an http(s) URL")
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        _fail(name, value, "expected an http(s) URL such as https://api.openai.com")
    if parts.query or parts.fragment:
        _fail(name, value, "an upstream URL takes no query or fragment")
    return value.strip().rstrip("/")


def parse_size(name: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = _SIZE.match(str(value)) if isinstance(value, str) else None
        if match is None:
            _fail(name, value, "expected a byte count such as 33554432 or 32MiB")
        size = int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if size <= 0:
        _fail(name, value, "must be positive")
    return size


def _parse_int(name: str, value: object) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(cast("str | int", value))
    except (TypeError, ValueError):
        _fail(name, value, "expected an integer")


def parse_port(name: str, value: object) -> int:
    port = _parse_int(name, value)
    if not 0 <= port <= 65535:
        _fail(name, value, "expected a port number 0-65535")
    return port


def parse_seconds(name: str, value: object) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        seconds = float(cast("str | float", value))
    except (TypeError, ValueError):
        _fail(name, value, "expected a number of seconds")
    if not seconds > 0:
        _fail(name, value, "must be positive")
    return seconds


def one_of(choices: tuple[_Choice, ...]) -> Callable[[str, object], _Choice]:
    """The parser of a setting that takes one of ``choices`` (--mode, --upstream-client)."""

    def parse(name: str, value: object) -> _Choice:
        if value not in choices:
            _fail(name, value, f"expected one of {', '.join(choices)}")
        return choices[choices.index(value)]

    return parse


def parse_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(name, value, "expected a non-empty string")
    return value.strip()


def parse_header(name: str, value: object) -> str:
    text = parse_text(name, value).lower()
    if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9a-z-]+", text):
        _fail(name, value, "expected an HTTP header name such as x-tenant")
    return text


def parse_positive_int(name: str, value: object) -> int:
    number = _parse_int(name, value)
    if number <= 0:
        _fail(name, value, "must be positive")
    return number


def parse_transforms(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[object] = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        _fail(name, value, "expected transform names separated by commas")
    unknown = [v for v in items if v not in UNSAFE_TRANSFORMS]
    if unknown:
        _fail(name, value, f"unknown unsafe transform(s); expected some of {', '.join(UNSAFE_TRANSFORMS)}")
    # Deduplicated, in the order the proxy applies them.
    return tuple(t for t in UNSAFE_TRANSFORMS if t in items)


def parse_upstreams(name: str, value: object) -> dict[str, NamedUpstream]:
    if not isinstance(value, Mapping):
        _fail(name, value, "expected a mapping NAME: {url: ..., tokenizer: ...}")
    out: dict[str, NamedUpstream] = {}
    for key, spec in value.items():
        where = f"{name}.{key}"
        if not isinstance(key, str) or not _NAME.match(key) or key in _RESERVED_NAMES:
            _fail(where, key, "an upstream name is lower-case [a-z0-9_.-] and not v1/metrics/healthz/readyz")
        if isinstance(spec, str):
            spec = {"url": spec}
        if not isinstance(spec, Mapping):
            _fail(where, spec, "expected {url: ..., tokenizer: ...}")
        unknown = set(spec) - {"url", "tokenizer", "cache"}
        if unknown:
            _fail(where, sorted(unknown), "unknown keys")
        tokenizer = spec.get("tokenizer")
        out[key] = NamedUpstream(
            name=key,
            url=parse_url(f"{where}.url", spec.get("url")),
            tokenizer=None if tokenizer is None else parse_text(f"{where}.tokenizer", tokenizer),
            cache=parse_text(f"{where}.cache", spec.get("cache", "vllm")),
        )
    return out


def parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        _fail(name, value, "expected true or false")
    return text in ("1", "true", "yes", "on")


def parse_index_url(name: str, value: object) -> str:
    text = parse_text(name, value)
    if not text.startswith(("memory://", "redis://", "rediss://", "unix://")):
        _fail(name, value, "expected memory:// or redis://HOST:PORT/DB")
    return text


def parse_names(name: str, value: object) -> tuple[str, ...]:
    """A comma-separated string (flag / env) or a list (file) of short label values."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        _fail(name, value, "expected NAME,NAME or a list of names")
    names = tuple(i.strip() for i in items if i.strip())
    if any(len(n) > 64 for n in names):
        _fail(name, value, "a tenant label is at most 64 characters")
    return names


_PARSERS: dict[str, Callable[[str, object], object]] = {
    "host": parse_text,
    "port": parse_port,
    "mode": one_of(MODES),
    "openai_upstream": parse_url,
    "anthropic_upstream": parse_url,
    "upstreams": parse_upstreams,
    "max_body_bytes": parse_size,
    "upstream_timeout": parse_seconds,
    "connect_timeout": parse_seconds,
    "upstream_client": one_of(UPSTREAM_CLIENTS),
    "tenant_header": parse_header,
    "session_header": parse_header,
    "unsafe_transforms": parse_transforms,
    "access_log": parse_text,
    "capture": parse_text,
    "models": parse_text,
    "prices": parse_text,
    "key_salt": parse_text,
    "max_model_labels": parse_positive_int,
    "tenant_labels": parse_names,
    "graceful_timeout": parse_seconds,
    "log_level": parse_text,
    "index": parse_index_url,
    "index_secret": parse_text,
    "analysis_workers": parse_positive_int,
    "analysis_backlog": parse_positive_int,
    "analysis_processes": parse_bool,
    "otel": parse_bool,
    "anthropic_diagnostics": parse_bool,
}
assert set(_PARSERS) == {f.name for f in fields(Settings)}, "every setting needs a parser"

# Settings that are also flags / environment variables (upstreams are structured: file only).
SCALARS = tuple(name for name in _PARSERS if name != "upstreams")


# -- sources ---------------------------------------------------------------------------------------


def read_config_file(path: str) -> dict[str, Any]:
    """A YAML (``.yaml``/``.yml``/other) or TOML (``.toml``) file; keys may use - or _."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read ({exc.strerror or exc})") from exc
    try:
        raw: object = tomllib.loads(text) if path.endswith(".toml") else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(
            f"--config {path}: not valid {'TOML' if path.endswith('.toml') else 'YAML'}: {first}"
        ) from exc
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"--config {path}: expected a mapping of settings at the top level")
    # A file may nest everything under `proxy:` so that one file can configure several commands.
    if set(raw) == {"proxy"} and isinstance(raw["proxy"], Mapping):
        raw = raw["proxy"]
    out: dict[str, Any] = {}
    for key, value in cast("Mapping[object, object]", raw).items():
        name = str(key).replace("-", "_")
        if name not in _PARSERS:
            raise ConfigError(f"--config {path}: unknown setting {key!r}")
        out[name] = value
    return out


def env_name(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


def read_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: env[env_name(name)] for name in SCALARS if env.get(env_name(name), "") != ""}


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as ConfigError: one line on stderr and exit 2, like every command."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="cachewarden proxy",
        description="Reverse proxy for the OpenAI and Anthropic APIs that explains prompt-cache misses. "
        "Every option is also a CACHEWARDEN_* environment variable (flags win over the environment, "
        "the environment over --config, the file over the defaults).",
    )
    # default=None everywhere: a flag the user did not give must not override env or file.
    add = p.add_argument
    add("--host", help="address to listen on (default 127.0.0.1)")
    add("--port", help="port to listen on (default 8787)")
    add("--mode", choices=MODES, help="observe (default): bytes unchanged; canonicalize; optimize")
    add("--openai-upstream", metavar="URL", help="default https://api.openai.com")
    add("--anthropic-upstream", metavar="URL", help="default https://api.anthropic.com")
    add("--config", metavar="FILE", help="YAML or TOML settings file (also: named upstreams)")
    add("--max-body-bytes", metavar="N", help="largest request body accepted (default 32MiB)")
    add("--upstream-timeout", metavar="SECONDS", help="upstream read/write timeout (default 600)")
    add("--connect-timeout", metavar="SECONDS", help="upstream connect timeout (default 10)")
    add(
        "--upstream-client",
        choices=UPSTREAM_CLIENTS,
        help="what carries the upstream hop: aiohttp, httpx, or auto (default: aiohttp unless a "
        "proxy is set in HTTP(S)_PROXY / ALL_PROXY, which only httpx uses)",
    )
    add("--tenant-header", metavar="NAME", help="request header naming the tenant (default: key hash)")
    add("--session-header", metavar="NAME", help="optimize: header naming the session (prompt_cache_key)")
    add(
        "--unsafe-transforms",
        metavar="NAME,NAME",
        help=f"canonicalize/optimize: also apply these unsafe transforms ({', '.join(UNSAFE_TRANSFORMS)})",
    )
    add("--access-log", metavar="PATH", help="one JSON line per request to PATH, or - for stdout")
    add("--capture", metavar="FILE", help="append request bodies + usage as JSONL for `cachewarden replay`")
    add("--models", metavar="FILE", help="model table override (rules/models.yaml shape)")
    add("--prices", metavar="FILE", help="price table override")
    add("--key-salt", metavar="TEXT", help="salt of the API-key hash (same on every replica)")
    add("--max-model-labels", metavar="N", help="distinct model label values before 'other' (default 64)")
    add("--tenant-labels", metavar="NAME,NAME", help="tenants with a `tenant` metric label (others: 'other')")
    add("--graceful-timeout", metavar="SECONDS", help="time streams in flight get on shutdown (default 30)")
    add("--log-level", metavar="LEVEL", help="uvicorn log level (default info)")
    add("--index", metavar="URL", help="prefix index: memory:// (default) or redis://HOST:PORT/DB (shared)")
    add(
        "--index-secret",
        metavar="TEXT",
        help="key of the hashes a shared index stores (same on every replica)",
    )
    add(
        "--analysis-workers",
        metavar="N",
        help="processes (or threads) that analyse requests, each tenant's in order on one (default 2)",
    )
    add(
        "--analysis-backlog",
        metavar="N",
        help="requests waiting for analysis before new ones skip it (default 256)",
    )
    add(
        "--analysis-processes",
        nargs="?",
        const="true",
        metavar="BOOL",
        help="analyse in worker processes, off the forwarding process (default: wherever they can, "
        "i.e. observe mode without --otel / --anthropic-diagnostics); =false: on its threads",
    )
    add("--otel", action="store_const", const=True, help="also export OTLP spans + metrics (OTEL_* env)")
    add(
        "--anthropic-diagnostics",
        action="store_const",
        const=True,
        help="add Anthropic's cache diagnostics to Messages requests, hide them from the client",
    )
    return p


def load_settings(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    """Parse flags and merge every source; raises ConfigError on any bad value."""
    env = os.environ if env is None else env
    args = vars(build_parser().parse_args(list(argv)))
    config_path = args.pop("config") or env.get(env_name("config")) or None
    merged: dict[str, object] = {}
    sources: dict[str, str] = {}
    if config_path:
        merged.update(read_config_file(config_path))
        sources.update(dict.fromkeys(merged, f"--config {config_path}: {{}}"))
    for name, value in read_env(env).items():
        merged[name] = value
        sources[name] = env_name(name)
    for name, value in args.items():
        if value is not None:
            merged[name] = value
            sources[name] = "--" + name.replace("_", "-")
    typed: dict[str, Any] = {
        name: _PARSERS[name](sources[name].format(name), value) for name, value in merged.items()
    }
    return replace(Settings(), **typed)
