"""The demo's agent workload: a travel-desk agent talking to OpenAI and Anthropic, with cache busters.

Everything here is generated, deterministically: a ~2,000-token policy system prompt, five tools with
JSON schemas, and one growing conversation per provider (user questions, a tool call and its result
every third turn, canned assistant answers). The history is scripted rather than taken from the
model's replies so that the same command prints the same report on every machine; the requests
still have the shape a real agent sends (the SDK call's keyword arguments, ready to pass).

The conversation runs through five scenario phases. Each buster is switched on for one phase only
and removed again at the next, so the report attributes every miss to one clear cause:

1. healthy        nothing changes but the appended turns: cache hits grow each turn
2. timestamp      ``Current time:`` at the top of the system prompt turns from the date (stable all
                   day) into the time to the second, new on each request
3. tools          the tool list in another order on every request (a set / dict iteration)
4. history        an earlier assistant turn rewritten on every request (a "running plan"); it keeps
                   its last version afterwards
5. model          a router moves the conversation to another model (the cache is per model)

This module does no I/O; ``cachewarden.proxy.cli.demo`` sends the requests.

This module is long because it is mostly data: the policy prompt, the five tool schemas and the
scripted turns of each phase, kept beside the few functions that lay them out as requests.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

DemoProvider = Literal["openai-chat", "anthropic", "openai-responses"]

OPENAI_MODEL = "gpt-4.1"
OPENAI_ALT_MODEL = "gpt-4o"
ANTHROPIC_MODEL = "claude-sonnet-5"
ANTHROPIC_ALT_MODEL = "claude-opus-4-1"
MAX_TOKENS = 256  # Anthropic requires it; the emulator's answers are far shorter
# Seconds between the requests' "Current time" values in the timestamp phase (any change busts it).
TIMESTAMP_STEP = 7


@dataclass(frozen=True, slots=True)
class Phase:
    number: int
    key: str  # the reason code the phase provokes ("healthy" provokes none)
    title: str


PHASES: tuple[Phase, ...] = (
    Phase(1, "healthy", "healthy agent: new turns appended, the system prompt dated to the day"),
    Phase(2, "timestamp", "'Current time:' in the system prompt now to the second"),
    Phase(3, "tools-reordered", "tool list sent in another order on each request"),
    Phase(4, "history-edited", "an earlier assistant turn rewritten on each request"),
    Phase(5, "model-changed", "a router moves the conversation to another model"),
)
BUSTER_REASONS: tuple[str, ...] = tuple(p.key for p in PHASES[1:])


@dataclass(frozen=True, slots=True)
class Step:
    """One request: which phase it belongs to, the provider, and the SDK call's keyword arguments."""

    phase: Phase
    provider: DemoProvider
    kwargs: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.kwargs["model"])


@dataclass(frozen=True, slots=True)
class Workload:
    steps: tuple[Step, ...]
    phases: tuple[Phase, ...] = field(default=PHASES)

    def by_phase(self, phase: Phase) -> list[Step]:
        return [s for s in self.steps if s.phase == phase]


# -- the system prompt -------------------------------------------------------------------------------

_SECTIONS = (
    "Identity and scope",
    "Searching for flights",
    "Making a booking",
    "Changes and cancellations",
    "Refunds and credits",
    "Baggage and special assistance",
    "Loyalty programme",
    "Privacy and data handling",
    "Using the tools",
    "Tone and escalation",
)
_SUBJECTS = (
    "the traveller",
    "a travel manager",
    "a corporate account",
    "a group booking of nine or more",
    "an unaccompanied minor",
    "a passenger with reduced mobility",
    "a loyalty member",
    "a booking paid with travel credit",
)
_ACTIONS = (
    "must confirm the fare conditions before any payment is taken",
    "may hold a seat for at most twenty minutes without payment",
    "should always quote prices in the currency of the point of sale",
    "must read back names exactly as printed in the passport",
    "should offer the cheapest refundable fare alongside the cheapest fare",
    "must never disclose another traveller's itinerary or contact details",
    "should check visa and transit requirements for every connection",
    "must record the reason for every manual fare override",
    "may waive the change fee once per booking when a schedule change exceeds two hours",
    "should propose an alternative within the same cabin before offering a downgrade",
    "must escalate to a human supervisor when a refund exceeds the automatic limit",
    "should summarise the itinerary, fare rules and total price before confirming",
)
_CONDITIONS = (
    "unless the traveller explicitly declines",
    "and this applies to every segment of the journey",
    "as required by the carrier's conditions of carriage",
    "in line with the regulations of the country of departure",
    "so that the audit trail remains complete",
    "because partial information has caused disputes in the past",
    "and the confirmation message must state it plainly",
)


