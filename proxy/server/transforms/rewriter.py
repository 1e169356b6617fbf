"""The proxy's ``Rewriter``: canonicalisation (and, in optimize mode, optimisation) before forwarding.

``rewrite`` parses the body, applies the mode's transforms in place, and re-serialises it only when
one of them changed something (compact JSON, every key not inside a transformed subtree in its
original order). It returns None, so that the original bytes go upstream untouched, when nothing
changed and for any body it will not touch: not UTF-8, not strict JSON (NaN, out-of-range numbers,
duplicate keys), not an object, or nested too deep. An exception is the caller's to count
(``hooks.call_rewriter``: ``analysis_errors_total{stage="rewrite"}``, original body forwarded).

Each applied transform counts once in ``canonicalized_requests_total{provider, model, transform}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.server.config import Mode, Settings
from cachewarden.proxy.server.hooks import Flow
from cachewarden.proxy.server.metrics import Metrics

from .canonicalize import Transform, canonicalize, loads_strict, select
from .diagnostics import DiagnosticsInjector
from .optimize import STRIP_USAGE_CHUNK, Optimizer


def parse_body(data: bytes) -> dict[str, Any] | None:
    """The body as a dict, or None when the rewriter must leave it alone."""
    try:
        value = loads_strict(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def dump_body(body: dict[str, Any]) -> bytes | None:
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):  # a lone surrogate escape: forward the original
        return None


class CacheRewriter:
    """Canonicalize (safe transforms + the unsafe ones named) and, in optimize mode, optimize."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        mode: Mode = "canonicalize",
        unsafe: Iterable[str] = (),
        optimizer: Optimizer | None = None,
        diagnostics: DiagnosticsInjector | None = None,
    ) -> None:
        if mode == "optimize" and optimizer is None:
            raise ValueError("optimize mode needs an Optimizer")
        self.metrics = metrics
        self.mode = mode
        self.transforms: tuple[Transform, ...] = select(unsafe)
        self.optimizer = optimizer if mode == "optimize" else None
        # --anthropic-diagnostics: the one change made in observe mode too (asked for explicitly).
        self.diagnostics = diagnostics

    def rewrite(self, flow: Flow) -> bytes | None:
        if not flow.analysed or flow.provider is None:
            return None
        if self.mode == "observe" and self.diagnostics is None:
            return None
        body = parse_body(flow.request_body)
        if body is None:
            return None
        model = body.get("model")
        if isinstance(model, str):
            flow.model = model  # labels this request's counters, an error in a transform included
        applied = [] if self.mode == "observe" else canonicalize(body, flow.provider, self.transforms)
        if self.optimizer is not None:
            applied += self.optimizer.apply(body, flow)
        if self.diagnostics is not None:
            applied += self.diagnostics.apply(body, flow)
        if not applied:
            return None
        out = dump_body(body)
        if out is None:
            return None
        # Only now that the new body goes upstream: the relay edits the stream for it.
        if "stream-usage" in applied:
            flow.metadata[STRIP_USAGE_CHUNK] = True
        labels = self.metrics.labels(flow.provider, flow.model, flow.tenant)
        for name in applied:
            self.metrics.canonicalized_requests.labels(*labels, name).inc()
        return out


_CLAUDE_API = "api.anthropic.com"


def build_rewriter(settings: Settings, metrics: Metrics, engine: Engine) -> CacheRewriter | None:
    """The rewriter of a running proxy: None in observe mode (bytes are forwarded unchanged), unless
    ``--anthropic-diagnostics`` asks for that one change; optimize mode adds diagnostics by itself."""
    # Optimize mode asks by default only the Claude API itself: Bedrock, Vertex and gateways in front of
    # them may reject the field ("Claude API only", provider-caching.md §2.7).
    by_default = settings.mode == "optimize" and urlsplit(settings.anthropic_upstream).hostname == _CLAUDE_API
    diagnostics = DiagnosticsInjector(engine) if settings.anthropic_diagnostics or by_default else None
    if settings.mode == "observe" and diagnostics is None:
        return None
    optimizer = (
        Optimizer(engine, session_header=settings.session_header) if settings.mode == "optimize" else None
    )
    return CacheRewriter(
        metrics,
        mode=settings.mode,
        unsafe=settings.unsafe_transforms,
        optimizer=optimizer,
        diagnostics=diagnostics,
    )
