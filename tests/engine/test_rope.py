"""``TokenRope``: the token stream a conversation's next request shares with its previous one.

It must behave as the tuple it replaces (every read the indexes and explainers make), and grow by
what is new: shared chunks by identity, few chunks, few tokens copied over a long conversation.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle

import pytest
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.index.rope import TokenRope, grown, is_frozen
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.reading import ConversationReader
from hypothesis import given, settings
from hypothesis import strategies as st

tokens = st.lists(st.integers(-5, 50), max_size=40)


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[TokenRope, tuple[int, ...]]]:
    """Ropes grown from each other at random cuts, each with the tuple it must equal."""
    out: list[tuple[TokenRope, tuple[int, ...]]] = []
    rope: TokenRope | None = None
    flat: tuple[int, ...] = ()
    for _ in range(draw(st.integers(1, 12))):
        keep = draw(st.integers(0, len(flat)))
        content, after = draw(tokens), draw(st.lists(st.integers(0, 3), max_size=3))
        rope = grown(rope, keep, content, after)
        flat = (*flat[:keep], *content, *after)
        out.append((rope, flat))
    return out


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_a_rope_reads_as_its_tuple(
    history: list[tuple[TokenRope, tuple[int, ...]]], data: st.DataObject
) -> None:
    for rope, flat in history:
        assert is_frozen(rope)
        assert len(rope) == len(flat) and tuple(rope) == flat and list(rope) == list(flat)
        assert rope == flat and flat == rope and rope == list(flat)
        assert not rope != flat  # noqa: SIM202 (the operator itself is what is tested)
        assert hash(rope) == hash(flat)
        assert pickle.loads(pickle.dumps(rope)) == flat
        n = len(flat)
        for _ in range(10):
            a, b = data.draw(st.integers(-n - 2, n + 2)), data.draw(st.integers(-n - 2, n + 2))
            step = data.draw(st.sampled_from([None, 1, 2, -1]))
            got = rope[a:b:step]
            assert got == flat[a:b:step] and type(got) is tuple
        for i in range(-n, n):
            assert rope[i] == flat[i]
        for bad in (n, -n - 1):
            with pytest.raises(IndexError):
                rope[bad]
        assert all((v in rope) == (v in flat) for v in range(-6, 52))
        assert (rope == (*flat, 0)) is False


def test_a_rope_grows_by_what_is_new() -> None:
    # A conversation of 2,000 turns of 30 tokens, each request cut before the previous one's 3
    # tokens of reply priming: the earlier chunks are shared by identity, the chunks stay few, and
    # over the whole conversation each token is copied O(log n) times, not once per request.
    rope: TokenRope | None = None
    copied = 0
    for turn in range(2_000):
        before = rope
        keep = len(rope) - 3 if rope is not None else 0
        rope = grown(rope, keep, list(range(turn * 30, turn * 30 + 30)), [-1, -2, -3])
        shared = {id(c) for c in before.chunks} if before is not None else set()
        copied += sum(len(c) for c in rope.chunks if id(c) not in shared)
        assert rope.chunks[-1] == (-1, -2, -3)
        assert len(rope.chunks) <= 2 * math.log2(len(rope)) + 2
        sizes = [len(c) for c in rope.chunks[:-1]]
        assert all(a >= 2 * b for a, b in itertools.pairwise(sizes))
    total = len(rope)
    assert copied <= 2 * total * math.log2(total), (copied, total)
    assert tuple(rope[:-3]) == tuple(range(60_000))


def test_the_counter_s_stream_shares_the_previous_one() -> None:
    # Through the reader and the counter, as the proxy reads a conversation: each request's stream is
    # a rope made mostly of the previous request's own chunks (a merge now and then copies more).
    reader, counter = ConversationReader(), PromptCounter(load_model_table())
    messages = [{"role": "system", "content": "You answer briefly. " * 50}]
    previous: TokenRope | None = None
    held = None  # the previous prompt, alive as the engine's history keeps it (a basis is a weak reference)
    copied = total = 0
    for turn in range(200):
        messages = [*messages, {"role": "user", "content": f"Question {turn}: why is the sky blue?"}]
        body = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
        prompt = reader.parse(reader.load(body, tenant="t"), "openai-chat", tenant="t")
        stream = counter.tokenize(prompt).tokens
        assert isinstance(stream, TokenRope)
        if previous is not None:
            shared = {id(c) for c in previous.chunks}
            copied += sum(len(c) for c in stream.chunks if id(c) not in shared)
            total += len(stream)
            assert len(stream.chunks) <= 2 * math.log2(len(stream)) + 2
        previous, held = stream, prompt
        messages = [*messages, {"role": "assistant", "content": f"Because of scattering, turn {turn}."}]
    assert held is not None
    # A tuple per request would have copied every token of every stream: ~25x more here.
    assert copied * 10 < total, (copied, total)