def system_prompt() -> str:
    """About 2,000 tokens of travel-desk policy, the same text on every call."""
    lines = [
        "You are Skyline, the booking assistant of a corporate travel desk. Follow this policy exactly.",
        "",
    ]
    clause = 0
    for number, section in enumerate(_SECTIONS, 1):
        lines.append(f"## {number}. {section}")
        for item in range(1, 7):
            # Index arithmetic instead of a seeded RNG: identical text on every Python version.
            subject = _SUBJECTS[(clause * 3 + number) % len(_SUBJECTS)]
            action = _ACTIONS[(clause * 5 + item) % len(_ACTIONS)]
            condition = _CONDITIONS[(clause * 2 + number * item) % len(_CONDITIONS)]
            lines.append(f"{number}.{item} When {subject} is involved, the agent {action}, {condition}.")
            clause += 1
        lines.append("")
    lines.append("Answer concisely. Use the tools for every fact about flights and bookings; never guess.")
    return "\n".join(lines)


# -- tools ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


def _obj(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_IATA = {"type": "string", "description": "IATA airport code, e.g. LHR", "pattern": "^[A-Z]{3}$"}
_DATE = {"type": "string", "format": "date", "description": "local date of departure, YYYY-MM-DD"}
_REF = {"type": "string", "description": "six-character booking reference, e.g. K7Q2XZ"}

TOOLS: tuple[Tool, ...] = (
    Tool(
        "search_flights",
        "Search scheduled flights between two airports on a date, cheapest first.",
        _obj(
            {
                "origin": _IATA,
                "destination": _IATA,
                "date": _DATE,
                "cabin": {"type": "string", "enum": ["economy", "premium_economy", "business", "first"]},
                "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
            },
            ["origin", "destination", "date"],
        ),
    ),
    Tool(
        "get_booking",
        "Fetch a booking with its itinerary, passengers, fare rules and payment status.",
        _obj({"booking_ref": _REF}, ["booking_ref"]),
    ),
    Tool(
        "create_booking",
        "Book a flight offer returned by search_flights for the named passengers.",
        _obj(
            {
                "offer_id": {"type": "string", "description": "id of an offer from search_flights"},
                "passengers": {
                    "type": "array",
                    "items": _obj(
                        {"given_name": {"type": "string"}, "family_name": {"type": "string"}},
                        ["given_name", "family_name"],
                    ),
                },
            },
            ["offer_id", "passengers"],
        ),
    ),
    Tool(
        "cancel_booking",
        "Cancel a booking; returns the refund or credit due under the fare rules.",
        _obj(
            {
                "booking_ref": _REF,
                "reason": {"type": "string", "enum": ["traveller_request", "schedule_change", "duplicate"]},
            },
            ["booking_ref", "reason"],
        ),
    ),
    Tool(
        "check_travel_requirements",
        "Visa, passport validity and transit rules for a nationality and itinerary.",
        _obj(
            {
                "nationality": {"type": "string", "description": "ISO 3166-1 alpha-2 country code"},
                "airports": {"type": "array", "items": _IATA, "minItems": 2},
            },
            ["nationality", "airports"],
        ),
    ),
)


def openai_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def anthropic_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


def reordered(tools: Sequence[Tool], request: int) -> list[Tool]:
    """Another order on each request of the phase (never the original one), as a set iteration gives.

    Every order must be new: the provider keeps each prefix it has seen, so an order sent before
    would hit the cache again. Stepping through the permutations by a stride coprime with their
    count (119 for five tools, the identity left out) gives ``turns`` distinct ones.
    """
    orders = list(itertools.permutations(range(len(tools))))[1:]
    stride = next(k for k in range(11, len(orders)) if math.gcd(k, len(orders)) == 1)
    return [tools[i] for i in orders[(request * stride) % len(orders)]]


# -- the conversation -----------------------------------------------------------------------------------

_ROUTES = (("LHR", "JFK"), ("CDG", "SIN"), ("FRA", "ORD"), ("AMS", "NRT"), ("MAD", "GRU"), ("ZRH", "SFO"))
_REFS = ("K7Q2XZ", "M4T9PL", "B2W8RC", "Z5H3NV", "Q9D6JA", "T1F7GE")
_QUESTIONS = (
    "What is the baggage allowance on the fare I was offered, and can I add a second bag?",
    "My colleague needs special assistance at the airport. What do I have to tell you?",
    "Can I use my loyalty points to upgrade on this route, and what does it cost?",
    "If the schedule changes by three hours, am I entitled to a free change?",
    "Do I need a transit visa for a connection, and how long must my passport be valid?",
    "Please explain the refund rules on a business fare bought with travel credit.",
)
_ANSWERS = (
    "On that fare one checked bag of 23 kg is included; a second bag can be added for a fee at booking.",
    "Tell me the passenger's name and the assistance needed; I will add the request to every segment.",
    "Upgrades with points are possible on this route when award seats are available; I will check.",
    "Yes: a schedule change of more than two hours lets me waive the change fee once on this booking.",
    "That depends on your nationality and the connection airport; I will check the requirements.",
    "Business fares bought with travel credit are refunded as credit, minus any non-refundable taxes.",
)


def _task(turn: int) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """A request that needs a tool: (user text, tool name, arguments, tool result)."""
    k = turn // 3
    origin, destination = _ROUTES[k % len(_ROUTES)]
    ref = _REFS[k % len(_REFS)]
    date = f"2026-0{6 + k % 3}-{10 + k % 18:02d}"
    if k % 2 == 0:
        text = f"Find me the cheapest business flight from {origin} to {destination} on {date}."
        args: dict[str, Any] = {
            "origin": origin,
            "destination": destination,
            "date": date,
            "cabin": "business",
        }
        result: dict[str, Any] = {
            "offers": [
                {
                    "offer_id": f"of_{ref.lower()}_1",
                    "carrier": "SK",
                    "depart": f"{date}T09:40",
                    "price": 2480,
                },
                {
                    "offer_id": f"of_{ref.lower()}_2",
                    "carrier": "AZ",
                    "depart": f"{date}T18:05",
                    "price": 2615,
                },
            ]
        }
        return text, "search_flights", args, result
    text = f"What is the status of booking {ref}? I may need to cancel it."
    args = {"booking_ref": ref}
    result = {
        "booking_ref": ref,
        "status": "ticketed",
        "itinerary": [{"from": origin, "to": destination, "date": date}],
        "fare_rules": {"refundable": False, "change_fee": 150},
    }
    return text, "get_booking", args, result


@dataclass(slots=True)
class _Conversation:
    """A provider-neutral history: (role, text) turns plus tool calls, rendered per provider."""

    provider: DemoProvider
    turns: list[dict[str, Any]] = field(default_factory=list)

    def add_user(self, text: str) -> None:
        self.turns.append({"role": "user", "text": text})

    def add_assistant(self, text: str) -> None:
        self.turns.append({"role": "assistant", "text": text})

    def add_tool_call(self, call_id: str, name: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        self.turns.append({"role": "tool_call", "id": call_id, "name": name, "args": args, "result": result})

    def render(self, edited_plan: str | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for index, turn in enumerate(self.turns):
            text = turn.get("text", "")
            if index == 1 and edited_plan is not None:
                # The "history-edited" buster: the agent rewrites its first answer with a running plan.
                text = f"{text}\nPlan: {edited_plan}"
            if turn["role"] in ("user", "assistant"):
                out.append({"role": turn["role"], "content": text})
            elif self.provider == "anthropic":
                out += _anthropic_tool_exchange(turn)
            else:
                out += _openai_tool_exchange(turn)
        return out


def _openai_tool_exchange(turn: dict[str, Any]) -> list[dict[str, Any]]:
    call = {
        "id": turn["id"],
        "type": "function",
        "function": {"name": turn["name"], "arguments": json.dumps(turn["args"], sort_keys=True)},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": turn["id"], "content": json.dumps(turn["result"], sort_keys=True)},
    ]


def _anthropic_tool_exchange(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": turn["id"], "name": turn["name"], "input": turn["args"]}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": turn["id"],
                    "content": json.dumps(turn["result"], sort_keys=True),
                }
            ],
        },
    ]


