"""A Prompt's token stream with the provider's framing, memoised per segment; the count the provider reports.

The stream is what the prefix index matches on: per segment, framing tokens (message start / role /
separators, small negative pseudo-tokens) followed by the segment's content tokens. Content tokens are
the expensive part and are memoised by (tokenizer, rendering, segment digest) in a bounded LRU, so a
request that repeats most of an earlier one only tokenizes its new segments.

The module is long because one loop places every provider's framing (tools section, system, calls
and results, legacy functions) in a single stream, and resuming it from the previous stream of the
conversation has to know every place where that loop drops tokens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from .counting_memo import LatestStreams, SegmentMemo, Shape

# Re-exported: callers (emulator, optimize, tests) read framing through the counter module.
from .framing import FRAMING as FRAMING
from .framing import Framing as Framing
from .framing import framing_for as framing_for
from .framing import legacy_calls
from .index.query import derived
from .index.rope import TokenRope, grown, is_frozen
from .models import ModelTable
from .prompt import Prompt, Segment, digest_text
from .rendering import (
    PARALLEL_AUTHOR,
    PARALLEL_RECIPIENT,
    TOOLS_HEAD,
    TOOLS_TAIL,
    anthropic_output_schema,
    compact_json,
    function_of,
    parallel_call_piece,
    parallel_result_piece,
    param_object,
    render_additional_tools,
    render_function,
    render_response_format,
    strict_format_name,
    tool_correction,
)
from .tokenizers import Tokenizer, get_tokenizer

SYSTEM_ROLES = frozenset({"system", "developer"})

# Pseudo-tokens for framing. Negative so they never equal a real token id; images use values below
# _IMAGE_BASE so that a framing marker never equals an image token either.
START, SEP, END, PAD = -1, -2, -3, -4
_IMAGE_BASE = 1 << 20


@dataclass(frozen=True, slots=True)
class TokenizedPrompt:
    tokens: Sequence[int]  # the stream used for prefix matching (framing included)
    spans: tuple[tuple[int, int], ...]  # per Prompt.segments[i]: [start, end) in tokens
    tokenizer: str
    ratio: float  # provider tokens per stream token (1.0 when exact)
    count: int  # input tokens the provider would report for the whole request
    # Stream-unit tokens counted but not in ``tokens``: what request parameters add (Anthropic tool_choice,
    # thinking, output schema). Parameters salt the messages, never the tools / system prefix, and the
    # injected text is not positioned content, so it stays out of the stream the prefix index matches.
    hidden: int = 0
    # Head tokens of hidden provider content (Framing.preamble): counted, not toward the cache minimum.
    preamble: int = 0


def provider_count(stream_tokens: int, ratio: float) -> int:
    """Provider tokens for a stream length: exact when ratio is 1, else rounded to the nearest token."""
    return stream_tokens if ratio == 1.0 else round(stream_tokens * ratio)


def image_tokens(digest: str, n: int) -> list[int]:
    """``n`` pseudo-tokens for an image: equal images give equal tokens, different ones differ at once."""
    # Re-hash: digests are arbitrary strings, and a plain modulo would map some distinct ones together.
    base = int.from_bytes(hashlib.blake2b(digest.encode(), digest_size=6).digest(), "big")
    return [-(_IMAGE_BASE + (base + i) % (1 << 48)) for i in range(n)]


def _tools_forced(framing: Framing) -> int:
    return framing.tools_once if framing.tools_forced is None else framing.tools_forced


class PromptCounter:
    """Tokenizes Prompts with provider framing; memoises content tokens per segment."""

    def __init__(
        self, table: ModelTable, *, memo_entries: int = 50_000, memo_tokens: int = 20_000_000
    ) -> None:
        self.table = table
        self.memo = SegmentMemo(memo_entries, memo_tokens)
        self._resumable = LatestStreams()
        self._ratios: dict[str, float] = {}

    def set_ratio(self, model_family_or_model: str, ratio: float) -> None:
        """Override the provider-units ratio for a model or a model-name prefix (online calibration)."""
        if not ratio > 0:
            raise ValueError(f"ratio must be positive, got {ratio!r}")
        self._ratios[model_family_or_model.lower()] = float(ratio)

    def ratio_for(self, model: str, default: float) -> float:
        name = model.lower()
        keys = [k for k in self._ratios if name.startswith(k)]
        return self._ratios[max(keys, key=len)] if keys else default

    def _content(self, tok: Tokenizer, mode: str, seg: Segment, text: str) -> tuple[int, ...]:
        key = (tok.name, mode, seg.digest)
        hit = self.memo.get(key)
        if hit is None:
            hit = _interned(tok.encode(text))
            self.memo.put(key, hit)
        return hit

    def _role(self, tok: Tokenizer, role: str) -> tuple[int, ...]:
        return self._content_raw(tok, f"role\x00{role}", role)

    def _content_raw(self, tok: Tokenizer, key: str, text: str) -> tuple[int, ...]:
        full = (tok.name, "raw", key)
        hit = self.memo.get(full)
        if hit is None:
            hit = _interned(tok.encode(text))
            self.memo.put(full, hit)
        return hit

    def _segment_content(self, tok: Tokenizer, framing: Framing, seg: Segment) -> tuple[int, ...]:
        if seg.kind in ("image", "document") and seg.fixed_tokens and not seg.text:
            return tuple(image_tokens(seg.digest, seg.fixed_tokens))
        if seg.kind == "tool_use" and framing.typescript_tools:
            # A call is a message of its own addressed to the function: "assistant to=functions.NAME" in
            # its header, the arguments as its content (the adapter's text is "name\narguments").
            name, _, arguments = seg.text.partition("\n")
            head = self._recipient(tok, framing, name)
            if framing.compact_arguments:
                return head + self._content(tok, "call-compact", seg, compact_json(arguments))
            return head + self._content(tok, "call", seg, arguments)
        if seg.kind == "tool" and framing.typescript_tools:
            # The memo first: a rendering is stored only for a segment that has one, under its digest.
            # One memo entry per dialect: the same tool renders differently for gpt-4o and gpt-5.
            mode = "ts" if framing.tool_dialect == "chatml" else f"ts-{framing.tool_dialect}"
            legacy = _legacy_tool(seg)
            if legacy:  # the legacy list renders nested objects its own way (rendering._ts_props)
                mode += "-legacy"
            hit = self.memo.get((tok.name, mode, seg.digest))
            if hit is not None:
                return hit
            fn = function_of(seg.text)
            if fn is not None:
                typescript = render_function(fn, framing.tool_dialect, legacy=legacy)
                return self._content(tok, mode, seg, typescript + "\n\n")
        if seg.kind == "other" and framing.typescript_tools and seg.message_index is not None:
            # A Responses additional_tools item: its tools section, then what the provider adds to it.
            section = self.memo.get((tok.name, "at", seg.digest))
            if section is None and (rendered := render_additional_tools(seg.text)) is not None:
                section = self._content(tok, "at", seg, rendered)
            if section is not None:
                return section + (PAD,) * framing.additional_tools_extra
        if seg.kind == "schema" and framing.typescript_tools:
            hit = self.memo.get((tok.name, "rf", seg.digest))
            if hit is not None:
                return hit
            rendered = render_response_format(seg.text)
            if rendered is not None:
                return self._content(tok, "rf", seg, rendered)
        content = self._content(tok, "text", seg, seg.text)
        if seg.fixed_tokens:
            return content + tuple(image_tokens(seg.digest, seg.fixed_tokens))
        return content

    def _request_extras(self, tok: Tokenizer, framing: Framing, prompt: Prompt, *, has_tools: bool) -> int:
        """Tokens that come from request parameters rather than segments (Anthropic tool_choice, thinking,
        output schema), in stream units; see TokenizedPrompt.hidden."""
        if framing.typescript_tools:
            return 0
        extra = 0
        if has_tools:
            forced = param_object(prompt, "tool_choice").get("type") in ("any", "tool")
            extra += (_tools_forced(framing) if forced else framing.tools_once) - min(
                framing.tools_once, _tools_forced(framing)
            )
        if param_object(prompt, "thinking").get("type") in ("enabled", "adaptive"):
            extra += framing.thinking_once
        schema = anthropic_output_schema(prompt)
        if schema is not None:
            extra += framing.schema_once
            extra += len(self._content_raw(tok, f"output-schema\x00{digest_text(schema)}", schema))
        return extra

    def _recipient(self, tok: Tokenizer, framing: Framing, name: str) -> tuple[int, ...]:
        """The tokens that address a call to function ``name`` (" to=functions.NAME")."""
        text = framing.recipient_prefix + name
        return self._content_raw(tok, f"call-to\x00{text}", text)

    def _tool_correction(self, tok: Tokenizer, framing: Framing, seg: Segment) -> int:
        """What the provider counts for a tool beyond its rendered text (rendering.tool_correction)."""
        legacy = _legacy_tool(seg)
        key = (tok.name, f"tool-correction:{framing.tool_dialect}:{legacy}", seg.digest)
        hit = self.memo.get(key)
        if hit is None:
            fn = function_of(seg.text)
            hit = (0 if fn is None else tool_correction(fn, framing.tool_dialect, tok.name, legacy=legacy),)
            self.memo.put(key, hit)
        return hit[0]

    def _strict_answer(self, tok: Tokenizer, framing: Framing, seg: Segment) -> int:
        """What addressing an answer to the strict format ``seg`` costs (its name's tokens plus
        strict_format_turn), 0 for a format that is not strict (rendering.strict_format_name)."""
        if framing.strict_format_turn is None:
            return 0
        key = (tok.name, f"rf-strict:{framing.strict_format_turn}", seg.digest)
        hit = self.memo.get(key)
        if hit is None:
            name = strict_format_name(seg.text)
            hit = (0 if name is None else len(tok.encode(name)) + framing.strict_format_turn,)
            self.memo.put(key, hit)
        return hit[0]

    def _tool_text(self, seg: Segment) -> str:
        fn = function_of(seg.text)
        return seg.text if fn is None else render_function(fn, legacy=_legacy_tool(seg)) + "\n\n"

    def _join(self, tok: Tokenizer, left: Segment | None, right: Segment | None) -> int:
        """Tokens gained (< 0: lost) where two parts of the tools section meet, tokenized as one text.

        The parts are tokenized apart (memoised per tool), but the provider tokenizes the section whole,
        and o200k's punctuation pieces run on over newlines and "/": ";\n\n//" is one pre-token piece.
        """
        key = f"join\x00{left.digest if left else 'head'}\x00{right.digest if right else 'tail'}"
        return self._boundary(
            tok,
            "join",
            key,
            lambda: (TOOLS_HEAD if left is None else self._tool_text(left))[-32:],
            lambda: (TOOLS_TAIL if right is None else self._tool_text(right))[:32],
        )

    def _text_join(self, tok: Tokenizer, left: Segment, right: Segment) -> int:
        """Tokens gained (< 0: lost) where two text parts of one message meet, tokenized as one text.

        64 characters on either side hold any pre-token piece that can span the boundary.
        """
        key = f"pjoin\x00{left.digest}\x00{right.digest}"
        return self._boundary(tok, "pjoin", key, lambda: left.text[-64:], lambda: right.text[:64])

    def _boundary(
        self, tok: Tokenizer, kind: str, key: str, before: Callable[[], str], after: Callable[[], str]
    ) -> int:
        """Tokens gained (< 0: lost) when the text ending ``before()`` and the text starting
        ``after()`` are tokenized as one, memoised under ``(kind, key)`` (the texts made on a miss only)."""
        hit = self.memo.get((tok.name, kind, key))
        if hit is None:
            a, b = before(), after()
            hit = (len(tok.encode(a + b)) - len(tok.encode(a)) - len(tok.encode(b)),)
            self.memo.put((tok.name, kind, key), hit)
        return hit[0]

    @staticmethod
    def _host(segs: Sequence[Segment]) -> int | None:
        """Index of the last segment of the first system / developer message (or of top-level
        instructions): the message the OpenAI tools / schema section joins; None when there is none."""
        first = next((i for i, s in enumerate(segs) if s.kind not in ("tool", "schema")), None)
        if first is None:
            return None
        head = segs[first]
        if head.message_index is None:
            return first if head.role is None or head.role in SYSTEM_ROLES else None
        if head.role not in SYSTEM_ROLES:
            return None
        last = first
        while last + 1 < len(segs) and segs[last + 1].message_index == head.message_index:
            last += 1
        return last

    def _separator(self, tok: Tokenizer, text: str) -> int:
        """Tokens of the blank line that joins a section to a message ending in ``text``.

        Joined, the provider tokenizes it with the end of the message ("." + blank line is one o200k
        token), so it is counted on the message's tail (64 characters hold any final pre-token piece).
        """
        tail = text[-64:]
        key = f"sep\x00{digest_text(tail)}"
        return len(self._content_raw(tok, key, tail + "\n\n")) - len(self._content_raw(tok, "t" + key, tail))

    def _parallel_text(self, tok: Tokenizer, segs: Sequence[Segment], i: int, par: tuple[int, int]) -> str:
        """Segment ``i``'s part of its parallel run's JSON (rendering.parallel_call_piece)."""
        seg, (k, n) = segs[i], par
        if seg.kind == "tool_use":
            name, _, arguments = seg.text.partition("\n")
            return parallel_call_piece(name, arguments, first=k == 0, last=k == n - 1)
        ascii_strings = tok.name == "cl100k_base"
        return parallel_result_piece(seg.text, first=k == 0, last=k == n - 1, ascii_strings=ascii_strings)

    def _parallel_content(
        self, tok: Tokenizer, segs: Sequence[Segment], i: int, par: tuple[int, int]
    ) -> tuple[int, ...]:
        """Tokens of segment ``i`` in a parallel run: the wrapper's recipient before the first call, then
        its part of the run's JSON (memoised per segment and place in the run)."""
        seg, (k, n) = segs[i], par
        mode = f"par:{k == 0}:{k == n - 1}"
        hit = self.memo.get((tok.name, mode, seg.digest))
        if hit is None:
            hit = self._content(tok, mode, seg, self._parallel_text(tok, segs, i, par))
        if seg.kind == "tool_use" and k == 0:
            head = self._content_raw(tok, f"call-to\x00{PARALLEL_RECIPIENT}", PARALLEL_RECIPIENT)
            return head + hit
        return hit

    def _parallel_join(self, tok: Tokenizer, segs: Sequence[Segment], i: int, par: tuple[int, int]) -> int:
        """Tokens gained (< 0: lost) where segment ``i``'s part of the run's JSON meets the part before."""
        k, n = par
        left, right = segs[i - 1], segs[i]
        key = f"{left.digest}\x00{right.digest}\x00{k == 1}\x00{k == n - 1}"
        return self._boundary(
            tok,
            "par-join",
            key,
            lambda: self._parallel_text(tok, segs, i - 1, (k - 1, n))[-64:],
            lambda: self._parallel_text(tok, segs, i, par)[:64],
        )

    def _own_message(self, tok: Tokenizer, framing: Framing) -> int:
        """Framing of a tools / schema section that opens a system message of its own."""
        if framing.tools_alone is not None:
            return framing.tools_alone
        return 3 + len(self._role(tok, "system"))

    def tokenize(self, prompt: Prompt) -> TokenizedPrompt:
        info = self.table.lookup(prompt.model, prompt.provider)
        tok = get_tokenizer(info.tokenizer)
        framing = framing_for(prompt.provider, prompt.model)
        ratio = self.ratio_for(prompt.model, info.ratio)
        segs = prompt.segments
        resumed = self._resumable.resume(prompt)
        if resumed is not None:
            shape, start, tokens, spans = resumed.shape, resumed.start, resumed.tokens, resumed.spans
        else:
            shape, start, tokens, spans = self._shape(segs, framing), 0, [], []
        # The shortest the stream gets below its resumed head (a framing correction drops tokens):
        # while it stays at the head's end, the new stream starts with the earlier one's head.
        low = len(tokens)
        host, first_tool, last_tool = shape.host, shape.first_tool, shape.last_tool
        legacy = framing.typescript_tools and prompt.provider == "openai-chat"
        # The tool-use system prompt depends on tool_choice, but tool_choice does not invalidate the tools
        # cache: the tools section carries the smaller of the two, _request_extras the difference.
        tools_once = min(framing.tools_once, _tools_forced(framing))
        # A strict json_schema format: what each answer addressed to it costs (0: none is).
        schema = shape.last_schema
        answers = self._strict_answer(tok, framing, segs[schema]) if schema >= 0 else 0
        seen_system = shape.first_system is not None and shape.first_system < start
        first_system = shape.first_system if seen_system else None
        for i in range(start, len(segs)):
            seg = segs[i]
            start = len(tokens)
            group = seg.message_index
            opens = group is None or i == 0 or segs[i - 1].message_index != group
            closes = group is None or i == len(segs) - 1 or segs[i + 1].message_index != group
            if seg.kind == "tool":
                if i == first_tool:
                    # Joined to a host message, the separator is counted at the end of that message
                    # (below): there, an edit of the message's end moves nothing before it.
                    alone = framing.tools_in_system and host is None
                    lead = tools_once + (self._own_message(tok, framing) if alone else 0)
                    tokens.extend([PAD] * max(0, lead))
                    if framing.typescript_tools:
                        tokens.extend(self._content_raw(tok, "tools-head", TOOLS_HEAD))
                    low = _shift(tokens, min(0, lead), low)
                tokens.extend([PAD] * framing.per_tool)
                tokens.extend(self._segment_content(tok, framing, seg))
                if framing.typescript_tools:
                    low = _shift(tokens, self._tool_correction(tok, framing, seg), low)
                    low = _shift(tokens, self._join(tok, segs[i - 1] if i > first_tool else None, seg), low)
                if i == last_tool and framing.typescript_tools:
                    tokens.extend(self._content_raw(tok, "tools-tail", TOOLS_TAIL))
                    low = _shift(tokens, self._join(tok, seg, None), low)
            elif seg.kind == "schema":
                lead = framing.schema_once
                if framing.schema_alone is not None and first_tool < 0:
                    # Without tools this section is the one joined to the system message (or opening one).
                    lead = framing.schema_alone + (self._own_message(tok, framing) if host is None else 0)
                if self._strict_answer(tok, framing, seg):
                    lead += framing.strict_format_section
                tokens.extend([PAD] * max(0, lead))
                tokens.extend(self._segment_content(tok, framing, seg))
                low = _shift(tokens, min(0, lead), low)
            elif group is None:
                # Top-level system text (Anthropic system, Responses instructions): one message of its own
                # for OpenAI; for Anthropic a one-off overhead for the whole system prompt.
                if framing.typescript_tools:
                    tokens.extend((START, *self._role(tok, seg.role or "system"), SEP))
                elif not seen_system:
                    tokens.extend([PAD] * framing.system_once)
                if first_system is None:
                    first_system = i
                seen_system = True
                tokens.extend(self._segment_content(tok, framing, seg))
                if i == host:
                    tokens.extend([PAD] * self._separator(tok, seg.text))
                if framing.typescript_tools:
                    tokens.append(END)
            else:
                # Chat Completions' parallel calls and their results: (position, length) in the run that
                # is rendered as one wrapper call / one result message (rendering.parallel_call_piece).
                par = _parallel_run(segs, i) if framing.parallel_wrapper else None
                further = par is not None and par[0] > 0
                after_call = i > 0 and seg.kind == "tool_use" == segs[i - 1].kind
                after_text = not opens and seg.kind == "tool_use" and _said_before(segs, i)
                own_message = (not opens and after_call and par is None) or (
                    after_text and framing.call_after_text_apart
                )
                if own_message and framing.typescript_tools:
                    # Each call of an assistant turn is a message of its own: one after another call, and
                    # one after the turn's text (framing.call_after_text_apart).
                    tokens.extend(
                        (END, START, *self._role(tok, "assistant"), *[SEP] * (framing.per_message - 2))
                    )
                # The legacy format (function_call, role "function") frames calls and results its own way.
                own = legacy_calls(framing) if legacy and _legacy_segment(seg) else framing
                # Responses (4o): a call right after another continues its message (calls_share_message).
                merged = framing.calls_share_message and opens and after_call
                if opens and not merged and not further:
                    role = seg.role or ("tool" if seg.kind == "tool_result" else "assistant")
                    header: tuple[str, ...] = (role,)  # the header's texts, each tokenized on its own
                    if seg.kind == "tool_result" and par is not None:
                        role = PARALLEL_AUTHOR  # the merged results answer the wrapper
                        header = (role,)
                    elif seg.kind == "tool_result" and seg.name and framing.typescript_tools:
                        role = own.result_prefix + seg.name  # the result's author is the function
                        # "functions" and the name apart, the "." per_tool_result's token (framing).
                        apart = own.result_name_apart and own.result_prefix
                        header = (own.result_prefix.rstrip("."), seg.name) if apart else (role,)
                    tokens.append(START)
                    if framing.role_tokens:
                        for text in header:
                            tokens.extend(self._role(tok, text))
                    tokens.extend([SEP] * (framing.per_message - 2))
                    if role == "assistant":
                        tokens.extend([PAD] * framing.assistant_extra)
                        if answers and _answer_in_text(segs, i):
                            tokens.extend([PAD] * answers)  # addressed to the strict format
                        if i > 0 and segs[i - 1].kind == "tool_result":
                            tokens.extend([PAD] * framing.resumes_after_result)
                after = -1 if merged else 0  # a framing correction below zero, applied after the content
                if merged and (i < 2 or segs[i - 2].kind != "tool_use") and segs[i - 1].item_id is None:
                    # A run of parallel calls sent without item ids costs what it costs with them: the
                    # opening call's call_without_id is taken back by the call that joins it.
                    tokens.extend([PAD] * max(0, -own.call_without_id))
                named = seg.kind == "other" and seg.path.endswith(".name")  # the author's name
                if seg.kind == "tool_use" and not merged and not further:
                    # The adapter's text is "name\narguments": name and arguments are in the content.
                    call = own.per_tool_call + (own.call_without_id if seg.item_id is None else 0)
                    tokens.extend([PAD] * max(0, call))
                    after = min(0, call)
                elif named:  # below zero (gpt-3.5-turbo-0301: the name takes the role's place)
                    tokens.extend([PAD] * max(0, framing.per_name))
                    after = min(0, framing.per_name)
                elif seg.kind == "tool_result" and not further:
                    extra = framing.parallel_results_extra if par is not None else 0
                    tokens.extend([PAD] * (own.per_tool_result + extra))
                if named and framing.name_prefix:
                    tokens.extend(self._content(tok, "name", seg, framing.name_prefix + seg.text))
                elif par is not None:
                    tokens.extend(self._parallel_content(tok, segs, i, par))
                    if further:  # one JSON text with the part before it
                        low = _shift(tokens, self._parallel_join(tok, segs, i, par), low)
                else:
                    tokens.extend(self._segment_content(tok, own, seg))
                low = _shift(tokens, after, low)
                if framing.parts_joined and not opens and _text_part(seg) and _text_part(segs[i - 1]):
                    # One text with the part before it: the tokens gained or lost across the boundary.
                    low = _shift(tokens, self._text_join(tok, segs[i - 1], seg), low)
                if i == host:
                    tokens.extend([PAD] * self._separator(tok, seg.text))
                open_run = par is not None and seg.kind == "tool_result" and par[0] < par[1] - 1
                if closes and framing.per_message >= 2 and not open_run:
                    tokens.append(END)
            spans.append((start, len(tokens)))
        # Reply priming belongs to no segment: it follows the last span, so a breakpoint on the last
        # block of this request ends where the same block ends inside a longer, later request.
        content_end = len(tokens)
        resumes = bool(segs) and segs[-1].kind == "tool_result"
        tokens.extend(_reply(framing.reply + (framing.resumes_after_result if resumes else 0) + answers))
        if prompt.forced_function is not None and framing.forced_call is not None:
            primed = legacy_calls(framing) if shape.legacy_functions else framing
            tokens.extend(self._recipient(tok, primed, prompt.forced_function))
            tokens.extend([PAD] * framing.forced_call)
        if prompt.calls_declined and framing.forced_call is not None:  # harmony: no change recorded
            tokens.append(PAD)
        hidden = self._request_extras(tok, framing, prompt, has_tools=first_tool >= 0)
        # The stream shares the earlier one's chunks up to where this one parts from it, so only
        # what is new is copied (index/rope.py); the reply priming is a chunk of its own, where the
        # next prompt of the conversation resumes.
        if resumed is not None and is_frozen(resumed.earlier):
            keep = min(low, resumed.end)
            stream = grown(resumed.earlier, keep, tokens[keep:content_end], tokens[content_end:])
            if low >= resumed.end:
                # Shared by construction: the index compares only what follows (query.derived).
                derived(stream, resumed.earlier, resumed.end)
        else:  # one copy of a prompt read whole (the next one cuts it once)
            stream = TokenRope((tuple(tokens),))
        result = TokenizedPrompt(
            # Immutable: the prefix index shares its work on the stream between calls.
            tokens=stream,
            spans=tuple(spans),
            tokenizer=tok.name,
            ratio=ratio,
            count=provider_count(len(tokens) + hidden, ratio),
            hidden=hidden,
            preamble=framing.preamble if first_tool >= 0 else 0,
        )
        # The lists go to the next prompt of the conversation, which extends them in place.
        self._resumable.put(prompt, result, replace(shape, first_system=first_system), (tokens, spans))
        return result

    def _shape(self, segs: Sequence[Segment], framing: Framing) -> Shape:
        """Where the tools, the schema and the host message are: what the whole prompt decides."""
        tool_idx = [i for i, s in enumerate(segs) if s.kind == "tool"]
        schema_idx = [i for i, s in enumerate(segs) if s.kind == "schema"]
        first_tool, last_tool = (tool_idx[0], tool_idx[-1]) if tool_idx else (-1, -1)
        # The message the OpenAI tools / schema section joins (its separator is counted at its end).
        joined = framing.tools_in_system and (first_tool >= 0 or bool(schema_idx))
        host = self._host(segs) if joined else None
        if joined and host is not None and first_tool < 0 and framing.schema_alone is None:
            host = None  # a schema alone never joins in this format (Responses)
        return Shape(
            first_tool=first_tool,
            last_tool=last_tool,
            last_schema=schema_idx[-1] if schema_idx else -1,
            host=host,
            legacy_functions=any(segs[i].path.startswith("functions[") for i in tool_idx),
            first_system=None,
        )


