"""Azure OpenAI's model names: "gpt-35-turbo" is GPT-3.5 (cl100k), as OpenAI's "gpt-3.5-turbo".

Record case from the dev half of the cassettes: an Azure answer naming gpt-35-turbo, one over with
o200k (the table's default) and exact with cl100k.
"""

from __future__ import annotations

from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cassette_counts import record

AZURE_35 = (
    "traceloop/openllmetry:packages/opentelemetry-instrumentation-openai/tests/traces/cassettes/"
    "test_azure/test_chat.yaml#0"
)


def test_azure_spelling_is_gpt_35() -> None:
    table = load_model_table()
    for name in ("gpt-35-turbo", "gpt-35-turbo-16k", "gpt-35-turbo-0613"):
        assert table.lookup(name).tokenizer == "cl100k_base"
        assert table.lookup(name).cache == table.lookup(name.replace("35", "3.5", 1)).cache
    assert table.lookup("gpt-4o").tokenizer == "o200k_base"


def test_cassette() -> None:
    # The body's model is the deployment's name; Azure answered as gpt-35-turbo.
    rec = record(AZURE_35)
    assert rec["response_model"] == "gpt-35-turbo"
    prompt = parse_request({**rec["request"], "model": rec["response_model"]}, provider=rec["provider"])
    assert PromptCounter(load_model_table()).tokenize(prompt).count == rec["total_input_tokens"]
