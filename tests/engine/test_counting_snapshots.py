"""Rules from the fourth cassette source's dev half (stop 36), checked on its records by id.

Each case skips where the third-party cassettes are not unpacked (cassette_counts.py); the spelled-
out rules are tested without them in test_counting_cookbook.py, test_counting.py and
test_counting_cassette_flags.py.
"""

from __future__ import annotations

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cassette_counts import counted, record
from test_bench_counting_records import _bench

BOXCARS = "BoxcarsAI/boxcars:spec/fixtures/cassettes/"
AUTOGPT = (
    "Significant-Gravitas/Auto-GPT-test-cassettes:"
    "test_debug_code_challenge_a/test_debug_code_challenge_a.yaml"
)


@pytest.mark.parametrize("source", [f"{BOXCARS}ar1.yml#0", f"{BOXCARS}ar7.yml#0", f"{BOXCARS}ar6.yml#0"])
def test_gpt_35_turbo_counts_with_the_snapshot_that_answered(source: str) -> None:
    # ar1 / ar7 were answered by gpt-3.5-turbo-0301 (3 and 5 under with -0613's framing), ar6 by -0613.
    rec = record(source)
    assert rec["request"]["model"] == "gpt-3.5-turbo"
    body = _bench().request_of(rec)  # the bench's choice of model: the snapshot that answered
    assert body is not None and body["model"] == rec["response_model"]
    prompt = parse_request(body, provider=rec["provider"])
    assert PromptCounter(load_model_table()).tokenize(prompt).count == rec["total_input_tokens"]


def test_o1_primes_its_reply_with_two_tokens() -> None:
    got, reported = counted("vicentereig/dspy.rb:spec/vcr_cassettes/model_matrix_openai_o1.yml#0")
    assert got == reported


@pytest.mark.parametrize("index", [95, 109, 139])
def test_auto_gpts_frozen_clock_is_suspect(index: int) -> None:
    # #95 and #109 were recorded on the 10th or later (one under), #139 on a day 1-9 (exact by chance).
    rec = record(f"{AUTOGPT}#{index}")
    assert rec["frozen_clock"] and rec["suspect"]