def _text_part(seg: Segment) -> bool:
    """A text part of a message (not a call, result, image or file): what Responses concatenates."""
    return seg.kind in ("text", "system", "message") and not seg.fixed_tokens


def _legacy_tool(seg: Segment) -> bool:
    """A function of the legacy ``functions`` list (not of ``tools``)."""
    return seg.kind == "tool" and seg.path.startswith("functions[")


def _legacy_segment(seg: Segment) -> bool:
    """A call or result in the legacy function-calling format (``function_call``, role "function")."""
    if seg.kind == "tool_use":
        return seg.path.endswith(".function_call")
    return seg.kind == "tool_result" and seg.role == "function"


def _said(seg: Segment) -> bool:
    """Whether ``seg`` is content an assistant said: text that is not empty, or an image or file part
    (not its name, refusal, audio or a call)."""
    if seg.path.endswith((".name", ".refusal")):
        return False
    if seg.kind in ("message", "text"):
        return bool(seg.text)
    return seg.kind in ("image", "document")


def _said_before(segs: Sequence[Segment], i: int) -> bool:
    """Whether the message of call ``i`` says something before its first call."""
    m = segs[i].message_index
    for j in range(i - 1, -1, -1):
        seg = segs[j]
        if seg.message_index != m or seg.kind == "tool_use":
            return False
        if _said(seg):
            return True
    return False


