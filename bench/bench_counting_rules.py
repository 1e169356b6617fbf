"""Each Chat Completions counting rule since stop 34 on the records it is about, with it and without it.

For every rule: the OpenAI Chat Completions records whose body has the shape the rule is about (the
recorded data and the cassette sources, bench_counting.py's loaders and halves), and how many are
counted exactly with the rule and with it turned off (its framing flags or rendering setting set
back, every other rule kept), by part: training, held-out dev, held-out final. The final halves
are aggregates only, as everywhere. Third-party data, read in place; skipped (exit 0) where absent.

    .venv/bin/python bench/bench_counting_rules.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import bench_counting as bc
from cachewarden.proxy.engine import adapters, framing, rendering
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.engine.tokenizers import get_tokenizer

Body = Mapping[str, Any]


def _messages(body: Body) -> list[Mapping[str, Any]]:
    return [m for m in body.get("messages") or [] if isinstance(m, Mapping)]


def _parallel(body: Body) -> bool:
    return any(m.get("role") == "assistant" and len(m.get("tool_calls") or []) >= 2 for m in _messages(body))


def _gpt5(body: Body) -> bool:
    return str(body.get("model", "")).startswith("gpt-5")


def _strict(body: Body) -> bool:
    fmt = body.get("response_format")
    spec = fmt.get("json_schema") if isinstance(fmt, Mapping) else None
    return isinstance(spec, Mapping) and spec.get("strict") is True


def _named(body: Body) -> bool:
    return any("name" in m and m.get("role") not in ("tool", "function") for m in _messages(body))


def _text_then_call(body: Body) -> bool:
    return any(
        m.get("role") == "assistant" and m.get("content") and m.get("tool_calls") for m in _messages(body)
    )


def _splitting_result(body: Body) -> bool:
    """A result of a function whose name the "." before it does not merge with (".cal|culator")."""
    table = load_model_table()
    enc = get_tokenizer(table.lookup(str(body.get("model", "")), "openai-chat").tokenizer)
    names = {
        c.get("id"): (c.get("function") or {}).get("name")
        for m in _messages(body)
        for c in m.get("tool_calls") or []
        if isinstance(c, Mapping)
    }
    for m in _messages(body):
        name = names.get(m.get("tool_call_id")) if m.get("role") == "tool" else None
        if isinstance(name, str) and len(enc.encode("." + name)) > len(enc.encode(name)):
            return True
    return False


def _bare_default(body: Body) -> bool:
    """A tool parameter with a default and neither title nor description (stop 35)."""
    for tool in body.get("tools") or body.get("functions") or []:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        params = fn.get("parameters") if isinstance(fn, Mapping) else None
        props = params.get("properties") if isinstance(params, Mapping) else None
        for prop in props.values() if isinstance(props, Mapping) else ():
            if (
                isinstance(prop, Mapping)
                and "default" in prop
                and not (prop.get("title") or prop.get("description"))
            ):
                return True
    return False


# (rule, the shape it is about, its framing flags turned off; "rendering": module settings instead)
RULES: tuple[tuple[str, Callable[[Body], bool], dict[str, Any]], ...] = (
    ("parallel calls, 4o / 4.1", lambda b: _parallel(b) and not _gpt5(b), {"parallel_wrapper": False}),
    ("parallel calls, gpt-5", lambda b: _parallel(b) and _gpt5(b), {"parallel_wrapper": False}),
    ("strict json_schema", _strict, {"strict_format_turn": None, "strict_format_section": 0}),
    ("a name on a message", _named, {"name_prefix": "", "per_name": 1}),
    ("a call after the turn's text", _text_then_call, {"call_after_text_apart": False}),
    ("a result of a splitting name", _splitting_result, {"result_name_apart": False}),
    (
        "a bare parameter default",
        _bare_default,
        {"rendering": {"BARE_DEFAULTS": frozenset({"chatml", "harmony"})}},
    ),
)


@contextmanager
def _without(flags: dict[str, Any]) -> Iterator[None]:
    """Chat Completions' framings with ``flags`` set, for the block."""
    flags = dict(flags)
    settings: dict[str, Any] = flags.pop("rendering", {})
    saved = dict(framing.FRAMING)
    kept = {name: getattr(rendering, name) for name in settings}
    try:
        for key, value in saved.items():
            if key[0] == "openai-chat":
                framing.FRAMING[key] = replace(value, **flags)
        for name, value in settings.items():
            setattr(rendering, name, value)
        yield
    finally:
        framing.FRAMING.clear()
        framing.FRAMING.update(saved)
        for name, value in kept.items():
            setattr(rendering, name, value)


def _exact(records: list[tuple[dict[str, Any], Body]]) -> list[bool]:
    counter = PromptCounter(load_model_table())  # a memo of its own: the framings differ
    out = []
    for rec, body in records:
        try:
            prompt = adapters.parse_request(body, provider="openai-chat", model=bc.fallback_model(rec))
            out.append(counter.tokenize(prompt).count == rec["total_input_tokens"])
        except CachewardenError:
            out.append(False)
    return out


def main(argv: list[str]) -> int:
    if not bc.DEFAULT.exists():
        print(f"bench_counting_rules: skipped, no recorded data at {bc.DEFAULT}")
        return 0
    roots = [root for root in bc.CASSETTE_SOURCES if root.exists()]
    pool = list(bc.records(bc.DEFAULT)) + list(bc.pooled_cassettes(roots))
    chat = []
    for rec in pool:
        body = bc.request_of(rec) if rec["provider"] == "openai-chat" else None
        if body is not None and isinstance(rec.get("total_input_tokens"), int):
            chat.append((rec, body))
    print(f"records: {bc.DEFAULT} + {' + '.join(map(str, roots))} (Chat Completions: {len(chat)})")
    print(
        f"  {'rule (records of its shape)':<32} "
        + "   ".join(f"{p:^20}" for p in ("training", "dev", "final"))
    )
    print(f"  {'':<32} " + "   ".join(f"{'n':>4} {'with':>7} {'without':>7}" for _ in range(3)))
    for name, shape, flags in RULES:
        mine = [(rec, body) for rec, body in chat if shape(body)]
        with_rule = _exact(mine)
        with _without(flags):
            without = _exact(mine)
        cells: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for (rec, _), a, b in zip(mine, with_rule, without, strict=True):
            cell = cells[bc.part(rec)]
            cell[0] += 1
            cell[1] += a
            cell[2] += b
        row = "   ".join(
            f"{c[0]:>4} {c[1]:>7} {c[2]:>7}" for c in (cells[p] for p in ("training", "dev", "final"))
        )
        print(f"  {name:<32} {row}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
