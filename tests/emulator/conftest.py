"""A live emulator for the SDK tests: uvicorn in a background thread on a free 127.0.0.1 port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvicorn
from cachewarden.proxy.emulator.app import create_app
from starlette.applications import Starlette


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, name="emulator", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the emulator did not start")
        time.sleep(0.02)
    try:
        yield Emulator(app, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def emulator(emulator_server: Emulator) -> Iterator[Emulator]:
    """The shared emulator with an empty cache, response store and clock offset."""
    emulator_server.reset()
    try:
        yield emulator_server
    finally:
        emulator_server.close_clients()
