"""Faults injected into the analysis wherever it runs: this process (threads) or a worker process.

An analysis worker process imports the engine afresh, so a ``monkeypatch`` in the test process
never reaches it. ``faulty_workers(target, kind)`` is instead the workers' analyzer factory
(``cli.proxy.build(..., workers=...)``): a ``functools.partial`` of a module-level function, which
the worker unpickles by reference (this module, found through ``PYTHONPATH``: ``reach_workers``),
so that each worker patches its own engine before it builds its analyzers.
"""

from __future__ import annotations

import functools
import importlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from cachewarden.proxy.cli.proxy import worker_analyzers
from cachewarden.proxy.server.config import Settings
from cachewarden.proxy.server.hooks import Analyzer

STALL = 2.0

# target -> (module, attribute path): what each fault breaks.
TARGETS: dict[str, tuple[str, str]] = {
    "tokenize": ("cachewarden.proxy.engine.counting", "PromptCounter.tokenize"),
    "index-lookup": ("cachewarden.proxy.engine.index.memory", "MemoryIndex.lookup"),
    "index-insert": ("cachewarden.proxy.engine.index.memory", "MemoryIndex.insert"),
    "attribute": ("cachewarden.proxy.server.analysis", "attribute"),
}


def _raise(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected analysis fault")


def _stalled(original: Callable[..., Any]) -> Callable[..., Any]:
    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(STALL)
        return original(*args, **kwargs)

    return slow


def _where(target: str) -> tuple[Any, str]:
    module, path = TARGETS[target]
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    return owner, name


def fault(target: str, kind: str) -> tuple[Any, str, Callable[..., Any]]:
    """(owner, attribute, replacement) of a ``raise`` or ``stall`` fault of ``target``."""
    owner, name = _where(target)
    return owner, name, _raise if kind == "raise" else _stalled(getattr(owner, name))


def _faulty_worker(target: str, kind: str, settings: Settings, metrics: Any) -> Sequence[Analyzer]:
    owner, name, replacement = fault(target, kind)
    setattr(owner, name, replacement)  # this worker process' own engine; it ends with the process
    return worker_analyzers(settings, metrics)


def faulty_workers(target: str, kind: str) -> Callable[[Settings, Any], Sequence[Analyzer]]:
    return functools.partial(_faulty_worker, target, kind)


def reach_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lets the analysis worker processes (started with this environment) import this module."""
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
