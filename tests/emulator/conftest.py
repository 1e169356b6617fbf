"""A live emulator for the SDK tests: uvicorn in a background thread on a free 127.0.0.1 port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest
from cachewarden.proxy.emulator.app import create_app
from cachewarden.proxy.testing import serving
from starlette.applications import Starlette


@dataclass
class Emulator:
    """A running emulator and helpers to drive it."""

    app: Starlette
    base_url: str
    # SDK clients handed out to the current test, closed after it (their pools hold sockets).
    clients: list[openai.OpenAI | openai.AsyncOpenAI | anthropic.Anthropic] = field(default_factory=list)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        return httpx.post(self.base_url + path, json=body, timeout=10)

    def advance(self, seconds: float) -> None:
        self.post("/_emulator/advance", {"seconds": seconds}).raise_for_status()

    def reset(self) -> None:
        self.post("/_emulator/reset").raise_for_status()

    def openai(self, key: str = "sk-test-org-a", **kwargs: Any) -> openai.OpenAI:
        client = openai.OpenAI(api_key=key, base_url=self.base_url + "/v1", max_retries=0, **kwargs)
        self.clients.append(client)
        return client

    def async_openai(self, key: str = "sk-test-org-a") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(api_key=key, base_url=self.base_url + "/v1", max_retries=0)

    def anthropic(self, key: str = "sk-ant-test-org-a", **kwargs: Any) -> anthropic.Anthropic:
        client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=0, **kwargs)
        self.clients.append(client)
        return client

    def close_clients(self) -> None:
        for client in self.clients:
            if isinstance(client, openai.AsyncOpenAI):
                continue  # closed by the test that used it, inside its event loop
            client.close()
        self.clients.clear()


@pytest.fixture(scope="session")
def emulator_server() -> Iterator[Emulator]:
    app = create_app()
    with serving(app, "emulator", timeout=15) as served:
        yield Emulator(app, served.url)


@pytest.fixture
def emulator(emulator_server: Emulator) -> Iterator[Emulator]:
    """The shared emulator with an empty cache, response store and clock offset."""
    emulator_server.reset()
    try:
        yield emulator_server
    finally:
        emulator_server.close_clients()
