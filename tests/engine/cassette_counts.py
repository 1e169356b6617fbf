"""Counting checked against the second held-out source: public projects' VCR cassettes.

The cassettes are third-party data, unpacked under /tmp/acc4/raw as ``OWNER+NAME/PATH`` (or the
directory in ``CACHEWARDEN_CASSETTES``; /tmp/acc4/PLAN.md names the repositories and commits). They
are read in place by bench/cassette_records.py, the loader bench_counting.py uses, and the tests that
need them skip where they are absent. A case is a record id, ``owner/repo:path#i``, always from the
"dev" half (bench_counting.part): the final half is never used in a test.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table

ROOT = Path(os.environ.get("CACHEWARDEN_CASSETTES", "/tmp/acc4/raw"))
LOADER = Path(__file__).resolve().parents[2] / "bench" / "cassette_records.py"


@cache
def _loader() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cassette_records", LOADER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def record(source: str) -> dict[str, Any]:
    """The record ``source`` (``owner/repo:path#i``), read from its cassette."""
    repo, _, rest = source.partition(":")
    path, _, index = rest.rpartition("#")
    cassette = ROOT / repo.replace("/", "+", 1) / path
    if not cassette.is_file():
        pytest.skip(f"third-party cassette not present: {cassette}")
    loader = _loader()
    interactions = loader._interactions(cassette)
    rec = loader._record(f"{repo}:{path}", int(index), interactions[int(index)])
    assert rec is not None, f"{source} is not an OpenAI exchange with usage"
    return rec


def counted(source: str) -> tuple[int, int]:
    """(counted, reported) input tokens of the record ``source``."""
    rec = record(source)
    prompt = parse_request(
        rec["request"], provider=rec["provider"], model=rec.get("response_model") or rec.get("path")
    )
    return PromptCounter(load_model_table()).tokenize(prompt).count, rec["total_input_tokens"]
