"""A `tenant` metric label exists only for the tenants an operator allow-lists; the rest are "other"."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from cachewarden.proxy.engine.errors import ConfigError
from cachewarden.proxy.server.app import create_app
from cachewarden.proxy.server.config import Settings, load_settings
from cachewarden.proxy.server.metrics import Metrics

BODY = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hello"}]}


def _exposition(settings: Settings, tenants: list[str]) -> str:
    def upstream(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"id": "c", "choices": [], "usage": {"prompt_tokens": 9}})

    metrics = Metrics(tenant_labels=settings.tenant_labels)
    app = create_app(settings, metrics=metrics, transport=httpx.MockTransport(upstream))

    async def main() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                for tenant in tenants:
                    headers = {"x-tenant": tenant, "authorization": "Bearer sk-secret-key"}
                    response = await client.post("/v1/chat/completions", json=BODY, headers=headers)
                    assert response.status_code == 200

    asyncio.run(main())
    return metrics.exposition().decode()


def test_allow_listed_tenants_get_their_own_label() -> None:
    settings = Settings(
        openai_upstream="http://upstream.test", tenant_header="x-tenant", tenant_labels=("team-a",)
    )
    text = _exposition(settings, ["team-a", "team-b", "team-c"])
    requests = [line for line in text.splitlines() if line.startswith("cachewarden_requests_total{")]
    assert any('tenant="team-a"' in line and line.endswith(" 1.0") for line in requests)
    assert any('tenant="other"' in line and line.endswith(" 2.0") for line in requests)
    assert "team-b" not in text and "team-c" not in text and "sk-secret-key" not in text


def test_no_tenant_label_unless_configured() -> None:
    settings = Settings(openai_upstream="http://upstream.test", tenant_header="x-tenant")
    text = _exposition(settings, ["team-a"])
    assert "tenant=" not in text and "team-a" not in text


def test_tenant_labels_setting() -> None:
    assert load_settings(["--tenant-labels", "a, b"], env={}).tenant_labels == ("a", "b")
    assert load_settings([], env={"CACHEWARDEN_TENANT_LABELS": "x"}).tenant_labels == ("x",)
    with pytest.raises(ConfigError, match="tenant"):
        load_settings(["--tenant-labels", "x" * 65], env={})
