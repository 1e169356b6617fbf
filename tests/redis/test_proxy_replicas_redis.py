"""Two proxy replicas behind one load balancer share a Redis index: B predicts the hit A's request made."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from cachewarden.proxy.cli.proxy import build_analyzers, build_engine
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings, load_settings
from cachewarden.proxy.server.metrics import Metrics
from starlette.applications import Starlette

POLICY = "\n".join(f"Rule {i}: check clause {i} of the handbook before answering." for i in range(200))


def _replica(url: str) -> tuple[Starlette, Metrics]:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "c", "choices": [], "usage": {"prompt_tokens": 1}})

    settings = Settings(
        openai_upstream="http://upstream.test", index=url, key_salt="shared", index_secret="k"
    )
    metrics = Metrics()
    engine = build_engine(settings, metrics)
    analyzers = build_analyzers(settings, metrics, engine)
    app = create_app(settings, analyzers=analyzers, metrics=metrics, transport=httpx.MockTransport(upstream))
    return app, metrics


def _predicted_cached(metrics: Metrics) -> float:
    text = metrics.exposition().decode()
    # The exposition sorts label names: kind, model, provider, source.
    pattern = r'cachewarden_input_tokens_total\{kind="cached",[^}]*source="predicted"\} (\S+)'
    return sum(float(v) for v in re.findall(pattern, text))


async def _send(app: Starlette, body: dict[str, Any]) -> None:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
            response = await client.post(
                "/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-same-key"}
            )
            assert response.status_code == 200


def test_replica_b_predicts_the_hit_of_a_prefix_first_seen_on_a(redis_url: str, redis_server: Any) -> None:
    first = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": POLICY}, {"role": "user", "content": "a"}],
    }
    second = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
        ],
    }
    app_a, metrics_a = _replica(redis_url)
    app_b, metrics_b = _replica(redis_url)
    with redis_server.client() as c:
        c.flushall()
    asyncio.run(_send(app_a, first))
    # Only the scoped index is shared: the model-blind one (attribution's, against this replica's
    # own history) writes nothing to Redis. Keys carry their scope's root as a hash tag.
    with redis_server.client() as c:
        roots = {re.search(rb"\{(\w+)\}", k).group(1) for k in c.scan_iter(match=b"cachewarden:*")}  # type: ignore[union-attr]
    assert len(roots) == 1
    asyncio.run(_send(app_b, second))
    assert _predicted_cached(metrics_a) == 0
    assert _predicted_cached(metrics_b) >= 1024


def test_memory_replicas_do_not_share() -> None:
    first = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": POLICY}, {"role": "user", "content": "a"}],
    }
    app_a, _ = _replica("memory://")
    app_b, metrics_b = _replica("memory://")
    asyncio.run(_send(app_a, first))
    asyncio.run(_send(app_b, first))
    assert _predicted_cached(metrics_b) == 0


def test_index_url_is_validated() -> None:
    with pytest.raises(ConfigError, match="--index"):
        load_settings(["--index", "postgres://db"], env={})
    assert load_settings([], env={"CACHEWARDEN_INDEX": "redis://r:6379/0"}).index == "redis://r:6379/0"
