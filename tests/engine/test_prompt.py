"""The request model's own helpers."""

from __future__ import annotations

from cachewarden.proxy.engine.adapters import parse_request

BODY = {
    "model": "gpt-5.6",
    "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
    "messages": [{"role": "user", "content": "hi"}],
}


def test_with_model_recomputes_the_fingerprint() -> None:
    prompt = parse_request(BODY)
    other = prompt.with_model("gpt-5.6-mini")
    assert other.model == "gpt-5.6-mini" and other.segments == prompt.segments
    assert other.fingerprint != prompt.fingerprint
    assert other.with_model("gpt-5.6").fingerprint == prompt.fingerprint


def test_param_object_reads_canonical_json() -> None:
    prompt = parse_request(BODY)
    assert prompt.param_object("prompt_cache_options") == {"mode": "explicit", "ttl": "30m"}
    assert prompt.param_object("absent") is None