def _answer_in_text(segs: Sequence[Segment], i: int) -> bool:
    """Whether the assistant message that opens at segment ``i`` answers in text (content, and no tool
    call): what a strict format addresses (framing.strict_format_turn)."""
    m, found = segs[i].message_index, False
    for j in range(i, len(segs)):
        seg = segs[j]
        if seg.message_index != m:
            break
        if seg.kind == "tool_use":
            return False
        found = found or _said(seg)
    return found


def _lone_result(segs: Sequence[Segment], j: int) -> bool:
    """Whether segment ``j`` is a whole tool message: one text result, alone in its message."""
    seg = segs[j]
    if seg.kind != "tool_result" or seg.role != "tool" or seg.fixed_tokens or seg.message_index is None:
        return False
    m = seg.message_index
    return (j == 0 or segs[j - 1].message_index != m) and (
        j + 1 == len(segs) or segs[j + 1].message_index != m
    )


def _call_run(segs: Sequence[Segment], i: int) -> tuple[int, int]:
    """First and last index of the calls of the assistant message that call ``i`` is in."""
    m, a, b = segs[i].message_index, i, i

    def call(j: int) -> bool:  # a tools-format call of the same message (a legacy function_call is not)
        return segs[j].kind == "tool_use" and segs[j].message_index == m and not _legacy_segment(segs[j])

    while a > 0 and call(a - 1):
        a -= 1
    while b + 1 < len(segs) and call(b + 1):
        b += 1
    return a, b


