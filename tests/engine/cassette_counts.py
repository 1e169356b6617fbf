"""Counting checked against the cassette sources (held out): public projects' VCR cassettes.

The cassettes are third-party data, unpacked as ``OWNER+NAME/PATH`` under /tmp/acc4/raw (the second
source), /tmp/acc5/raw (the third) and /tmp/acc6/raw (the fourth), or the directories in
``CACHEWARDEN_CASSETTES`` (separated by ``os.pathsep``); bench/cassette_sources.py names the
repositories and commits. They are read in place by bench/cassette_records.py, the loader
bench_counting.py uses, and the tests that need them skip where they are absent. A case is a record
id, ``owner/repo:path#i``, always from the "dev" half (bench_counting.part): the final half is never
used in a test.
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

ROOTS = tuple(
    Path(p)
    for p in os.environ.get(
        "CACHEWARDEN_CASSETTES", f"/tmp/acc4/raw{os.pathsep}/tmp/acc5/raw{os.pathsep}/tmp/acc6/raw"
    ).split(os.pathsep)
    if p
)
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
    found = [root / repo.replace("/", "+", 1) / path for root in ROOTS]
    cassette = next((c for c in found if c.is_file()), None)
    if cassette is None:
        pytest.skip(f"third-party cassette not present: {repo}:{path}")
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
