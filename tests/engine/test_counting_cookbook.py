"""The API-measured counts printed in openai/openai-cookbook's "How to count tokens with tiktoken"
(examples/How_to_count_tokens_with_tiktoken.ipynb, sections 6 and 7): each example was sent to the
API and the notebook prints ``response.usage.prompt_tokens`` beside its own estimate.

Section 6 puts a ``name`` on four of six messages (the few-shot "example_user" /
"example_assistant" pattern): 129 prompt tokens for gpt-3.5-turbo and gpt-4 (cl100k), 124 for
gpt-4o and gpt-4o-mini (o200k). The author name costs the tokens of ``":" + name``
(Framing.name_prefix), which for these names is their tokens plus one, in either tokenizer
(test_counting_names.py has the names where the two part). Section 7 adds one function with an enum
and descriptions: 105 and 101. No record of the calibration data has a message ``name``.

The notebook's 2023 versions measured gpt-3.5-turbo-0301 too: 127 for section 6. That snapshot
frames a message with 4 tokens and writes a name in the role's place (tokens_per_name = -1), which
BoxcarsAI/boxcars' cassettes confirm without names (test_one_more_token_a_message_on_0301).
"""

from __future__ import annotations

from typing import Any

import pytest
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer

NAMED_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
        "into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for "
        "increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]

WEATHER_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]

WEATHER_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


def _count(body: dict[str, Any]) -> int:
    prompt = parse_request(body, provider="openai-chat")
    return PromptCounter(load_model_table()).tokenize(prompt).count


@pytest.mark.parametrize(
    ("model", "reported"),
    [
        ("gpt-3.5-turbo-0301", 127),
        ("gpt-3.5-turbo", 129),
        ("gpt-4", 129),
        ("gpt-4o", 124),
        ("gpt-4o-mini", 124),
    ],
)
def test_message_names(model: str, reported: int) -> None:
    assert _count({"model": model, "messages": NAMED_MESSAGES}) == reported


def test_a_name_costs_its_tokens_and_one() -> None:
    # The same request without the names: each name costs its own tokens plus one.
    tok = get_tokenizer("o200k_base")
    bare = [{k: v for k, v in m.items() if k != "name"} for m in NAMED_MESSAGES]
    names = [m["name"] for m in NAMED_MESSAGES if "name" in m]
    with_names = _count({"model": "gpt-4o", "messages": NAMED_MESSAGES})
    assert with_names - _count({"model": "gpt-4o", "messages": bare}) == sum(
        len(tok.encode(n)) + 1 for n in names
    )


@pytest.mark.parametrize(
    ("model", "reported"), [("gpt-3.5-turbo", 105), ("gpt-4", 105), ("gpt-4o", 101), ("gpt-4o-mini", 101)]
)
def test_one_function_with_an_enum(model: str, reported: int) -> None:
    body = {"model": model, "messages": WEATHER_MESSAGES, "tools": WEATHER_TOOLS, "temperature": 0}
    assert _count(body) == reported


def test_one_more_token_a_message_on_0301() -> None:
    # BoxcarsAI/boxcars (cassettes' dev half: spec/fixtures/cassettes/ar1.yml#0, a system, a system
    # and a user message; ar7.yml#0, five messages): "gpt-3.5-turbo" answered by -0301 reported 3
    # and 5 more than the -0613 framing; its -0613 answers (ar6.yml#0) are exact with it.
    for n in (3, 5):
        messages = [{"role": ("system", "user")[i % 2], "content": f"message {i}"} for i in range(n)]
        old = _count({"model": "gpt-3.5-turbo-0301", "messages": messages})
        assert old - _count({"model": "gpt-3.5-turbo-0613", "messages": messages}) == n
