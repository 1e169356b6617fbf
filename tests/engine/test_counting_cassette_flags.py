"""bench/cassette_records.py's quality flags that keep a record out of the accuracy figures.

Synthetic exchanges (no third-party data): each flag is a general rule on the recording, never a
record id.
"""

from __future__ import annotations

import json

from cassette_counts import _loader

CHAT = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "What is the llm version?"}]}
URI = "https://api.openai.com/v1/chat/completions"


def _exchange(usage: dict[str, object], model: str) -> dict[str, object]:
    body = json.dumps({"id": "gen-1753282449-AbCdEfGhIjKlMnOpQrSt", "model": model, "usage": usage})
    return {
        "request": {"method": "POST", "uri": URI, "body": json.dumps(CHAT), "headers": {}},
        "response": {"status": {"code": 200}, "headers": {}, "body": {"string": body}},
    }


def test_a_usage_block_openrouter_wrote_is_suspect() -> None:
    # simonw/llm's test_tools_streaming variant c / d (dev half): the host reads api.openai.com, but
    # the usage carries OpenRouter's accounting (cost, is_byok) and names moonshotai/kimi-k2.
    loader = _loader()
    foreign = {"prompt_tokens": 56, "completion_tokens": 12, "cost": 5.952e-05, "is_byok": False}
    rec = loader._record("o/r:c.yaml", 0, _exchange(foreign, "moonshotai/kimi-k2"))
    assert rec is not None and rec["suspect"]
    # The same exchange with OpenAI's own usage fields is a record like any other.
    own = {"prompt_tokens": 56, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 0}}
    rec = loader._record("o/r:c.yaml", 0, _exchange(own, "gpt-4.1-mini-2025-04-14"))
    assert rec is not None and not rec["suspect"]
