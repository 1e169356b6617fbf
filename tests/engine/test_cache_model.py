"""Provider cache models: scenarios from the providers' docs, and invariants under hypothesis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from cachewarden.proxy.engine.cache_model import (
    EXPLICIT_MODE_PARAM,
    LIMIT_ORDER,
    MarkLookup,
    Prediction,
    breakpoint_positions,
    predict,
)
from cachewarden.proxy.engine.models import CacheRules, load_model_table
from cachewarden.proxy.engine.prompt import CacheControl, CacheTTL, Prompt, Provider, Segment, SegmentKind
from hypothesis import given, settings
from hypothesis import strategies as st

TABLE = load_model_table()
OPENAI = TABLE.lookup("gpt-4o").cache
OPENAI_56 = TABLE.lookup("gpt-5.6").cache
ANTHROPIC = replace(TABLE.lookup("claude-sonnet-4-5").cache, min_tokens=1024)
VLLM = TABLE.profiles["vllm"]
SGLANG = TABLE.profiles["sglang"]


# -- tiny local fakes of counting.TokenizedPrompt and index.Match -------------------------------------


@dataclass(frozen=True, slots=True)
class FakeTokens:
    tokens: Sequence[int]
    spans: tuple[tuple[int, int], ...]
    ratio: float
    count: int
    tokenizer: str = "fake"


@dataclass(frozen=True, slots=True)
class FakeMatch:
    common_prefix_tokens: int
    held_prefix_tokens: int
    entry_id: str | None = None
    entry_tokens: int = 0
    age_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Seg:
    """A segment spec for tests: length in stream tokens and what the Segment carries."""

    length: int
    ttl: CacheTTL | None = None  # a cache_control breakpoint with this TTL
    kind: SegmentKind = "text"
    role: str | None = "user"
    message: int | None = None
    text: str = "x"


def build(
    specs: Sequence[Seg],
    *,
    ratio: float = 1.0,
    tail: int = 0,
    auto: CacheTTL | None = None,
    params: tuple[tuple[str, str], ...] = (),
    provider: Provider = "anthropic",
) -> tuple[Prompt, FakeTokens]:
    """A Prompt and its token stream: segments laid end to end, then ``tail`` framing tokens."""
    segments, spans, pos = [], [], 0
    for i, spec in enumerate(specs):
        segments.append(
            Segment(
                path=f"s[{i}]",
                kind=spec.kind,
                text=spec.text,
                role=spec.role,
                message_index=spec.message if spec.message is not None else i,
                cache_control=CacheControl(ttl=spec.ttl) if spec.ttl else None,
            )
        )
        spans.append((pos, pos + spec.length))
        pos += spec.length
    n = pos + tail
    prompt = Prompt(
        provider=provider,
        model="test",
        segments=tuple(segments),
        params=params,
        auto_cache=CacheControl(ttl=auto) if auto else None,
    )
    return prompt, FakeTokens(list(range(n)), tuple(spans), ratio, round(n * ratio))


def marks_at(written: Mapping[int, float] | Sequence[int]) -> MarkLookup:
    table = dict(written) if isinstance(written, Mapping) else dict.fromkeys(written, 1.0)

    def lookup(positions: Sequence[int]) -> Mapping[int, float]:
        return {p: table[p] for p in positions if p in table}

    return lookup


NO_MARKS = marks_at({})


def run(
    prompt: Prompt,
    tp: FakeTokens,
    rules: CacheRules,
    common: int,
    marks: MarkLookup = NO_MARKS,
    held: int | None = None,
) -> Prediction:
    return predict(prompt, tp, rules, FakeMatch(common, common if held is None else held), marks)


def check_totals(p: Prediction, tp: FakeTokens) -> None:
    assert p.cached_tokens + p.cache_write_tokens + p.uncached_tokens == tp.count
    assert min(p.cached_tokens, p.cache_write_tokens, p.cache_write_1h_tokens, p.uncached_tokens) >= 0
    assert p.cache_write_1h_tokens <= p.cache_write_tokens
    assert p.cached_tokens <= p.reusable_tokens


# -- prefix mode (OpenAI before GPT-5.6) ----------------------------------------------------------------


def test_openai_prompt_below_1024_is_never_cached() -> None:
    prompt, tp = build([Seg(400, role="system"), Seg(600)], provider="openai-chat")
    p = run(prompt, tp, OPENAI, common=1000)
    assert (p.cached_tokens, p.cache_write_tokens, p.uncached_tokens) == (0, 0, 1000)
    assert p.limits == ("below-minimum",)
    assert p.reusable_tokens == 1000 and p.read_position == 0


def test_openai_repeat_of_2000_tokens_caches_1920() -> None:
    prompt, tp = build([Seg(1500, role="system"), Seg(500)], provider="openai-chat")
    p = run(prompt, tp, OPENAI, common=2000)
    assert (p.cached_tokens, p.cache_write_tokens, p.uncached_tokens) == (1920, 0, 80)
    assert p.limits == () and p.write_positions == () and p.read_position == 1920


def test_openai_shared_prefix_rounds_down_to_128() -> None:
    prompt, tp = build([Seg(1500, role="system"), Seg(1500)], provider="openai-chat")
    assert run(prompt, tp, OPENAI, common=1500).cached_tokens == 1408
    assert run(prompt, tp, OPENAI, common=1100).cached_tokens == 1024
    short = run(prompt, tp, OPENAI, common=1000)
    assert short.cached_tokens == 0 and short.limits == ("below-minimum",)


def test_cold_prompt_has_no_limits() -> None:
    prompt, tp = build([Seg(3000)], provider="openai-chat")
    p = run(prompt, tp, OPENAI, common=0)
    assert p.cached_tokens == 0 and p.limits == () and p.reusable_tokens == 0


def test_expired_prefix_is_reported() -> None:
    prompt, tp = build([Seg(3000)], provider="openai-chat")
    p = run(prompt, tp, OPENAI, common=0, held=3000)
    assert p.cached_tokens == 0 and p.limits == ("expired",)


# -- blocks / radix (vLLM, SGLang) ---------------------------------------------------------------------


def test_vllm_ten_shared_tokens_with_block_4_hit_8() -> None:
    rules = replace(VLLM, granularity=4)
    prompt, tp = build([Seg(10), Seg(10)], provider="openai-chat")
    p = run(prompt, tp, rules, common=10)
    assert (p.cached_tokens, p.uncached_tokens) == (8, 12)
    assert p.read_position == 8


def test_fully_cached_prompt_recomputes_the_last_token() -> None:
    prompt, tp = build([Seg(60), Seg(40)], provider="openai-chat")
    radix = run(prompt, tp, SGLANG, common=100)
    assert (radix.cached_tokens, radix.uncached_tokens) == (99, 1)
    blocks = run(prompt, tp, replace(VLLM, granularity=4), common=100)
    assert (blocks.cached_tokens, blocks.uncached_tokens) == (96, 4)  # 99 rounded down to a block


def test_radix_page_size_rounds_down() -> None:
    prompt, tp = build([Seg(50)], provider="openai-chat")
    assert run(prompt, tp, replace(SGLANG, granularity=16), common=40).cached_tokens == 32


# -- breakpoints (Anthropic) ---------------------------------------------------------------------------


def test_first_request_writes_the_prefix_at_the_breakpoint() -> None:
    prompt, tp = build([Seg(500, role=None), Seg(1500, ttl="5m", role="system"), Seg(200)])
    p = run(prompt, tp, ANTHROPIC, common=0)
    assert (p.cached_tokens, p.cache_write_tokens, p.uncached_tokens) == (0, 2000, 200)
    assert p.write_positions == ((2000, "5m"),) and p.read_position == 0 and p.limits == ()


def test_rolling_breakpoint_reads_the_previous_turns_write() -> None:
    turn1, tp1 = build([Seg(1500, role="system"), Seg(300, ttl="5m")])
    first = run(turn1, tp1, ANTHROPIC, common=0)
    assert first.write_positions == ((1800, "5m"),)
    turn2, tp2 = build([Seg(1500, role="system"), Seg(300), Seg(200, role="assistant"), Seg(100, ttl="5m")])
    second = run(turn2, tp2, ANTHROPIC, common=1800, marks=marks_at([1800]))
    assert (second.cached_tokens, second.cache_write_tokens, second.uncached_tokens) == (1800, 300, 0)
    assert second.read_position == 1800 and second.write_positions == ((2100, "5m"),)
    assert second.limits == ()


def test_a_read_refreshes_every_breakpoint_it_passes() -> None:
    # System marked at 1,500, the last message at 2,000; a repeat reads the end and so uses the
    # system entry again: both are refreshed (the system one would otherwise expire first).
    prompt, tp = build([Seg(1500, ttl="5m", role="system"), Seg(500, ttl="5m")])
    again = run(prompt, tp, ANTHROPIC, common=2000, marks=marks_at([1500, 2000]))
    assert again.read_position == 2000 and again.write_positions == ()
    assert again.refresh_positions == ((1500, "5m"), (2000, "5m"))
    # A breakpoint below the minimum has no entry to refresh.
    short, tps = build([Seg(500, ttl="5m", role="system"), Seg(1500, ttl="5m")])
    p = run(short, tps, ANTHROPIC, common=2000, marks=marks_at([2000]))
    assert p.refresh_positions == ((2000, "5m"),)


def test_docs_worked_example_entry_20_blocks_back_is_too_far() -> None:
    # Turn 2 wrote at block 15; turn 3 has 35 blocks and its breakpoint on block 35: blocks 35..16 are
    # checked and the entry at block 15 is one position outside the window.
    blocks = [Seg(100) for _ in range(34)] + [Seg(100, ttl="5m")]
    prompt, tp = build(blocks)
    p = run(prompt, tp, ANTHROPIC, common=1500, marks=marks_at([1500]))
    assert p.cached_tokens == 0 and p.cache_write_tokens == 3500
    assert p.limits == ("breakpoint-too-far",)
    assert p.reusable_tokens == 1500
    # With 34 blocks the window (34..15) reaches it.
    prompt34, tp34 = build([Seg(100) for _ in range(33)] + [Seg(100, ttl="5m")])
    hit = run(prompt34, tp34, ANTHROPIC, common=1500, marks=marks_at([1500]))
    assert hit.cached_tokens == 1500 and hit.cache_write_tokens == 1900 and hit.limits == ()


def test_a_read_of_all_it_can_reuse_asks_only_its_window() -> None:
    # A long conversation marked on its last message, which reads the previous turn's entry: the
    # index is asked about the breakpoint's window (20 boundaries), not the 1,000 boundaries of its
    # history. The whole history is asked about only when a miss needs its reason (too far or not).
    asked: list[int] = []
    written = marks_at([99_900])

    def recording(positions: Sequence[int]) -> Mapping[int, float]:
        asked.extend(positions)
        return written(positions)

    prompt, tp = build([Seg(100) for _ in range(999)] + [Seg(100, ttl="5m")])
    p = run(prompt, tp, ANTHROPIC, common=99_900, marks=recording)
    assert p.cached_tokens == 99_900 and p.limits == ()
    assert sorted(asked) == [100 * k for k in range(981, 1001)]
    # The entry 30 blocks back is out of the window: the boundaries past the window are asked too.
    asked.clear()
    written = marks_at([97_000])
    p = run(prompt, tp, ANTHROPIC, common=99_900, marks=recording)
    assert p.cached_tokens == 0 and p.limits == ("breakpoint-too-far",)
    assert 97_000 in asked and max(asked) == 100_000


def test_second_explicit_breakpoint_resumes_the_search() -> None:
    blocks = [Seg(100) for _ in range(35)]
    blocks[14] = Seg(100, ttl="5m")  # breakpoint on block 15 itself
    blocks[34] = Seg(100, ttl="5m")
    prompt, tp = build(blocks)
    p = run(prompt, tp, ANTHROPIC, common=1500, marks=marks_at([1500]))
    assert p.cached_tokens == 1500 and p.read_position == 1500
    assert p.write_positions == ((3500, "5m"),)


def test_below_minimum_neither_writes_nor_reads() -> None:
    prompt, tp = build([Seg(500, ttl="5m", role="system"), Seg(100)])
    cold = run(prompt, tp, ANTHROPIC, common=0)
    assert (cold.cached_tokens, cold.cache_write_tokens, cold.uncached_tokens) == (0, 0, 600)
    assert cold.write_positions == ()
    warm = run(prompt, tp, ANTHROPIC, common=600, marks=marks_at([500]))
    assert warm.cached_tokens == 0 and warm.cache_write_tokens == 0
    assert warm.limits == ("below-minimum",)


def test_no_breakpoint_leaves_everything_uncached() -> None:
    prompt, tp = build([Seg(2000, role="system"), Seg(1000)])
    p = run(prompt, tp, ANTHROPIC, common=3000)
    assert (p.cached_tokens, p.cache_write_tokens, p.uncached_tokens) == (0, 0, 3000)
    assert p.limits == ("no-breakpoint",) and p.reusable_tokens == 3000


def test_reusable_blocks_the_earlier_request_never_wrote_are_no_breakpoint() -> None:
    # The earlier request cached only the system prompt; its messages were reusable but never written.
    prompt, tp = build([Seg(2000, ttl="5m", role="system"), Seg(1000), Seg(500, ttl="5m")])
    p = run(prompt, tp, ANTHROPIC, common=3000, marks=marks_at([2000]))
    assert p.cached_tokens == 2000 and p.cache_write_tokens == 1500
    assert p.limits == ("no-breakpoint",)


def test_one_hour_and_five_minute_writes_split_by_position() -> None:
    prompt, tp = build([Seg(1200, ttl="1h", role=None), Seg(800, ttl="5m", role="system"), Seg(100)])
    cold = run(prompt, tp, ANTHROPIC, common=0)
    assert (cold.cache_write_tokens, cold.cache_write_1h_tokens, cold.cache_write_5m_tokens) == (
        2000,
        1200,
        800,
    )
    assert cold.write_positions == ((1200, "1h"), (2000, "5m")) and cold.uncached_tokens == 100
    warm = run(prompt, tp, ANTHROPIC, common=2100, marks=marks_at([1200]))
    assert (warm.cached_tokens, warm.cache_write_tokens, warm.cache_write_1h_tokens) == (1200, 800, 0)


def test_estimated_tokenizer_compares_minimum_in_provider_units() -> None:
    # 900 o200k tokens are ~1080 Claude tokens: above the 1024 minimum.
    prompt, tp = build([Seg(900, ttl="5m", role="system"), Seg(100)], ratio=1.2)
    p = run(prompt, tp, ANTHROPIC, common=0)
    assert tp.count == 1200
    assert (p.cache_write_tokens, p.uncached_tokens) == (1080, 120)
    check_totals(p, tp)


def test_automatic_caching_walks_back_over_thinking_and_empty_text() -> None:
    specs = [
        Seg(1500, role="system"),
        Seg(300),
        Seg(50, kind="thinking", role="assistant", message=2),
        Seg(0, kind="text", role="assistant", message=2, text=""),
    ]
    prompt, tp = build(specs, auto="5m", tail=5)
    assert breakpoint_positions(prompt, tp, ANTHROPIC) == [(1800, "5m")]
    p = run(prompt, tp, ANTHROPIC, common=0)
    assert (p.cache_write_tokens, p.uncached_tokens) == (1800, 55)
    # Next turn: the automatic breakpoint moved forward and reads the entry it left behind.
    nxt, tp2 = build([Seg(1500, role="system"), Seg(300), Seg(200, role="assistant"), Seg(100)], auto="5m")
    again = run(nxt, tp2, ANTHROPIC, common=1800, marks=marks_at([1800]))
    assert (again.cached_tokens, again.cache_write_tokens, again.uncached_tokens) == (1800, 300, 0)


def test_automatic_caching_on_an_explicit_breakpoint_is_a_no_op() -> None:
    prompt, tp = build([Seg(1500, ttl="1h", role="system"), Seg(300, ttl="5m")], auto="5m")
    assert breakpoint_positions(prompt, tp, ANTHROPIC) == [(1500, "1h"), (1800, "5m")]


# -- breakpoints (OpenAI GPT-5.6+) ---------------------------------------------------------------------


def _chat(turns: int) -> list[Seg]:
    specs = [Seg(1200, role="system", message=0)]
    for t in range(turns):
        specs.append(Seg(100, role="user", message=1 + 2 * t))
        if t < turns - 1:
            specs.append(Seg(100, role="assistant", message=2 + 2 * t))
    return specs


def test_gpt_5_6_implicit_breakpoint_on_latest_message() -> None:
    prompt, tp = build(_chat(1), tail=3, provider="openai-responses")
    assert breakpoint_positions(prompt, tp, OPENAI_56) == [(1300, "5m")]
    first = run(prompt, tp, OPENAI_56, common=0)
    assert (first.cache_write_tokens, first.uncached_tokens) == (1300, 3)
    nxt, tp2 = build(_chat(2), tail=3, provider="openai-responses")
    second = run(nxt, tp2, OPENAI_56, common=1300, marks=marks_at([1300]))
    assert (second.cached_tokens, second.cache_write_tokens, second.uncached_tokens) == (1300, 200, 3)
    assert second.write_positions == ((1500, "5m"),)


def test_gpt_5_6_reads_far_back_without_a_block_limit() -> None:
    prompt, tp = build(_chat(30), provider="openai-responses")
    p = run(prompt, tp, OPENAI_56, common=1300, marks=marks_at([1300]))
    assert p.cached_tokens == 1300 and p.limits == ()
    # The same layout with Anthropic's automatic caching: the entry 58 blocks back is out of reach.
    auto, tp_auto = build(_chat(30), auto="5m")
    anthropic = run(auto, tp_auto, ANTHROPIC, common=1300, marks=marks_at([1300]))
    assert anthropic.cached_tokens == 0 and anthropic.limits == ("breakpoint-too-far",)


def test_gpt_5_6_explicit_mode_disables_the_implicit_breakpoint() -> None:
    params = ((EXPLICIT_MODE_PARAM, "explicit"),)
    prompt, tp = build(_chat(2), params=params, provider="openai-responses")
    assert breakpoint_positions(prompt, tp, OPENAI_56) == []
    p = run(prompt, tp, OPENAI_56, common=1500, marks=marks_at([1300]))
    assert p.cached_tokens == 0 and p.cache_write_tokens == 0 and p.limits == ("no-breakpoint",)


def test_gpt_5_6_writes_at_most_four_breakpoints() -> None:
    specs = [Seg(1100, ttl="5m", role="system", message=0)] + [
        Seg(100, ttl="5m", role="user", message=i) for i in range(1, 6)
    ]
    prompt, tp = build(specs, provider="openai-responses")
    p = run(prompt, tp, OPENAI_56, common=0)
    assert [pos for pos, _ in p.write_positions] == [1300, 1400, 1500, 1600]
    assert p.cache_write_tokens == 1600


# -- invariants -------------------------------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn) -> tuple[Prompt, FakeTokens, CacheRules, FakeMatch, dict[int, float]]:
    mode = draw(st.sampled_from(["prefix", "blocks", "radix", "breakpoints"]))
    base = {"prefix": OPENAI, "blocks": VLLM, "radix": SGLANG, "breakpoints": ANTHROPIC}[mode]
    if mode == "breakpoints" and draw(st.booleans()):
        base = OPENAI_56
    rules = replace(
        base,
        min_tokens=draw(st.sampled_from([0, 1, 64, 300, 1024])),
        granularity=draw(st.sampled_from([1, 4, 16, 128])) if mode != "breakpoints" else 1,
        lookback=draw(st.integers(1, 25)),
        max_breakpoints=draw(st.integers(0, 5)),
    )
    specs = draw(
        st.lists(
            st.builds(
                Seg,
                length=st.integers(0, 300),
                ttl=st.sampled_from([None, None, "5m", "1h"]),
                kind=st.sampled_from(["text", "text", "thinking", "tool_result"]),
                role=st.sampled_from(["user", "assistant", "system"]),
            ),
            min_size=0,
            max_size=30,
        )
    )
    ratio = draw(st.sampled_from([1.0, 1.2, 1.5]))
    prompt, tp = build(
        specs, ratio=ratio, tail=draw(st.integers(0, 5)), auto=draw(st.sampled_from([None, "5m"]))
    )
    n = len(tp.tokens)
    common = draw(st.integers(0, n))
    held = draw(st.integers(common, n))
    ends = sorted({end for _, end in tp.spans if 0 < end <= common})
    written = draw(st.lists(st.sampled_from(ends), unique=True)) if ends else []
    return prompt, tp, rules, FakeMatch(common, held), dict.fromkeys(written, 5.0)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_invariants(case: tuple[Prompt, FakeTokens, CacheRules, FakeMatch, dict[int, float]]) -> None:
    prompt, tp, rules, match, written = case
    asked: list[int] = []

    def recording(positions: Sequence[int]) -> Mapping[int, float]:
        asked.extend(positions)
        return marks_at(written)(positions)

    p = predict(prompt, tp, rules, match, recording)
    # A request that reads all it can reuse asks the index about its windows only, never about
    # every boundary of its history (those are asked only for the reason of a miss).
    bps = breakpoint_positions(prompt, tp, rules)
    if rules.mode == "breakpoints" and p.cached_tokens == p.reusable_tokens:
        assert len(asked) <= max(1, rules.lookback) * max(1, len(bps))
    assert len(asked) == len(set(asked))  # no position asked twice
    check_totals(p, tp)
    assert p == predict(prompt, tp, rules, match, marks_at(written))  # pure
    assert list(p.limits) == [code for code in LIMIT_ORDER if code in p.limits]
    assert 0 <= p.read_position <= len(tp.tokens)
    if rules.mode in ("prefix", "blocks", "radix"):
        assert p.cached_tokens % rules.granularity == 0
        assert p.cache_write_tokens == 0 and p.write_positions == ()
        if p.cached_tokens:
            assert p.cached_tokens >= rules.min_tokens
        if rules.mode != "prefix":
            assert p.cached_tokens <= max(0, tp.count - 1)
        # More shared prefix never caches less.
        more = predict(prompt, tp, rules, replace(match, common_prefix_tokens=len(tp.tokens)), marks_at({}))
        assert more.cached_tokens >= p.cached_tokens
    else:
        positions = [pos for pos, _ in p.write_positions]
        assert positions == sorted(positions) and all(pos > p.read_position for pos in positions)
        # Every cacheable breakpoint is either written or refreshed, never both.
        refreshed = [pos for pos, _ in p.refresh_positions]
        assert all(pos <= p.read_position for pos in refreshed)
        assert not set(refreshed) & set(positions) and set(refreshed) <= {pos for pos, _ in bps}
        if p.cached_tokens:
            assert p.read_position in written
        # Replaying the same request right after it: everything it wrote is read back, nothing is rewritten.
        after = dict(written) | dict.fromkeys(positions, 0.0)
        again = predict(
            prompt, tp, rules, replace(match, common_prefix_tokens=len(tp.tokens)), marks_at(after)
        )
        check_totals(again, tp)
        assert again.cache_write_tokens == 0
        assert again.cached_tokens >= p.cached_tokens + p.cache_write_tokens


@pytest.mark.parametrize("rules", [OPENAI, VLLM, SGLANG, ANTHROPIC, OPENAI_56])
def test_empty_prompt(rules: CacheRules) -> None:
    prompt, tp = build([])
    p = run(prompt, tp, rules, common=0)
    assert (p.cached_tokens, p.cache_write_tokens, p.uncached_tokens) == (0, 0, 0)
