"""A Redis Cluster client made on first use, for ``open_index("redis://…?cluster=1")``.

``redis.cluster.RedisCluster`` connects in its constructor (to read the slot map), but a replica
must start while its shared index is away and answer from its local one: so the client is made
lazily, and a failed attempt is simply retried on the next call (``ResilientIndex`` paces those).
``RedisIndex`` keeps all keys of a scope in one hash slot (a ``{…}`` tag), so each of its
scripts runs on one node; a node that restarts empty (no persistence) only makes that node's
scopes cold, and redis-py follows the slot map as it changes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LazyClient"]


class LazyClient:
    """Forwards every attribute to the client ``factory`` makes, the first time one is needed."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._client: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._factory()
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)