def _parallel_run(segs: Sequence[Segment], i: int) -> tuple[int, int] | None:
    """(position, length) of segment ``i`` in Chat Completions' parallel calls (two or more calls of
    one assistant message) or in the run of whole tool messages right after them (their results);
    None for any other segment."""
    seg = segs[i]
    if seg.kind == "tool_use":
        if _legacy_segment(seg):
            return None
        a, b = _call_run(segs, i)
        return (i - a, b - a + 1) if b > a else None
    if not _lone_result(segs, i):
        return None
    a = i
    while a > 0 and _lone_result(segs, a - 1):
        a -= 1
    if a == 0 or segs[a - 1].kind != "tool_use" or _legacy_segment(segs[a - 1]):
        return None
    first, last = _call_run(segs, a - 1)
    if last == first:
        return None
    b = i
    while b + 1 < len(segs) and _lone_result(segs, b + 1):
        b += 1
    if b + 1 < len(segs) and segs[b + 1].kind == "tool_result" and segs[b + 1].role == "tool":
        return None  # a result in parts follows: the run is not one message of texts, nothing merges
    return i - a, b - a + 1


def _shift(tokens: list[int], n: int, low: int) -> int:
    """Apply a framing correction of ``n`` tokens to the stream: PADs when positive, else drop the last
    ``-n`` tokens (of the part just added), so that the stream length stays the provider's count.
    Returns the lowest length the stream has had (``low`` before)."""
    if n > 0:
        tokens.extend([PAD] * n)
    elif n < 0:
        del tokens[n:]
        return min(low, len(tokens))
    return low


# One int object per token id, shared by every memoised segment and stream. A tokenizer returns a
# fresh int for each id above 256, so a 1,000-message conversation's 23k tokens were ~16k objects
# (28 bytes each, scattered) where the ids are ~900 distinct ones: interned, the memo holds a
# pointer a token, and copying a stream (its tuple, once a request) touches a few hundred hot
# objects instead of every token's own. Bounded by the vocabularies (o200k: 200k ids, ~16 MiB at
# the very most); dict.setdefault is atomic under the GIL.
_IDS: dict[int, int] = {}


def _interned(ids: list[int]) -> tuple[int, ...]:
    """``tuple(ids)`` with each id the one shared int object of its value."""
    return tuple(map(_IDS.setdefault, ids, ids))


def _reply(n: int) -> Iterable[int]:
    return (START, PAD, SEP)[:n] if n <= 3 else (START, *([PAD] * (n - 2)), SEP)
