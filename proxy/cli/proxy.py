"""`cachewarden proxy`: run the reverse proxy with uvicorn.

Exit 0 after a clean shutdown, 2 on a bad configuration (one line on stderr). On SIGTERM / SIGINT
``/readyz`` turns 503 at once, new connections are refused and streams in flight get
``graceful_timeout`` seconds to finish (uvicorn's graceful shutdown).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

import uvicorn
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.errors import CachewardenError, ConfigError
from cachewarden.proxy.engine.index.open_index import open_index
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.pricing import PriceTable
from cachewarden.proxy.engine.tokenizers import get_tokenizer
from cachewarden.proxy.server.analysis import EngineAnalyzer
from cachewarden.proxy.server.analysis_worker import Factory
from cachewarden.proxy.server.app import Proxy, create_app
from cachewarden.proxy.server.config import Settings, load_settings
from cachewarden.proxy.server.forward import upstream_client
from cachewarden.proxy.server.hooks import Analyzer, default_analyzers
from cachewarden.proxy.server.live_rules import LiveRules
from cachewarden.proxy.server.metrics import Metrics
from cachewarden.proxy.server.transforms.rewriter import build_rewriter
from starlette.applications import Starlette

logger = logging.getLogger("cachewarden.proxy")


class _DrainingServer(uvicorn.Server):
    """Marks the proxy as draining the moment a shutdown signal arrives, before connections close."""

    def __init__(self, config: uvicorn.Config, proxy: Proxy) -> None:
        super().__init__(config)
        self.proxy = proxy

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.proxy.draining = True
        super().handle_exit(sig, frame)


def build_engine(settings: Settings, metrics: Metrics | None = None, share: int = 1) -> Engine:
    """The engine with the user's model table, prices, named upstreams' tokenizers and index;
    ``share``: the number of analysis worker processes, each holding its tenants' part of the
    local index (so that together they hold what one would)."""
    table = load_model_table(Path(settings.models) if settings.models else None)
    for upstream in settings.upstreams.values():
        # Requests through a named upstream are analysed as "NAME/model" (see EngineAnalyzer).
        tokenizer = f"hf:{upstream.tokenizer}" if upstream.tokenizer else "o200k_base"
        table.add({"match": f"{upstream.name}/", "tokenizer": tokenizer, "cache": upstream.cache})
    prices = PriceTable.load(Path(settings.prices) if settings.prices else None)
    # Load the default tokenizer now, not on the first request.
    get_tokenizer("o200k_base")

    def outage(stage: str) -> None:
        if metrics is not None:
            metrics.index_backend_errors.labels(stage).inc()

    secret = (settings.index_secret or "").encode()
    try:
        # 5 M tokens held locally is about 150 MiB (bench/bench_index.py: ~31 MiB per million tokens).
        limit = 5_000_000 // max(1, share)
        index = open_index(settings.index, on_outage=outage, secret=secret, max_tokens=limit)
        # The model-blind index only finds the earlier request a miss is explained against, in this
        # replica's own history (prompt text never leaves it): a shared one would cost Redis a
        # lookup and a write per request and name entries of other replicas that history lacks.
        wide = open_index(None, max_tokens=limit)
    except ValueError as exc:
        raise ConfigError(f"--index {settings.index}: {exc}") from exc
    return Engine(table=table, prices=prices, index=index, wide_index=wide)


def build_analyzers(settings: Settings, metrics: Metrics, engine: Engine | None = None) -> list[Analyzer]:
    """The analyzers of a running proxy: reported usage, the engine, and the opt-in capture."""
    analyzers = default_analyzers(metrics)
    analyzers.append(EngineAnalyzer(engine or build_engine(settings), metrics, LiveRules()))
    return analyzers


def worker_analyzers(settings: Settings, metrics: Metrics) -> list[Analyzer]:
    """The analyzers of one analysis worker process (``uses_processes``): the engine's. The
    reported usage is counted by the forwarder, the capture written by the worker runtime."""
    engine = build_engine(settings, metrics, share=settings.analysis_workers)
    return [EngineAnalyzer(engine, metrics, LiveRules())]


def threads_needed(settings: Settings) -> str | None:
    """Why the analysis must run in the forwarding process (None: worker processes can run it):
    what the forwarding process does then reads the analysis' state."""
    if settings.mode != "observe":
        return f"--mode {settings.mode} rewrites requests with the analysis' engine before forwarding"
    if settings.anthropic_diagnostics:
        return "--anthropic-diagnostics rewrites requests with the analysis' engine before forwarding"
    if settings.otel:
        return "--otel spans carry the analysis"
    return None


def uses_processes(settings: Settings) -> bool:
    """Whether the analysis runs in worker processes: unless ``--analysis-processes=false``,
    wherever they can (``threads_needed``). Asked for where they cannot: a ConfigError."""
    reason = threads_needed(settings)
    if settings.analysis_processes and reason is not None:
        raise ConfigError(f"--analysis-processes cannot be used here: {reason}; leave it unset")
    return settings.analysis_processes is not False and reason is None


