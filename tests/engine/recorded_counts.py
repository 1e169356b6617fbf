"""Counting checked against recorded provider usage: one record per case, by its source id.

The records are ../shared/data/recorded/interactions.jsonl (third-party data: read in place where it
exists; the tests that use it skip elsewhere). A case's source is ``[responses:]PROJECT:PATH#N``; the
``responses:`` prefix reads the body as a Responses request, else as Chat Completions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "recorded" / "interactions.jsonl"
RESPONSES = "responses:"


@cache
def _records(wanted: frozenset[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with DATA.open(encoding="utf-8") as fh:
        for line in fh:
            if any(s in line for s in wanted):
                rec = json.loads(line)
                if rec["source"] in wanted:
                    out[rec["source"]] = rec
    return out


def assert_count_exact(cases: Mapping[str, str], case: str) -> None:
    """The counter gives exactly the input tokens the provider reported for ``cases[case]``."""
    source = cases[case]
    provider = "openai-responses" if source.startswith(RESPONSES) else "openai-chat"
    rec = _records(frozenset(v.removeprefix(RESPONSES) for v in cases.values()))[
        source.removeprefix(RESPONSES)
    ]
    prompt = parse_request(rec["request"], provider=provider, model=rec.get("response_model"))
    assert PromptCounter(load_model_table()).tokenize(prompt).count == rec["total_input_tokens"]
