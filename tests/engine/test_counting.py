"""PromptCounter: framing, spans, memoisation, the count rule; and the `count` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cachewarden.proxy.cli import count as count_cmd
from cachewarden.proxy.engine.counting import (
    PromptCounter,
    Tokenizer,
    framing_for,
    image_tokens,
)
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt, Segment
from cachewarden.proxy.engine.rendering import render_response_format
from cachewarden.proxy.engine.tokenizers import get_tokenizer

EXAMPLES = Path(count_cmd.__file__).parents[1] / "examples"


@pytest.fixture
def counter() -> PromptCounter:
    return PromptCounter(load_model_table())


def chat(model: str, *messages: tuple[str, str]) -> Prompt:
    segs = tuple(
        Segment(f"messages[{i}]", "system" if role == "system" else "message", text, role, i)
        for i, (role, text) in enumerate(messages)
    )
    return Prompt("openai-chat", model, segs)


def test_small_chat_matches_hand_computed_formula(counter: PromptCounter) -> None:
    # o200k: "system"=1, "You are helpful."=4 (You / are / helpful / .), "user"=1, "Hi"=1 token.
    # (3 + 1 + 4) + (3 + 1 + 1) + 3 reply priming = 16, as gpt-4o reports for this request.
    t = counter.tokenize(chat("gpt-4o", ("system", "You are helpful."), ("user", "Hi")))
    assert t.count == len(t.tokens) == 16
    assert t.tokenizer == "o200k_base" and t.ratio == 1.0


def test_gpt5_reports_one_less(counter: PromptCounter) -> None:
    p = ("system", "You are helpful."), ("user", "Hi")
    assert counter.tokenize(chat("gpt-5-mini", *p)).count == counter.tokenize(chat("gpt-4o", *p)).count - 1
    assert framing_for("openai-chat", "o3-mini").reply == 2
    # o1 as o3 (dspy.rb's model-matrix o1 requests, cassettes' dev half: one over with 3); o1-mini
    # keeps 3 (crewAI's test_llm_call_when_stop_is_unsupported, training: exact with it).
    assert framing_for("openai-chat", "o1").reply == 2
    assert framing_for("openai-chat", "o1-2024-12-17").reply == 2
    assert framing_for("openai-chat", "o1-mini-2024-09-12").reply == 3
    assert framing_for("openai-chat", "gpt-4o-mini").reply == 3


def test_spans_cover_tokens_contiguously(counter: PromptCounter) -> None:
    prompt = Prompt(
        "anthropic",
        "claude-sonnet-4-5",
        (
            Segment("tools[0]", "tool", '{"name":"f","input_schema":{"type":"object"}}', name="f"),
            Segment("system[0]", "system", "Be brief."),
            Segment("messages[0].content[0]", "text", "Look", "user", 0),
            Segment("messages[0].content[1]", "image", "", "user", 0, fixed_tokens=7, digest="ab" * 8),
            Segment("messages[1].content", "message", "Seen.", "assistant", 1),
        ),
    )
    t = counter.tokenize(prompt)
    assert len(t.spans) == len(prompt.segments)
    # Reply priming follows the last span and belongs to no segment.
    reply = framing_for("anthropic", "claude-sonnet-4-5").reply
    assert t.spans[0][0] == 0 and len(t.tokens) - t.spans[-1][1] == reply
    for (_, end), (start, _) in zip(t.spans, t.spans[1:], strict=False):
        assert end == start
    assert all(end > start for start, end in t.spans)


def test_count_is_stream_length_times_ratio(counter: PromptCounter) -> None:
    prompt = Prompt(
        "anthropic", "claude-sonnet-4-5", (Segment("messages[0].content", "message", "x " * 500, "user", 0),)
    )
    t = counter.tokenize(prompt)
    assert t.ratio == 1.16 and t.count == round(len(t.tokens) * 1.16)
    counter.set_ratio("claude-sonnet-4", 1.1)  # a family prefix, as online calibration sets it
    t2 = counter.tokenize(prompt)
    assert t2.ratio == 1.1 and t2.count == round(len(t2.tokens) * 1.1) and t2.tokens == t.tokens
    with pytest.raises(ValueError):
        counter.set_ratio("claude", 0)


def test_memo_hit_avoids_re_encoding(counter: PromptCounter, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachewarden.proxy.engine import counting, tokenizers

    real = tokenizers.get_tokenizer("o200k_base")
    calls: list[str] = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return real.encode(text)

    monkeypatch.setattr(counting, "get_tokenizer", lambda spec: Tokenizer("o200k_base", encode))
    turns = [("system", "S " * 300)] + [("user", f"question {i} " * 20) for i in range(5)]
    counter.tokenize(chat("gpt-4o", *turns))
    cold = len(calls)
    calls.clear()
    second = counter.tokenize(chat("gpt-4o", *turns, ("user", "one more")))
    assert calls == ["one more"] and cold >= 6
    assert second.tokens == counter.tokenize(chat("gpt-4o", *turns, ("user", "one more"))).tokens


def test_memo_is_bounded() -> None:
    small = PromptCounter(load_model_table(), memo_entries=3)
    small.tokenize(chat("gpt-4o", *[("user", f"m{i}") for i in range(10)]))
    assert len(small.memo) == 3


def test_images_give_stable_distinct_pseudo_tokens() -> None:
    a, b = image_tokens("00" * 8, 4), image_tokens("01" + "00" * 7, 4)
    assert a == image_tokens("00" * 8, 4) and a[0] != b[0] and all(t < -4 for t in a + b)


def test_tools_are_rendered_and_counted(counter: PromptCounter) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    base = chat("gpt-4o", ("user", "Hi"))
    with_tool = Prompt(
        "openai-chat",
        "gpt-4o",
        (Segment("tools[0]", "tool", json.dumps(tool), name="get_weather"), *base.segments),
    )
    assert counter.tokenize(with_tool).count - counter.tokenize(base).count > 20


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_count_cmd_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert count_cmd.main([str(EXAMPLES / "anthropic-turn.json"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"model", "tokenizer", "tokens", "segments"}
    assert out["tokenizer"] == "claude" and out["tokens"] > 500
    assert [s["path"] for s in out["segments"]][:2] == ["tools[0]", "tools[1]"]


def test_count_cmd_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert count_cmd.main([str(EXAMPLES / "agent-turn.json")]) == 0
    out = capsys.readouterr().out
    assert "messages[2].tool_calls[0]" in out and "total" in out and "o200k_base" in out


def test_count_cmd_jsonl_and_model_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi"}],
    }
    path = write(tmp_path, "b.jsonl", json.dumps(body) + "\n\n" + json.dumps(body) + "\n")
    assert count_cmd.main([path, "--format", "json", "--model", "gpt-4-0613"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2 and lines[0]["model"] == "gpt-4-0613" and lines[0]["tokenizer"] == "cl100k_base"
    assert lines[0]["tokens"] == 16 == sum(s["tokens"] for s in lines[0]["segments"])


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("bad.jsonl", '{"model": "gpt-4o", "messages": []}\n{oops\n', "line 2"),
        ("bad.json", "{oops", "not valid JSON"),
        ("missing.json", None, "no such file"),
    ],
)
def test_count_cmd_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str | None, needle: str
) -> None:
    path = write(tmp_path, name, text) if text is not None else str(tmp_path / name)
    assert count_cmd.main([path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cachewarden count: error: ") and needle in err and err.count("\n") == 1


def test_count_cmd_unknown_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models.yaml"
    models.write_text('models:\n  - {match: "mine", tokenizer: "hf:/nope/tokenizer.json", cache: vllm}\n')
    body = write(
        tmp_path, "b.json", json.dumps({"model": "mine-7b", "messages": [{"role": "user", "content": "x"}]})
    )
    original = count_cmd.load_model_table
    try:
        count_cmd.load_model_table = lambda override=None: original(models)  # type: ignore[assignment]
        assert count_cmd.main([body]) == 2
    finally:
        count_cmd.load_model_table = original  # type: ignore[assignment]
    assert "cachewarden count: error: hf:/nope" in capsys.readouterr().err


def test_small_anthropic_request_matches_hand_computed_count(counter: PromptCounter) -> None:
    # Claude 4.5 framing: message start + "Hi" (1 o200k token) + end, reply priming 4 -> 7 stream tokens;
    # x 1.16 = 8.12 -> 8, as claude-haiku-4-5 reports for a one-token user message.
    msg = Segment("messages[0].content", "message", "Hi", "user", 0)
    t = counter.tokenize(Prompt("anthropic", "claude-sonnet-4-5", (msg,)))
    assert len(t.tokens) == 7 and t.count == 8


def anthropic_with_tool(params: tuple[tuple[str, str], ...], model: str = "claude-sonnet-4-5") -> Prompt:
    tool = Segment("tools[0]", "tool", '{"name":"f","input_schema":{"type":"object"}}', name="f")
    msg = Segment("messages[0].content", "message", "Hi", "user", 0)
    return Prompt("anthropic", model, (tool, msg), params)


def test_anthropic_parameters_add_their_framing(counter: PromptCounter) -> None:
    plain = counter.tokenize(anthropic_with_tool(()))

    def extra(*params: tuple[str, str]) -> int:
        t = counter.tokenize(anthropic_with_tool(params))
        # Parameters never change the stream (they salt the messages, not the tools / system prefix).
        assert t.tokens == plain.tokens and t.count == round((len(t.tokens) + t.hidden) * 1.16)
        return t.hidden - plain.hidden

    # Claude 4.5: forced tool choice uses a longer tool-use system prompt (532 instead of 438 stream tokens).
    assert extra(("tool_choice", '{"type":"any"}')) == 532 - 438
    assert extra(("tool_choice", '{"type":"tool","name":"f"}')) == 532 - 438
    assert extra(("tool_choice", '{"type":"auto"}')) == 0
    assert extra(("thinking", '{"budget_tokens":1024,"type":"enabled"}')) == 21
    assert extra(("thinking", '{"type":"disabled"}')) == 0
    # Output schema: 75 + the schema as indented JSON ('{\n  "type": "object",\n  "properties": ...' = 30).
    fmt = '{"schema":{"type":"object","properties":{"city":{"type":"string"}}},"type":"json_schema"}'
    assert extra(("output_format", fmt)) == 75 + 30
    assert extra(("output_config", '{"format":' + fmt + "}")) == 75 + 30
    # Claude 4 (Sonnet 4.0): the forced prompt is the shorter one (219 instead of 239).
    # The stream carries the smaller of the two, the difference is hidden.
    auto = counter.tokenize(anthropic_with_tool((), "claude-sonnet-4-0"))
    forced = counter.tokenize(anthropic_with_tool((("tool_choice", '{"type":"any"}'),), "claude-sonnet-4-0"))
    assert auto.tokens == forced.tokens and (auto.hidden, forced.hidden) == (239 - 219, 0)


def test_response_format_rendering_and_count(counter: PromptCounter) -> None:
    spec = {
        "type": "json_schema",
        "json_schema": {
            "name": "r",
            # Not strict: a strict format also addresses the reply (test_counting_strict_formats.py).
            "schema": {
                "type": "object",
                "title": "R",
                "properties": {"title": {"type": "string", "title": "Title"}},
                "required": ["title"],
                "additionalProperties": False,
            },
        },
    }
    # What strict mode implies (additionalProperties, required) goes; titles stay, and a property
    # named "title" is a property, not the keyword.
    assert render_response_format(json.dumps(spec)) == (
        "# Response Formats\n\n## r\n\n"
        '{"type":"object","title":"R","properties":{"title":{"type":"string","title":"Title"}}}'
    )
    base = chat("gpt-4o", ("user", "Hi"))
    with_schema = Prompt(
        "openai-chat", "gpt-4o", (Segment("response_format", "schema", json.dumps(spec)), *base.segments)
    )
    rendered = len(get_tokenizer("o200k_base").encode(render_response_format(json.dumps(spec)) or ""))
    # No tools and no system message: the section opens a system message (3 + role), schema_alone 4.
    assert counter.tokenize(with_schema).count - counter.tokenize(base).count == 4 + 4 + rendered


def test_responses_gpt5_tools_have_no_harmony_preamble() -> None:
    # Chat Completions adds the 84-token harmony preamble with tools; Responses only the developer
    # message's few framing tokens (framing.py: 3, joined or alone).
    assert framing_for("openai-responses", "gpt-5-mini").tools_once < 10
    assert framing_for("openai-chat", "gpt-5-mini").tools_once == 84


def test_memo_is_bounded_by_tokens_held() -> None:
    from cachewarden.proxy.engine.counting_memo import SegmentMemo

    memo = SegmentMemo(entries=100, max_tokens=10)
    memo.put(("t", "text", "a"), (1, 2, 3, 4))
    memo.put(("t", "text", "b"), (5, 6, 7, 8))
    memo.put(("t", "text", "c"), (9, 10, 11))
    assert memo.tokens <= 10 and memo.get(("t", "text", "a")) is None
    assert memo.get(("t", "text", "c")) == (9, 10, 11)
    memo.put(("t", "text", "huge"), tuple(range(50)))  # larger than the whole memo: not kept
    assert memo.get(("t", "text", "huge")) is None and memo.tokens <= 10
