"""Python prompt text built from lists, passed through helpers, and from the agent's own settings:
what the third held-out set of repositories showed (each case is a minimal one of our own)."""

from __future__ import annotations

from cachewarden.linter.engine import lint_source
from lint_support import LONG

POLICY = f'POLICY = """{LONG}"""\n'


def found(source: str, path: str = "agent.py") -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.severity) for f in lint_source(path, source)]


def test_a_clock_appended_to_a_list_that_a_helper_joins_into_the_system_message() -> None:
    # The list is built by the caller and iterated by a function of the module it is passed to.
    source = (
        "from datetime import datetime\n"
        + POLICY
        + "def _trailing(extra):\n"
        + "    text = ''\n"
        + "    for item in extra:\n"
        + "        text += f'- {item}\\n'\n"
        + "    return text + POLICY\n"
        + "def get_system_message(bot):\n"
        + "    extra = []\n"
        + "    extra.append(f'The time is {datetime.now()}.')\n"
        + "    system_message = 'You are a helpful bot.\\n'\n"
        + "    system_message += _trailing(extra)\n"
        + "    return system_message\n"
    )
    assert ("CW101", 9, "error") in found(source)


def test_a_list_changed_in_an_unknown_way_is_not_read() -> None:
    source = (
        "from datetime import datetime\n"
        + POLICY
        + "def get_system_message(extra_from_caller):\n"
        + "    notes = []\n"
        + "    notes.insert(0, extra_from_caller)\n"
        + "    system_message = ''\n"
        + "    for note in notes:\n"
        + "        system_message += f'{note}\\n'\n"
        + "    return system_message + POLICY\n"
    )
    assert [c for c in found(source) if c[0].startswith("CW10")] == []


def test_text_passed_through_a_call_keeps_its_place() -> None:
    # `text = fill(agent, text)` and `text = text.strip()` give the same text back: what was
    # appended before and after still makes one prompt.
    source = (
        "import uuid\n"
        + POLICY
        + "def system_prompt(agent):\n"
        + "    text = f'Session {uuid.uuid4()}. '\n"
        + "    text = agent.fill_vars(text)\n"
        + "    text = text.strip()\n"
        + "    text += POLICY\n"
        + "    return text\n"
    )
    assert found(source) == [("CW102", 7, "error")]


def test_dumping_the_keys_of_a_dict_this_code_fills_is_a_note() -> None:
    source = (
        "import json\n"
        + POLICY
        + "def system_prompt(schema):\n"
        + "    props = {}\n"
        + "    for name, field in schema['properties'].items():\n"
        + "        props[name] = field\n"
        + "    return 'Fields: ' + json.dumps([k for k in props.keys()]) + POLICY\n"
    )
    assert [c for c in found(source) if c[0] == "CW201"] == [("CW201", 10, "info")]


def test_dumping_what_a_set_lists_is_still_a_warning() -> None:
    source = (
        "import json\n"
        + POLICY
        + "def system_prompt(names):\n"
        + "    return 'Tools: ' + json.dumps([{'n': n} for n in set(names)]) + POLICY\n"
    )
    assert ("CW201", 7, "warning") in found(source)


def test_the_agents_own_settings_are_not_per_request_but_its_history_is() -> None:
    # 24 times: the static text reaches gpt-4o's 1,024-token minimum, so moving it would pay (a warning).
    long = f'"""{LONG * 24}"""'
    settings = (
        "def system_prompt(agent, run_context):\n"
        + "    return f'{agent.additional_context}\\n{agent.members_text(run_context=run_context)}\\n' + "
        + long
        + "\n"
    )
    assert [c for c in found(settings) if c[0] in ("CW301", "CW401")] == []
    history = "def system_prompt(agent):\n    return f'{agent.history}\\n' + " + long + "\n"
    assert ("CW301", 2, "warning") in found(history)


def test_a_persona_field_is_per_agent_and_a_query_field_is_per_request() -> None:
    template = "{{ persona_context }}\n" + LONG * 12 + "{{ user_query }}\n"
    assert [c for c in found(template, "answer.j2") if c[0] == "CW301"] == []
    template = "{{ query_context }}\n" + LONG * 12
    assert "CW301" in [c[0] for c in found(template, "answer.j2")]


def test_a_count_of_a_module_constant_is_static() -> None:
    prompt = "SYSTEM_PROMPT = f'Pick one of {len(CHOICES)}: {CHOICES}. ' + POLICY\n"
    source = "CHOICES = ['a', 'b']\n" + POLICY + prompt
    assert found(source) == []
    turns = "def system_prompt(messages):\n    return f'Turn {len(messages)}. ' + POLICY\n"
    assert found(POLICY + turns) == [("CW102", 6, "error")]


def test_a_list_of_instruction_texts_is_read_part_by_part() -> None:
    source = (
        "from datetime import datetime\n"
        + POLICY
        + "RULES = f'Today is {datetime.now()}. ' + POLICY\n"
        + "agent = Agent(name='desk', instructions=[RULES, POLICY])\n"
    )
    assert found(source) == [("CW101", 6, "info")]  # frozen at import: once per process
