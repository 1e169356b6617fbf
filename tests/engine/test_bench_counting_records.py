"""bench/bench_counting.py: which model a record is counted with, and when it was recorded.

Synthetic records (no third-party data). Azure routes by deployment, so the body's ``model`` is not
what ran; a Responses id carries its creation time, which dates a record without a Date header and
puts the Responses API's first weeks in a row of their own.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


@cache
def _bench() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # bench_counting imports its sibling cassette_records
    spec = importlib.util.spec_from_file_location("bench_counting", BENCH / "bench_counting.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(**fields: Any) -> dict[str, Any]:
    return {"provider": "openai-responses", "request": {"model": "gpt-4", "input": "hi"}, **fields}


def test_azure_counts_with_the_model_that_ran() -> None:
    b = _bench()
    azure = "res.openai.azure.com"
    ran = b.request_of(_record(host=azure, response_model="gpt-4.1-mini-2025-04-14"))
    assert ran is not None and ran["model"] == "gpt-4.1-mini-2025-04-14"
    # A scrubbed response model: the deployment's model is unknown, the record is not counted.
    assert b.request_of(_record(host=azure, response_model="AZURE_DEPLOYMENT-2025-04-14")) is None
    # Elsewhere the body's model is the model.
    assert b.request_of(_record(host="api.openai.com", response_model="gpt-4o"))["model"] == "gpt-4"


def test_an_alias_counts_with_the_snapshot_the_response_names() -> None:
    # BoxcarsAI/boxcars' 2023 bodies say "gpt-3.5-turbo"; the alias then pointed at -0301, whose
    # framing differs, and the response says so.
    b = _bench()
    chat = {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "hi"}]}
    ran = b.request_of(_record(request=chat, host="api.openai.com", response_model="gpt-3.5-turbo-0301"))
    assert ran is not None and ran["model"] == "gpt-3.5-turbo-0301"
    dated = b.request_of(_record(request={**chat, "model": "gpt-4o"}, response_model="gpt-4o-2024-08-06"))
    assert dated is not None and dated["model"] == "gpt-4o-2024-08-06"
    # Another model's name is no snapshot of the alias, though it begins with it.
    for alias, answer in (("gpt-4", "gpt-4o-2024-08-06"), ("gpt-4o", "gpt-4o-mini-2024-07-18")):
        body = {**chat, "model": alias}
        other = b.request_of(_record(request=body, host="api.openai.com", response_model=answer))
        assert other is not None and other["model"] == alias


def test_pooled_sources_count_a_body_once(tmp_path: Path) -> None:
    # A project that copies another's cassettes (an instrumentation's fork) adds no record.
    b = _bench()
    exchange = (
        '{"interactions": [{"request": {"method": "POST", "uri": "https://api.openai.com/v1/chat/completions",'
        ' "body": "{\\"model\\": \\"gpt-4o\\", \\"messages\\": []}", "headers": {}},'
        ' "response": {"status": {"code": 200}, "headers": {}, "body": {"string":'
        ' "{\\"id\\": \\"chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAA\\", \\"usage\\": {\\"prompt_tokens\\": 8}}"}}}]}'
    )
    for root, repo in ((tmp_path / "a", "o+one"), (tmp_path / "b", "o+fork")):
        cassette = root / repo / "tests" / "cassettes" / "c.yaml"
        cassette.parent.mkdir(parents=True)
        cassette.write_text(exchange)
    assert len([r for root in (tmp_path / "a", tmp_path / "b") for r in b.load_cassettes(root)]) == 2
    pooled = list(b.pooled_cassettes([tmp_path / "a", tmp_path / "b"]))
    assert [r["source"] for r in pooled] == ["o/one:tests/cassettes/c.yaml#0"]


def test_a_responses_id_dates_a_record_without_a_date() -> None:
    b = _bench()
    assert b.recorded_at(_record(response_id="resp_68659e7dd32c8199")) == 0x68659E7D  # 2025-07-02
    assert (
        b.recorded_at(_record(recorded_at="Wed, 02 Jul 2025 21:02:53 GMT", response_id="resp_00"))
        == 0x68659E7D
    )
    # placeholder ids give no time
    assert b.recorded_at(_record(response_id="resp_0123456789abcdef")) is None
    assert b.recorded_at(_record(response_id="resp_abc")) is None


def test_the_launch_weeks_have_a_row_of_their_own() -> None:
    b = _bench()
    march = _record(recorded_at="Fri, 14 Mar 2025 10:00:00 GMT")
    may = _record(response_id="resp_6813a5c0aaaaaaaaaaaa")  # 2025-05-01
    assert b.kinds(march) == [b.RESPONSES_LAUNCH]
    assert b.kinds(may) == ["OpenAI Responses"]
    assert b.kinds(_record()) == ["OpenAI Responses"]  # undated: today's API
