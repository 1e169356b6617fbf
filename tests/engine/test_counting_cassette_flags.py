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


def _cassette(*pairs: tuple[dict[str, object], str]) -> bytes:
    interactions = [
        {
            "request": {"method": "POST", "uri": URI, "body": json.dumps(body), "headers": {}},
            "response": {"status": {"code": 200}, "headers": {}, "body": {"string": answer}},
        }
        for body, answer in pairs
    ]
    return json.dumps({"interactions": interactions, "version": 1}).encode()  # JSON is YAML


def _answer(rid: str) -> str:
    return json.dumps({"id": rid, "model": "gpt-4o", "usage": {"prompt_tokens": 20}})


def test_a_body_edited_after_its_answer_was_recorded_is_found_in_the_older_versions() -> None:
    # paper-qa e1b6d3ec (dev record test_pdf_reader_match_doc_details#17): a line added to the
    # prompt, the recorded answer kept; the reported count is the original body's (9 tokens fewer).
    loader = _loader()
    edited = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi, and one line more"}]}
    first, second = _answer("chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAA"), _answer("chatcmpl-BBBBBBBBBBBBBBBBBBBBBBBB")
    recorded = _cassette((CHAT, first), (CHAT, second))
    now = _cassette((CHAT, first), (edited, second))
    assert loader.edited_bodies(now, [recorded]) == {1: 0}
    # The newest older version that still had the original body is the one named.
    assert loader.edited_bodies(now, [now, b"not: [yaml", recorded]) == {1: 2}
    # Re-recorded (a new answer, a new id): the body belongs to its answer.
    assert (
        loader.edited_bodies(_cassette((edited, _answer("chatcmpl-CCCCCCCCCCCCCCCCCCCCCCCC"))), [recorded])
        == {}
    )
    # The same JSON laid out anew is no edit; its keys in another order are one (other tokens).
    spaced = _cassette((CHAT, first))
    relaid = spaced.replace(b'\\"model\\": \\"gpt-4o\\"', b'\\"model\\":   \\"gpt-4o\\"')
    assert relaid != spaced and loader.edited_bodies(relaid, [spaced]) == {}
    reordered = {"messages": CHAT["messages"], "model": "gpt-4o"}
    assert loader.edited_bodies(_cassette((reordered, first)), [spaced]) == {0: 0}


def test_an_answer_that_many_recordings_share_proves_no_edit() -> None:
    # An error body or a hand-written answer (a short id) is the same text beside many requests.
    loader = _loader()
    other = {"model": "gpt-4o", "messages": [{"role": "user", "content": "bye"}]}
    for answer in (json.dumps({"error": {"message": "Incorrect API key"}}), _answer("chatcmpl-123")):
        assert loader.edited_bodies(_cassette((other, answer)), [_cassette((CHAT, answer))]) == {}
    assert loader.edited_bodies(b"not: [yaml", [_cassette((CHAT, _answer("chatcmpl-123")))]) == {}


def _dated(content: str, date: str) -> dict[str, object]:
    chat = {"model": "gpt-4", "messages": [{"role": "system", "content": content}]}
    answer = json.dumps(
        {"id": "chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAA", "model": "gpt-4-0613", "usage": {"prompt_tokens": 30}}
    )
    return {
        "request": {"method": "POST", "uri": URI, "body": json.dumps(chat), "headers": {}},
        "response": {"status": {"code": 200}, "headers": {"Date": [date]}, "body": {"string": answer}},
    }


def test_a_body_a_recorder_filter_rewrote_is_suspect() -> None:
    # Significant-Gravitas/Auto-GPT-test-cassettes (dev half): its VCR filter replaced every date in
    # a prompt with "Tue Jan  1 00:00:00 2000" before recording; responses dated the 10th or later
    # were one token under the count (the sent day had two digits).
    loader = _loader()
    frozen = "The current time and date is Tue Jan  1 00:00:00 2000"
    rec = loader._record("o/r:c.yaml", 0, _dated(frozen, "Sat, 15 Jul 2023 10:03:12 GMT"))
    assert rec is not None and rec["frozen_clock"] and rec["suspect"]
    # A date as sent, even an old one a test's frozen clock wrote, is a body like any other.
    for sent in ("The current time and date is Sat Jul 15 09:58:40 2023", "It is Sat Jan  1 00:00:00 2000"):
        rec = loader._record("o/r:c.yaml", 0, _dated(sent, "Sat, 15 Jul 2023 10:03:12 GMT"))
        assert rec is not None and not rec["frozen_clock"] and not rec["suspect"]
    # Responses instructions and text parts are read too.
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": frozen}]}]}
    assert loader.frozen_clock(body)
    assert loader.frozen_clock({"instructions": frozen, "input": "hi"})
    assert not loader.frozen_clock({"instructions": "hi", "input": "hi"})
