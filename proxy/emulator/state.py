"""What the emulator remembers between requests: the reference cache, stored Responses, the clock."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import ModelTable, load_model_table

from .cache import ReferenceCache
from .diagnostics import DiagnosisStore
from .latency import LatencyModel

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A Responses-API response kept for ``previous_response_id`` and GET /v1/responses/{id}."""

    owner: str  # the hashed API key: another organisation cannot chain onto it
    input_items: list[Any]  # the full input the response answered (earlier turns included)
    output_items: list[Any]
    body: dict[str, Any]  # the response object as returned


class ResponseStore:
    """Bounded (least recently stored dropped first), thread-safe."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._max = max_entries
        self._data: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, stored: StoredResponse) -> None:
        with self._lock:
            self._data[response_id] = stored
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def get(self, response_id: str, owner: str) -> StoredResponse | None:
        with self._lock:
            hit = self._data.get(response_id)
        return hit if hit is not None and hit.owner == owner else None

    def delete(self, response_id: str, owner: str) -> bool:
        with self._lock:
            hit = self._data.get(response_id)
            if hit is None or hit.owner != owner:
                return False
            del self._data[response_id]
            return True

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


@dataclass(slots=True)
class EmulatorState:
    table: ModelTable = field(default_factory=load_model_table)
    cache: ReferenceCache = field(default_factory=ReferenceCache)
    responses: ResponseStore = field(default_factory=ResponseStore)
    # Anthropic cache diagnostics: the request shape behind each message id (``diagnostics``).
    diagnoses: DiagnosisStore = field(default_factory=DiagnosisStore)
    latency: LatencyModel | None = None
    # Compress responses for clients that accept it (``encoding``).
    compress: bool = True
    # Added to the app's clock: POST /_emulator/advance moves time forward without waiting.
    offset: float = 0.0
    counter: PromptCounter = field(init=False)

    def __post_init__(self) -> None:
        self.counter = PromptCounter(self.table)

    def reset(self) -> None:
        self.cache.reset()
        self.responses.clear()
        self.diagnoses.clear()
        self.offset = 0.0


def wall_clock() -> float:
    return time.time()