_PLAN_STEPS = ("check fares", "confirm baggage", "verify documents", "hold the seat", "collect payment")


def _advance(conv: _Conversation, turn: int, prefix: str) -> None:
    """Append what the user (or a tool result) says at ``turn``: every third turn is a tool exchange."""
    kind = turn % 3
    if kind == 0:
        conv.add_user(_QUESTIONS[(turn // 3) % len(_QUESTIONS)])
    elif kind == 1:
        conv.add_user(_task(turn)[0])
    else:
        _, name, args, result = _task(turn - 1)
        conv.add_tool_call(f"{prefix}{turn:04d}", name, args, result)


def _answer(conv: _Conversation, turn: int) -> None:
    """The scripted assistant reply that closes ``turn`` (the tool call itself stands for turn 1 of 3)."""
    if turn % 3 == 1:
        return  # the next turn appends the assistant's tool call and the tool's result
    conv.add_assistant(_ANSWERS[turn % len(_ANSWERS)])


def _conversation_steps(provider: DemoProvider, turns_per_phase: int, start: datetime) -> list[Step]:
    conv = _Conversation(provider)
    tool_prefix = "toolu_demo" if provider == "anthropic" else "call_demo"
    system = system_prompt()
    steps: list[Step] = []
    turn = 0
    plan: str | None = None
    for phase in PHASES:
        for request in range(turns_per_phase):
            _advance(conv, turn, tool_prefix)
            tools = reordered(TOOLS, request) if phase.key == "tools-reordered" else list(TOOLS)
            # The healthy prompt carries the date (stable all day); the buster makes it a time to the second.
            stamp = start.date().isoformat()
            if phase.key == "timestamp":
                stamp = (start + timedelta(seconds=TIMESTAMP_STEP * turn)).isoformat(timespec="seconds")
            text = f"Current time: {stamp}\n\n{system}"
            if phase.key == "history-edited":
                # Once rewritten, the turn keeps its last version: later phases only append again.
                done = _PLAN_STEPS[request % len(_PLAN_STEPS)]
                plan = f"revision {request + 1}, last done: {done}"
            alternate = phase.key == "model-changed"
            messages = conv.render(plan)
            if provider == "anthropic":
                kwargs: dict[str, Any] = {
                    "model": ANTHROPIC_ALT_MODEL if alternate else ANTHROPIC_MODEL,
                    "max_tokens": MAX_TOKENS,
                    # A breakpoint on the system block caches tools + system for every conversation;
                    # the top-level one moves to the last block of each request (rolling history cache).
                    "system": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
                    "tools": anthropic_tools(tools),
                    "messages": messages,
                    # As extra_body: SDKs older than the top-level ``cache_control`` parameter send it too.
                    "extra_body": {"cache_control": {"type": "ephemeral"}},
                }
            else:
                kwargs = {
                    "model": OPENAI_ALT_MODEL if alternate else OPENAI_MODEL,
                    "messages": [{"role": "system", "content": text}, *messages],
                    "tools": openai_tools(tools),
                }
            steps.append(Step(phase, provider, kwargs))
            _answer(conv, turn)
            turn += 1
    return steps


def _responses_steps(turns: int, start: datetime) -> list[Step]:
    """A second service on the Responses API, stateless: it resends its whole conversation each time.

    (Not chained with ``previous_response_id``: a capture holds only the new input of such a request,
    so a replay of it could not see the history the provider prepends.)
    """
    steps = []
    history: list[dict[str, Any]] = []
    for turn in range(turns):
        history.append({"role": "user", "content": _QUESTIONS[turn % len(_QUESTIONS)]})
        kwargs: dict[str, Any] = {
            "model": OPENAI_MODEL,
            "instructions": f"Current time: {start.date().isoformat()}\n\n{system_prompt()}",
            "tools": [{"type": "function", **openai_tools([t])[0]["function"]} for t in TOOLS],
            "input": list(history),
            "store": False,
        }
        steps.append(Step(PHASES[0], "openai-responses", kwargs))
        history.append({"role": "assistant", "content": _ANSWERS[turn % len(_ANSWERS)]})
    return steps


def build_workload(turns_per_phase: int = 4, start: datetime | None = None) -> Workload:
    """Every request of the demo, in the order it is sent: per phase, OpenAI Chat then Anthropic.

    ``start`` is the clock of the timestamp phase (the demo passes the wall clock; the default is a
    fixed instant, so the workload is a pure function of its arguments).
    """
    if turns_per_phase < 2:
        raise ValueError("turns per phase must be at least 2")
    start = start or datetime.fromisoformat("2026-06-01T09:00:00+00:00")
    chat = _conversation_steps("openai-chat", turns_per_phase, start)
    claude = _conversation_steps("anthropic", turns_per_phase, start)
    responses = _responses_steps(min(3, turns_per_phase), start)
    steps: list[Step] = []
    for phase in PHASES:
        steps += [s for s in chat if s.phase == phase]
        steps += [s for s in claude if s.phase == phase]
        if phase == PHASES[0]:
            steps += responses
    return Workload(tuple(steps))
