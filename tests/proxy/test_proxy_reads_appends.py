"""The proxy's analysis parses only what a conversation's next body appends (ConversationReader.load),
with the same predictions as parsing every body whole."""

from __future__ import annotations

import json
from typing import Any

from cachewarden.proxy.engine.adapters import load_body
from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.server.analysis import EngineAnalyzer
from cachewarden.proxy.server.hooks import body_loader, parse_model
from cachewarden.proxy.server.metrics import Metrics
from flow_support import request_flow

POLICY = " ".join(f"Rule {i}: quote section {i} of the handbook." for i in range(300))


def _bodies(turns: int) -> list[bytes]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": POLICY}]
    out = []
    for turn in range(turns):
        messages = [*messages, {"role": "user", "content": f"question {turn}"}]
        out.append(json.dumps({"messages": messages, "model": "gpt-4.1", "stream": True}).encode())
        messages = [*messages, {"role": "assistant", "content": f"answer {turn}"}]
    return out


def test_the_next_turn_of_a_conversation_is_parsed_from_where_it_grew() -> None:
    analyzer = EngineAnalyzer(Engine(), Metrics())
    whole = EngineAnalyzer(Engine(), Metrics())  # every body parsed whole, as load_body does
    load = body_loader([object(), analyzer])
    assert load is not None
    previous: Any = None
    for n, raw in enumerate(_bodies(6)):
        flow, reference = request_flow(raw, n), request_flow(raw, n)
        parse_model(flow, load)
        analyzer.request(flow)
        reference.metadata["body"] = load_body(raw)
        parse_model(reference)
        whole.request(reference)
        body = flow.metadata["body"]
        assert body == reference.metadata["body"] and flow.model == "gpt-4.1"
        got, expected = flow.metadata["analysis"].prediction, reference.metadata["analysis"].prediction
        assert got == expected
        if n >= 1:  # from the second body on
            assert body["messages"][0] is previous["messages"][0]
        previous = body
    assert got.cached_tokens > 0
