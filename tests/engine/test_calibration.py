"""Self-calibration of counts (engine/calibration.py): keys, offsets, ratios, bounds."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from cachewarden.proxy.engine import calibration
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.calibration import CountCalibration, FixedDigests, fixed_digest
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt, Segment
from cachewarden.proxy.engine.reading import ConversationReader

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def chat(*turns: str, tools: list[Any] | None = None, system: str = "Be brief.") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-4.1",
        "messages": [{"role": "system", "content": system}, *({"role": "user", "content": t} for t in turns)],
    }
    if tools is not None:
        body["tools"] = tools
    return body


def test_the_key_follows_the_fixed_parts_not_the_conversation() -> None:
    key = fixed_digest(parse_request(chat("a", tools=[TOOL])))
    assert fixed_digest(parse_request(chat("a", "b", "c", tools=[TOOL]))) == key  # grows: same key
    assert fixed_digest(parse_request(chat("a"))) != key  # no tools
    assert fixed_digest(parse_request(chat("a", tools=[TOOL], system="Be long."))) != key
    assert fixed_digest(parse_request({**chat("a", tools=[TOOL]), "model": "gpt-4o"})) != key


def test_an_offset_is_learned_per_tenant_and_applied() -> None:
    counter = PromptCounter(load_model_table())
    calibration = CountCalibration(counter)
    first = parse_request(chat("a", tools=[TOOL]))
    tp = counter.tokenize(first)
    assert not calibration.apply("t", first, tp).learned
    calibration.observe("t", first, tp, tp.count + 5, exact=True)
    later = parse_request(chat("a", "b", tools=[TOOL]))
    got = calibration.apply("t", later, counter.tokenize(later))
    assert got.learned and got.offset == 5
    assert calibration.apply("u", later, counter.tokenize(later)).offset == 0
    # A difference too large to be a rendering error (server-side content) is not learned.
    calibration.observe("t", first, tp, tp.count * 3, exact=True)
    assert calibration.apply("t", later, counter.tokenize(later)).offset == 5


def test_estimated_counts_learn_the_ratio_first() -> None:
    counter = PromptCounter(load_model_table())
    calibration = CountCalibration(counter)
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "system": "policy " * 400, "messages": []}
    body["messages"] = [{"role": "user", "content": "hi"}]
    prompt = parse_request(body, provider="anthropic")
    tp = counter.tokenize(prompt)
    before = counter.ratio_for("claude-sonnet-4-5", tp.ratio)
    calibration.observe("t", prompt, tp, round(tp.count * 1.2), exact=False)
    assert counter.ratio_for("claude-sonnet-4-5", tp.ratio) > before
    assert len(calibration) == 1


def _read(reader: ConversationReader, body: dict[str, Any]) -> Prompt:
    return reader.parse(reader.load(json.dumps(body).encode(), tenant="t"), "openai-chat", tenant="t")


def test_the_key_of_a_next_turn_is_taken_from_its_basis(monkeypatch: pytest.MonkeyPatch) -> None:
    reader, digests = ConversationReader(), FixedDigests()
    held = [_read(reader, chat("a", "b", tools=[TOOL]))]  # held: a basis refers to its prompt weakly
    assert digests.of(held[0]) == fixed_digest(held[0])
    whole: list[int] = []
    digest_whole = calibration._fixed

    def counted(fingerprint: str, segments: Sequence[Segment]) -> tuple[str, int, int]:
        whole.append(len(segments))
        return digest_whole(fingerprint, segments)

    monkeypatch.setattr(calibration, "_fixed", counted)
    held.append(_read(reader, chat("a", "b", "c", tools=[TOOL])))
    assert held[1].basis is not None
    key = digests.of(held[1])
    assert not whole  # the basis' key, its new segment looked at only
    assert key == fixed_digest(held[1]) == fixed_digest(held[0])
    # The system prompt edited: not in the shared segments, so digested whole, and a new key.
    held.append(_read(reader, chat("a", "b", "c", tools=[TOOL], system="Be long.")))
    assert digests.of(held[2]) == fixed_digest(held[2]) != fixed_digest(held[1])
    # Another model: the fingerprint differs, so the basis' digest is not taken.
    held.append(
        _read(reader, {**chat("a", "b", "c", "d", tools=[TOOL], system="Be long."), "model": "gpt-4o"})
    )
    assert digests.of(held[3]) == fixed_digest(held[3]) != fixed_digest(held[2])
