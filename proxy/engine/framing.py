"""The framing constants: tokens each provider adds around the content, per provider and model prefix.

Data with its provenance (comments below), kept apart from the counter that applies it (``counting``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Framing:
    """Tokens a provider adds around the content, in tokenizer tokens (before ``ratio``)."""

    per_message: int  # per message / input item: start + separator + end (role tokens come on top)
    reply: int  # reply priming at the end of the prompt (<|im_start|>assistant<|im_sep|>)
    assistant_extra: int = 0  # extra per assistant message (harmony channel marker of gpt-5)
    tools_once: int = 0  # once when any tool is present (tools header / system message it lives in)
    per_tool: int = 0  # per tool definition, beyond its rendered text
    per_tool_call: int = 0  # per tool call in an assistant turn, beyond its name + arguments
    per_tool_result: int = 0  # per tool result, beyond its content
    # A chat message's author ``name``: rendered after the role as ``name_prefix + name``, a text of its
    # own (openai/harmony src/encoding.rs writes ":{name}"), plus per_name. The cookbook's
    # tokens_per_name = 1 is that text whenever ":" does not merge with the name's first letters;
    # where it does (":user", ":test", ":a"), the name costs one less: wandb/weave's AutoGen cassettes
    # (tests/integrations/autogen/cassettes/autogen_test/, gpt-4.1-nano, name "user" on user
    # messages) report 1 for it in 6 of 6 requests, where name + 1 gave 2. Below zero (0301: the name
    # replaces the role) the name's last tokens are taken back after its text is counted.
    per_name: int = 0
    name_prefix: str = ":"
    schema_once: int = 0  # once for a structured-output schema, beyond its rendered text
    # OpenAI chat: a schema without tools joins the system message as the tools would (host framing
    # computed) and costs this instead of schema_once. None: schema_once in every case.
    schema_alone: int | None = None
    system_once: int = 0  # once when there is top-level system text (Anthropic)
    tools_forced: int | None = None  # instead of tools_once when tool_choice is any / tool (Anthropic)
    thinking_once: int = 0  # once when extended / adaptive thinking is on (Anthropic)
    typescript_tools: bool = True  # OpenAI renders functions as a TypeScript namespace; Anthropic as JSON
    # OpenAI: the tools section joins the first system / developer message after a blank line, or opens
    # a system message of its own; its framing is computed, tools_once is what comes on top (may be < 0).
    tools_in_system: bool = False
    # ... and when there is no such message: None = a system message of its own (3 + role tokens).
    tools_alone: int | None = None
    # OpenAI: a tool_choice that forces one function primes the reply with " to=functions.NAME" plus
    # these tokens (None: nothing; gpt-5's harmony format showed no change in recorded usage).
    forced_call: int | None = None
    # How a call names its function, and a result its author (harmony style: " to=functions.NAME" and
    # "functions.NAME"; the cl100k models of 2023 used the bare name in both).
    recipient_prefix: str = " to=functions."
    result_prefix: str = "functions."
    role_tokens: bool = True  # the role name is encoded in each message header (ChatML)
    tool_dialect: str = "chatml"  # which tool renderer's corrections apply (rendering.tool_correction)
    # Responses: an ``additional_tools`` input item (tools added mid-conversation) costs its tools
    # section (rendering.render_additional_tools) plus this, beyond its message framing.
    additional_tools_extra: int = 0
    # Responses: a function_call input item sent without its item ``id`` costs this beyond
    # per_tool_call (< 0: less), against one sent back with the id it was returned with.
    call_without_id: int = 0
    # Of the tokens a tools section adds (tools_once), those of OpenAI-provided hidden system content
    # (harmony's tools preamble). They are billed, but they do not count toward the cache minimum
    # (OpenAI prompt-caching guide, 2026: "Tokens in the OpenAI-provided hidden system content do not
    # count toward this minimum").
    preamble: int = 0
    # Responses: consecutive function_call items (parallel calls) share one assistant message, so a
    # further call costs its recipient and arguments only.
    calls_share_message: bool = False
    # Chat Completions (4o / 4.1 era): several calls of one assistant message are one call to the
    # multi_tool_use.parallel wrapper, their results one message (rendering.parallel_call_piece); the
    # merged results cost parallel_results_extra beyond per_tool_result.
    parallel_wrapper: bool = False
    parallel_results_extra: int = 0
    # Chat Completions (4o / 4.1): a json_schema format sent with strict: true addresses the assistant's
    # answers to it (rendering.strict_format_name): the reply and each earlier assistant message with
    # text (not a tool call) cost the name's tokens plus strict_format_turn, the section itself
    # strict_format_section. None: no such rule (Responses: the same strict schemas are exact there
    # without it; harmony: no record).
    strict_format_turn: int | None = None
    strict_format_section: int = 0
    # Chat Completions (4o / 4.1, cl100k tools): a result's author "functions.NAME" is "functions" and
    # the name, each tokenized on its own (the "." is per_tool_result's token). Where "." does not
    # merge with the name's first letters (".cal|culator", ".d|anger|ous", ".De|legate") the author
    # costs one token less than "functions.NAME" as one text: every such call + result outside the
    # final halves was one over, 16 records of 4o / 4o-mini / 4.1 and 2 of gpt-3.5-turbo, and no exact
    # one has such a name (pydantic-ai's twin bodies test_prefect_agent_with_model_retry#1, exact, and
    # test_durability_agent_with_model_retry#1, one over, differ in the name alone:
    # get_weather_in_city / durability_get_weather_in_city). A call's " to=functions.NAME" stays one
    # text (a forced TrainingTaskEvaluation primes the reply so, exact). No final record has such a name.
    result_name_apart: bool = False
    # Chat Completions: a call after the assistant turn's text is a message of its own, as a call after
    # another call is (dd-trace's handoff turn, the only such body outside the final halves: 3 under as
    # one message; exact as two, with result_name_apart). Responses items are apart anyway.
    call_after_text_apart: bool = False
    # Responses (harmony: gpt-5.4 family, gpt-5.6-terra): an assistant turn right after a tool result (a
    # further call, a message, or the reply priming when the prompt ends with the result) costs this
    # beyond its own framing; after a user or developer message it does not.
    resumes_after_result: int = 0
    # Chat Completions: a tool call's arguments are parsed and rendered as compact JSON (no spaces
    # after ":" and ","), whatever the client sent; Responses keeps the string as sent.
    compact_arguments: bool = False
    # Responses: the text parts of one message are one text, concatenated without a separator, so
    # where two parts meet the provider tokenizes across the boundary (counting: a join correction).
    parts_joined: bool = False


# Framing constants. Where each comes from:
# - openai-chat base: the classic formula of the openai-cookbook "How to count tokens with tiktoken"
#   (3 per message + role, +3 reply priming); recorded/README.md and our bench: exact for most
#   plain-text chat requests.
# - gpt-5*, o3, o4: report one token less (reply priming 2), recorded data;
#   gpt-5* also counts 2 more per assistant message; with tools, Chat Completions counts 84 more
#   (harmony system preamble; training split, first turns) but the Responses API does not.
# - gpt-5* with tools (harmony; tool_dialect): the section lives in a developer message, so without a
#   system / developer message it costs 1 in Chat Completions (not a system message's 3 + role: 8
#   first turns of gpt-5-mini / gpt-5.4-mini, held-out dev); in Responses it costs 3 alone (17
#   gpt-5-mini first turns, held-out dev) and 3 joined to a message (the training refusal records).
#   A call + its result cost 6 beyond names and text (harmony's result header " to=assistant" +
#   channel: per_tool_result 5; gpt-5 / 5.2 / 5.4-mini / 5-mini held-out dev, both APIs; gpt-5-nano's
#   one training call is 1 over). Parallel calls (one assistant turn, several calls) are one
#   multi_tool_use.parallel call in Chat Completions, as for 4o (parallel_wrapper; FRAMING below).
# - tools (rendering.py; training split of bench/bench_counting.py, cases by record id in
#   tests/engine/test_openai_tool_counting.py): the section joins the first system / developer
#   message after a blank line, tokenized with that message's end (tools_in_system), or opens a system
#   message of its own (3 + role); tools_once -1 is what the first turns show on top, the same for 4o,
#   4o-mini, 4.1, 4.1-mini. A call is a message "assistant to=functions.NAME" with the arguments as its
#   content, plus per_tool_call 1; a result is authored by "functions.NAME", plus per_tool_result 1
#   (one call + result: exact on 45 of 62 training requests; sequences of up to 24 pairs too).
# - structured outputs (json_schema, rendering.render_response_format), training split: without tools
#   the section joins the system message like the tools and costs 4 more (71 of 130 chat requests
#   exact, most of the rest one schema each); after a tools section it costs 1 (34 of 34), and in the
#   Responses API 1, never joined (35 of 35 text.format requests at the same residual).
# - anthropic: fitted per family on recorded Messages requests (self-contained, not suspect, o200k
#   stream), least absolute relative error on a training split (held-out by test: bench), provider
#   units divided by the family ratio of rules/models.yaml. Families differ mostly in the tool-use
#   system prompt Anthropic injects: Claude 4 / 3.7 (documented 346 auto, 313 any/tool) fit 287 / 263
#   provider tokens + 35 per tool; Claude 4.5 and later 508 / 617 (+0 per tool); Claude 3.5 Haiku
#   (documented 264 / 340) 278 / 407; Opus 4.7 / 4.8 (new tokenizer) 277 from 3 requests, the forced
#   value and the rest borrowed from 4.5. Thinking on adds ~25-30, an output_format schema ~87 plus
#   the schema as indented JSON, each tool_use / tool_result ~27, each message ~2 and the request ~4.
# Rules are (provider, model prefix); the longest matching prefix wins, "" is the provider default.
_CHAT = Framing(
    forced_call=4,
    per_message=3,
    reply=3,
    tools_once=-1,
    per_tool_call=1,
    per_tool_result=1,
    schema_once=1,
    schema_alone=4,
    tools_in_system=True,
    compact_arguments=True,
    parallel_wrapper=True,
    parallel_results_extra=1,
    strict_format_turn=2,
    strict_format_section=-4,
    result_name_apart=True,
    call_after_text_apart=True,
)
# Chat Completions re-serialises a call's arguments (compact_arguments): of the one-call requests
# outside the final halves whose arguments were sent with spaces ('{"value": "one"}'), 9 of 11 were
# counted over by exactly the tokens the spaces add (gpt-4o, 4o-mini, 4.1-mini, 4.1-nano; crewAI,
# Mirascope, simonw/llm, haystack, langchain clients; cases in tests/engine/test_counting_arguments.py),
# while the same spaced arguments in Responses items are exact as sent (Mirascope
# test_resume_with_override_thinking_and_tools/openai_gpt_4o_responses.yaml#1, #5).
# Responses: the same rendering, but the recorded requests with tools report 2 tokens less than Chat
# Completions with the same developer message, and 6 less without one: the section is 2 tokens
# shorter and never opens a message of its own (training split: 18 + 10 first-turn requests); a
# function_call item costs one token more than a chat tool call (40 requests with one call + output).
# Sent without its item id (pydantic-ai strips the ids for non-reasoning models) it costs 3 less than
# with one: every such request of gpt-4o / gpt-4.1 outside the final half, 3 less each (Mirascope
# test_resume_with_override_thinking_and_tools/openai_gpt_4o_responses.yaml#1, #5; pydantic-ai
# test_openai_responses_non_reasoning_model_no_item_ids#1, test_native_output_multiple#1,
# test_tool_output#1), while 36 of 48 one-call gpt-4o requests with ids are exact. The harmony
# format (gpt-5) shows no such difference (2 requests without ids, exact).
# Parallel calls (function_call items one after another) share one message: a further call costs
# its recipient and arguments, 6 less than a call alone (12 of 12 training requests with two calls:
# Mirascope test_call_with_tools/openai_gpt_4o_responses, 4 client variants, recorded Oct 2025 and
# Jan 2026); harmony (gpt-5) calls are not merged (gpt-5.2's 4-call turns are exact without it).
# Such a run sent without item ids costs what it costs with them: the opening call's call_without_id
# is taken back by the call that joins it (every run of 4o / 4.1 calls without ids outside the final
# halves, 3 of 3, was 3 under without that: chatlas test_chat_tool_request_reject#1, ellmer
# chat-tools-reject-tool-function#1, chat-tools-reject-callback#1).
_RESPONSES = replace(
    _CHAT,
    tools_once=-3,
    tools_alone=0,
    per_tool_call=2,
    schema_alone=None,
    call_without_id=-3,
    calls_share_message=True,
    compact_arguments=False,
    parts_joined=True,
    parallel_wrapper=False,
    strict_format_turn=None,
    strict_format_section=0,
    result_name_apart=False,
    call_after_text_apart=False,
)


# The legacy function-calling format (`functions`, `function_call`, role `function`): the same tools
# section, but a call is "assistant" + the bare name + arguments + 3, a result is authored by the bare
# name, and a forced function adds its name + 4. hmarr/openai-chat-tokens' API-measured gpt-3.5-turbo
# cases match to the token (tests/engine/test_openai_tool_counting.py); the recorded tool_calls of
# gpt-3.5-turbo-0125 follow the tools format instead, so this goes by the message format, not the model.
# Its arguments are counted as sent (hmarr's '{"foo": "bar", "baz": 1.5}' case: not compact_arguments).
def legacy_calls(framing: Framing) -> Framing:
    return replace(
        framing,
        recipient_prefix="",
        result_prefix="",
        per_tool_call=3,
        per_tool_result=0,
        compact_arguments=False,
    )


_ANTHROPIC = Framing(
    per_message=2, reply=4, tools_once=438, tools_forced=532, per_tool=0, per_tool_call=23,
    per_tool_result=23, name_prefix="", system_once=0, thinking_once=21, schema_once=75,
    typescript_tools=False, role_tokens=False,
)  # fmt: skip
# Claude 4 / 4.1 / 3.7 Sonnet (ratio 1.2).
_CLAUDE_4 = replace(
    _ANTHROPIC, per_message=1, reply=4, tools_once=239, tools_forced=219, per_tool=29, per_tool_call=23,
    per_tool_result=23, thinking_once=25, schema_once=72,
)  # fmt: skip
# Claude 3.5 / 3 Haiku (ratio 1.1).
_CLAUDE_35_HAIKU = replace(
    _ANTHROPIC, per_message=2, reply=4, tools_once=253, tools_forced=370, per_tool=0, per_tool_call=24,
    per_tool_result=24, thinking_once=0,
)  # fmt: skip
# Opus 4.7 / 4.8 and Opus 5 (the newer tokenizer, ratio 1.41); adaptive thinking adds nothing measurable
# on these (13-18 reported for "What is 2+2?" with and without it).
_CLAUDE_NEW_TOKENIZER = replace(
    _ANTHROPIC, per_message=1, reply=3, tools_once=196, tools_forced=438, per_tool_call=19,
    per_tool_result=19, thinking_once=0, schema_once=62,
)  # fmt: skip
# gpt-5 models (harmony, openai/harmony) in either API: what both framings share.
_HARMONY = replace(
    _CHAT,
    reply=2,
    assistant_extra=2,
    forced_call=None,
    per_tool_call=1,
    per_tool_result=5,
    tool_dialect="harmony",
    # Responses items are never a parallel run (each call is an item of its own); Chat Completions'
    # gpt-5 framing below turns the wrapper on.
    parallel_wrapper=False,
    strict_format_turn=None,
    strict_format_section=0,
    result_name_apart=False,
)
# gpt-5 (harmony) renders tools inside the developer message (openai/harmony): joined to one the
# section costs tools_once 3, alone it costs the same (tools_alone 0; see the gpt-5 note above).
_HARMONY_RESPONSES = replace(
    _HARMONY,
    tools_once=3,
    tools_alone=0,
    # A text.format section never joins a message in Responses (as for 4o), and in harmony it costs
    # nothing beyond its rendered text (4o: 1): every harmony json_schema request outside the final
    # halves was one over with 1 — 19 of 19 without tool results, across five projects and six models
    # (ruby_llm gpt-5-nano, newrelic gpt-5.1, chatlas gpt-5.4, pydantic-ai gpt-5.4-mini, ellmer
    # gpt-5.4-nano and gpt-5.6-terra; the third cassette source's dev half, record cases in
    # tests/engine/test_counting_harmony_responses.py). No training record has one.
    schema_alone=None,
    schema_once=0,
    tool_dialect="harmony",
    # With its developer message's framing (4) this is 84, the harmony tools preamble that Chat
    # Completions adds to a tools section (tools_once above): gpt-5, gpt-5.6 held-out dev records
    # (tests/engine/test_counting_tool_rules.py); gpt-5.4 with instructions counted 4 more.
    additional_tools_extra=80,
    compact_arguments=False,  # Responses keeps a call's arguments as sent (see _CHAT)
    parts_joined=True,
)
# gpt-5.4 (and its -mini / -nano) and gpt-5.6-terra: an assistant turn that goes on right after a tool
# result costs one token more (resumes_after_result). Of the 46 Responses requests of these models with
# tool results on the dev halves (chatlas, ellmer, ruby_llm, pydantic-ai), 42 are exact with it, 1
# without it (4 before either rule: 3 only because the text.format token above cancelled it); the 4
# left have an additional_tools item or calls in a row. A prompt ending with a result was one under; a result
# followed by a user message (ellmer's "dangling" results) was exact; one followed by an assistant
# message, or by a further call, one under each. A token per result pair did not fit (ellmer's
# dangling sequences). gpt-5, gpt-5.2 and gpt-5.5 show no such token (their requests with results are
# exact or over without it), so it is not in _HARMONY_RESPONSES.
_HARMONY_RESPONSES_RESUMING = replace(_HARMONY_RESPONSES, resumes_after_result=1)
FRAMING: dict[tuple[str, str], Framing] = {
    ("openai-chat", ""): _CHAT,
    # Parallel calls: the 4o wrapper too (parallel_wrapper). Outside the final halves: crewAI's
    # gpt-5-nano 3-call turn (5 records) 8 over without it, chatlas' gpt-5.4 2-call turn 10 under beyond
    # its first turn's 1; both exact with it. The output tokens agree: gpt-5.4 (no reasoning tokens)
    # reports 50 for making chatlas' two calls (the wrapper's text 51 in Responses, two calls 41)
    # and 85 for ellmer's four (gpt-5.4-nano; wrapper 85, apart 87). No final record has one.
    ("openai-chat", "gpt-5"): replace(
        _HARMONY, tools_once=84, tools_alone=1, preamble=84, parallel_wrapper=True, parallel_results_extra=1
    ),
    # openai-cookbook's "How to count tokens with tiktoken" (API-measured): gpt-3.5-turbo-0301 frames
    # every message as <|start|>{role/name}\n{content}<|end|>\n (4 tokens) and a name takes the
    # role's place (-1: each role is one cl100k token). BoxcarsAI/boxcars' 2023 cassettes (stop 36,
    # dev half: "gpt-3.5-turbo" answered by gpt-3.5-turbo-0301) were short by one per message, 3 of
    # 3 messages in 5 requests and 5 of 5 in 2; its -0613 answers to the same bodies are exact.
    ("openai-chat", "gpt-3.5-turbo-0301"): replace(_CHAT, per_message=4, per_name=-1, name_prefix=""),
    # o1 primes the reply as o3 / o4 do: dspy.rb's model-matrix o1 requests (stop 36, dev half, 2 of
    # 2) were one over with 3. Not o1-mini (crewAI's two training requests are exact with 3), nor
    # o1-preview, of o1-mini's September 2024 generation (no record).
    ("openai-chat", "o1"): replace(_CHAT, reply=2),
    ("openai-chat", "o1-mini"): _CHAT,
    ("openai-chat", "o1-preview"): _CHAT,
    ("openai-chat", "o3"): replace(_CHAT, reply=2),
    ("openai-chat", "o4"): replace(_CHAT, reply=2),
    ("openai-responses", ""): _RESPONSES,
    ("openai-responses", "gpt-5"): _HARMONY_RESPONSES,
    ("openai-responses", "gpt-5.4"): _HARMONY_RESPONSES_RESUMING,
    ("openai-responses", "gpt-5.6-terra"): _HARMONY_RESPONSES_RESUMING,
    ("openai-responses", "o3"): replace(_RESPONSES, reply=2),
    ("openai-responses", "o4"): replace(_RESPONSES, reply=2),
    # Claude 4.5 and later (Sonnet 4.5 / 4.6, Haiku 4.5, Opus 4.5 / 4.6, unknown newer models).
    ("anthropic", ""): _ANTHROPIC,
    ("anthropic", "claude-sonnet-4"): _CLAUDE_4,
    ("anthropic", "claude-sonnet-4-5"): _ANTHROPIC,
    ("anthropic", "claude-sonnet-4-6"): _ANTHROPIC,
    ("anthropic", "claude-opus-4"): _CLAUDE_4,
    ("anthropic", "claude-opus-4-5"): _ANTHROPIC,
    ("anthropic", "claude-opus-4-6"): _ANTHROPIC,
    ("anthropic", "claude-opus-4-7"): _CLAUDE_NEW_TOKENIZER,
    ("anthropic", "claude-opus-4-8"): _CLAUDE_NEW_TOKENIZER,
    ("anthropic", "claude-opus-5"): _CLAUDE_NEW_TOKENIZER,
    ("anthropic", "claude-3-7-sonnet"): _CLAUDE_4,
    ("anthropic", "claude-3-5-haiku"): _CLAUDE_35_HAIKU,
    ("anthropic", "claude-3-haiku"): _CLAUDE_35_HAIKU,
}


def framing_for(provider: str, model: str) -> Framing:
    name = model.lower()
    best: tuple[int, Framing] | None = None
    for (prov, prefix), framing in FRAMING.items():
        if prov == provider and name.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), framing)
    return best[1] if best is not None else _CHAT
