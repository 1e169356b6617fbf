"""Tokenization speed: PromptCounter against raw tiktoken on the same text, cold and on the memo-hit path.

    .venv/bin/python bench/bench_tokenize.py

1. An unseen ~400 KB chat request: PromptCounter.tokenize (framing, memo bookkeeping) vs
   tiktoken encode_ordinary over the same message texts, in the same run.
2. A ~40 KB agent turn that repeats the previous request and adds one message: tokenize with the
   memo warm (the proxy's common case) vs cold (a fresh counter).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

import tiktoken
from cachewarden.proxy.engine.adapters import parse_request
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.prompt import Prompt
from cachewarden.proxy.engine.tokenizers import get_tokenizer, tiktoken_cache_dir

# Mixed vocabulary (words, non-ASCII, dates, hex, JSON) so the text is not one tokenizer fast path.
WORDS = (
    "cache prefix token request model tool schema deploy region invoice error retry latency budget agent "
    'the a of to and in is for on with as by at from Ünïcödé 東京 2026-03-14 0x1f3a -> :: {"k": [1, 2]}'
)
VOCAB = WORDS.split(" ")


def text(rng: random.Random, size: int) -> str:
    parts: list[str] = []
    n = 0
    while n < size:
        word = rng.choice(VOCAB)
        parts.append(word)
        n += len(word) + 1
    return " ".join(parts)


def body(rng: random.Random, n_messages: int, size: int) -> dict[str, Any]:
    messages = [{"role": "system", "content": text(rng, size)}]
    for i in range(n_messages):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text(rng, size)})
    return {"model": "gpt-4o", "messages": messages}


def best_of(runs: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> int:
    table = load_model_table()
    get_tokenizer("o200k_base")  # load outside the timings; it puts the rank file where tiktoken looks
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(tiktoken_cache_dir()))
    enc = tiktoken.get_encoding("o200k_base")

    big = parse_request(body(random.Random(1), 100, 4000))
    texts = [s.text for s in big.segments]
    size_kb = sum(len(t.encode()) for t in texts) / 1024
    # A fresh counter per run: every segment is unseen.
    t_ours = best_of(3, lambda: PromptCounter(table).tokenize(big))
    t_raw = best_of(3, lambda: [enc.encode_ordinary(t) for t in texts])
    n_tokens = len(PromptCounter(table).tokenize(big).tokens)
    print(f"unseen request: {size_kb:.0f} KB, {n_tokens} tokens")
    print(f"  PromptCounter   {n_tokens / t_ours / 1e6:6.2f} M tokens/s  ({t_ours * 1000:7.1f} ms)")
    print(f"  tiktoken raw    {n_tokens / t_raw / 1e6:6.2f} M tokens/s  ({t_raw * 1000:7.1f} ms)")
    print(f"  ratio (ours / raw time) {t_ours / t_raw:.2f}")

    rng = random.Random(2)
    previous_body = body(rng, 20, 1900)
    messages = list(previous_body["messages"])
    messages.append({"role": "user", "content": text(rng, 1900)})
    turn: Prompt = parse_request({**previous_body, "messages": messages})
    previous = parse_request(previous_body)
    turn_kb = sum(len(s.data) for s in turn.segments) / 1024

    def warm() -> float:
        counter = PromptCounter(table)
        counter.tokenize(previous)
        start = time.perf_counter()
        counter.tokenize(turn)
        return time.perf_counter() - start

    t_warm = min(warm() for _ in range(20))
    t_cold = best_of(20, lambda: PromptCounter(table).tokenize(turn))
    n_turn = len(PromptCounter(table).tokenize(turn).tokens)
    print(f"agent turn: {turn_kb:.0f} KB, {n_turn} tokens, all but the last message seen before")
    print(f"  memo hit        {n_turn / t_warm / 1e6:6.2f} M tokens/s  ({t_warm * 1000:7.2f} ms)")
    print(f"  cold            {n_turn / t_cold / 1e6:6.2f} M tokens/s  ({t_cold * 1000:7.2f} ms)")
    print(f"  speed-up (cold / memo-hit time) {t_cold / t_warm:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