def _check_files(settings: Settings) -> None:
    for flag, path in (("--models", settings.models), ("--prices", settings.prices)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{flag} {path}: no such file")
    for upstream in settings.upstreams.values():
        if upstream.tokenizer is not None and not Path(upstream.tokenizer).is_file():
            raise ConfigError(f"upstreams.{upstream.name}.tokenizer {upstream.tokenizer}: no such file")


def check_shared_index(settings: Settings) -> None:
    """Refuses a shared index that would silently predict wrong. Each replica hashes API keys with
    its own random salt unless ``--key-salt`` is set, so replica B never finds the tenant replica A
    stored (a named ``--tenant-header`` tenant needs no salt); and stored hashes are keyed by
    ``--index-secret``. Redis' URL is never printed: it may hold a password."""
    if settings.index.strip().lower() in ("", "memory", "memory://"):
        return
    missing = [] if settings.index_secret else ["--index-secret"]
    if not settings.key_salt and not settings.tenant_header:
        missing.insert(0, "--key-salt (or --tenant-header)")
    if missing:
        raise ConfigError(
            f"a shared --index needs {' and '.join(missing)}, the same on every replica "
            "(e.g. from one Secret): without it replicas never predict each other's cache hits"
        )


def otel_analyzers(settings: Settings, metrics: Metrics, env: Mapping[str, str]) -> list[Analyzer]:
    """With ``--otel``: the analyzer that exports spans and GenAI metrics; the Prometheus metrics
    are mirrored as OTel instruments. Imports OpenTelemetry only then (it is an optional extra)."""
    if not settings.otel:
        return []
    from cachewarden.proxy.server.otel import open_telemetry
    from cachewarden.proxy.server.otel_config import read_otel_config
    from cachewarden.proxy.server.otel_metrics import mirror_metrics
    from cachewarden.proxy.server.otel_spans import OtelAnalyzer

    telemetry = open_telemetry(read_otel_config(env), metrics)
    if telemetry.meter is not None:
        mirror_metrics(metrics, telemetry.meter)
    upstreams = {"openai": settings.openai_upstream, "anthropic": settings.anthropic_upstream}
    upstreams.update((name, u.url) for name, u in settings.upstreams.items())
    return [OtelAnalyzer(telemetry, metrics, upstreams)]


def build(
    settings: Settings, env: Mapping[str, str] | None = None, *, workers: Factory = worker_analyzers
) -> Starlette:
    """The proxy app of ``settings``; ``env`` (default: the process environment) holds OTEL_*.
    ``workers`` builds each analysis worker process' analyzers (a module-level function, run in
    the worker: the reliability tests inject their faults there)."""
    metrics = Metrics(settings.max_model_labels, tenant_labels=settings.tenant_labels)
    if uses_processes(settings):
        try:
            analyzers = default_analyzers(metrics)
            return create_app(settings, analyzers=analyzers, metrics=metrics, workers=workers)
        except OSError as exc:
            raise ConfigError(f"cannot open {exc.filename}: {exc.strerror}") from exc
    try:
        # One engine: the optimize-mode rewriter counts tokens with the same table and memo as analysis.
        engine = build_engine(settings, metrics)
        analyzers = build_analyzers(settings, metrics, engine)
        analyzers += otel_analyzers(settings, metrics, os.environ if env is None else env)
        return create_app(
            settings,
            analyzers=analyzers,
            metrics=metrics,
            rewriter=build_rewriter(settings, metrics, engine),
        )
    except OSError as exc:  # --access-log / --capture opened at start-up
        raise ConfigError(f"cannot open {exc.filename}: {exc.strerror}") from exc


def analysis_line(settings: Settings) -> str:
    """Where the analysis runs and, on threads, why: the one line the proxy logs about it."""
    n = settings.analysis_workers
    if uses_processes(settings):
        return f"analysis: in {n} worker process{'' if n == 1 else 'es'}, off the forwarding process"
    why = threads_needed(settings) or "--analysis-processes=false"
    return f"analysis: on {n} thread{'' if n == 1 else 's'} of the forwarding process ({why})"


def _log_to_stderr(level: str) -> logging.Handler:
    """The proxy's own log lines on stderr at ``--log-level``, formatted as uvicorn's (whose logging
    set-up covers its own loggers only); the analysis workers print theirs alike."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    own = logging.getLogger("cachewarden")
    own.addHandler(handler)
    own.setLevel(getattr(logging, level.upper(), logging.INFO))
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    # The analysis threads and the event loop share the GIL: hand it over every millisecond instead
    # of every 5 ms, so forwarding waits less behind an analysis (bench/bench_proxy.py).
    sys.setswitchinterval(0.001)
    # httpx logs every request URL at INFO, query string included (where some gateways put keys).
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = load_settings(sys.argv[1:] if argv is None else argv)
        _check_files(settings)
        check_shared_index(settings)
        client = upstream_client(settings, os.environ)
        app = build(settings)
    except CachewardenError as exc:
        print(f"cachewarden proxy: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        http="h11",
        log_level=settings.log_level,
        # Observe mode relays the upstream's response headers unchanged: no second Date or Server.
        server_header=False,
        date_header=False,
        # Our own access log is opt-in and leaves out query strings; uvicorn's would print them.
        access_log=False,
        proxy_headers=False,
        timeout_graceful_shutdown=int(settings.graceful_timeout),
    )
    server = _DrainingServer(config, app.state.proxy)
    handler = _log_to_stderr(settings.log_level)
    logger.info(analysis_line(settings))
    logger.info("upstream client: %s", client)
    try:
        server.run()
    finally:
        logging.getLogger("cachewarden").removeHandler(handler)
    return 0 if server.started else 1


if __name__ == "__main__":
    raise SystemExit(main())
