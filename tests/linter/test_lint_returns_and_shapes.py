"""Clocks returned as text by functions of the same module, and JSON / YAML judged by their shape.

Each fixture is a minimal pattern met in held-out repositories (written here, not copied): a helper
that returns ``now.strftime(...)`` into a system prompt, a method whose parameter is filled by
another method's clock, a template loaded at run time and filled with ``.format``; a server's list
of tool records, a saved agent state, a generated schema file.
"""

from __future__ import annotations

import json
from pathlib import Path

from cachewarden.linter.engine import lint_source
from lint_support import LONG

POLICY = f"POLICY = {LONG * 12!r}\n"  # one line: the fixtures' line numbers stay small
ASK = (
    "def ask(client, q):\n"
    "    return client.chat.completions.create(model='gpt-4o', messages=[\n"
    "        {'role': 'system', 'content': system_prompt()}, {'role': 'user', 'content': q}])\n"
)


def findings(source: str, path: str = "agent.py") -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.severity) for f in lint_source(path, source)]


def volatile(source: str, path: str = "agent.py") -> list[tuple[str, int, str]]:
    return [f for f in findings(source, path) if f[0] in ("CW101", "CW102", "CW301")]


def test_a_clock_returned_as_a_string_is_followed_into_an_f_string() -> None:
    source = (
        "import datetime\n"
        + POLICY
        + "def now_str():\n"
        + "    return datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')\n"
        + "def system_prompt():\n"
        + "    return f'Time: {now_str()}\\n' + POLICY\n"
        + ASK
    )
    # On the line that makes the clock, inside the function: the call itself is only text.
    assert volatile(source) == [("CW101", 4, "error")]


def test_returned_f_string_and_concatenation_are_graded_by_their_format() -> None:
    for body in ("return f'- Now: {now:%H:%M}'", "return 'Now: ' + now.strftime('%H:%M')"):
        source = (
            "import datetime\n"
            + POLICY
            + "def env():\n"
            + "    now = datetime.datetime.now()\n"
            + f"    {body}\n"
            + "def system_prompt():\n"
            + "    ctx = env()\n"
            + "    return 'Context: {ctx}\\n{policy}'.format(ctx=ctx, policy=POLICY)\n"
            + ASK
        )
        ((code, _, severity),) = volatile(source)
        assert (code, severity) == ("CW101", "error"), body


def test_a_method_fills_another_methods_parameter_with_a_clock() -> None:
    source = (
        "import datetime\n"
        + POLICY
        + "class Planner:\n"
        + "    def env(self):\n"
        + "        return f'- Current time: {datetime.datetime.now():%H:%M:%S}'\n"
        + "    def compose(self, context):\n"
        + "        return 'Context:\\n{c}\\n'.format(c=context) + POLICY\n"
        + "    def chat(self):\n"
        + "        return [make_message(role='system', message=f'{self.compose(context=self.env())}')]\n"
    )
    assert volatile(source) == [("CW101", 5, "error")]  # not `context` as a per-request name


def test_a_template_loaded_at_run_time_and_filled_with_a_clock() -> None:
    source = (
        "import datetime\n"
        + "class Planner:\n"
        + "    def __init__(self, data):\n"
        + "        self.instruction_template = data['instruction_template']\n"
        + "    def env(self):\n"
        + "        now = datetime.datetime.now()\n"
        + "        stamp = now.strftime('%Y-%m-%d %H:%M:%S')\n"
        + "        return f'- Current time: {stamp}'\n"
        + "    def chat(self):\n"
        + "        text = self.instruction_template.format(ENV=self.env(), ROLE='planner')\n"
        + "        return [make_message(role='system', message=text)]\n"
    )
    hits = lint_source("planner.py", source)
    (hit,) = [f for f in hits if f.code == "CW101"]
    assert (hit.line, hit.severity) == (8, "error")
    assert "an unknown number of tokens" in hit.message


def test_a_clock_returned_into_the_end_of_the_prompt_is_not_a_finding() -> None:
    tail = (
        "import datetime\n"
        + POLICY
        + "def now_str():\n"
        + "    return datetime.datetime.now().strftime('%H:%M')\n"
        + "def system_prompt():\n"
        + "    return POLICY + f'Time: {now_str()}'\n"
        + ASK
    )
    assert volatile(tail) == []


def test_a_clock_returned_at_import_is_frozen_per_process() -> None:
    source = (
        "import datetime\n"
        + POLICY
        + "def now_str():\n"
        + "    return datetime.datetime.now().strftime('%H:%M')\n"
        + "STARTED = now_str()\n"
        + "SYSTEM_PROMPT = f'Started {STARTED}. ' + POLICY\n"
    )
    assert volatile(source) == [("CW101", 6, "info")]


def test_a_string_repeated_a_literal_number_of_times_is_static_text() -> None:
    source = (
        "import datetime\n"
        + "def system_prompt():\n"
        + "    return f'{datetime.datetime.now():%H:%M}\\n' + 'Check every input carefully. ' * 200\n"
        + ASK
    )
    assert volatile(source) == [("CW101", 3, "error")]


# --- JSON / YAML by shape ---------------------------------------------------------------------


def test_a_servers_tool_records_are_not_tool_definitions() -> None:
    records = [
        {
            "id": "tool-0b6c9a2e-1f0d-4c55-9a7e-2d8f4e7b1a90",
            "name": "search_notes",
            "description": "Search notes by date, e.g. '2024-05-01T09:30:00Z'.",
            "tool_type": "core",
            "json_schema": {"name": "search_notes", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    assert findings(json.dumps(records, indent=2), "tests/data/tools_dump.json") == []
    # The same descriptions as tools in a provider's format are linted.
    tools = [{"name": "search_notes", "description": records[0]["description"], "input_schema": {}}]
    assert [c for c, _, _ in findings(json.dumps(tools), "tools.json")] == ["CW101"]


def test_a_saved_agent_state_is_not_a_request_body() -> None:
    state = {
        "model": "gpt-4",
        "system": "You are a companion. ### Memory [last modified: 2024-01-11 12:43:23 PM] " + LONG * 30,
        "messages": [{"role": "system", "content": "You are a companion."}],
        "messages_total": 20,
        "memory": {"persona": "curious"},
    }
    assert findings(json.dumps(state), "agent_state/2024-01-11.json") == []
    # Without the foreign keys it is a request: the literal clock is reported.
    body = {k: v for k, v in state.items() if k in ("model", "system", "messages")}
    assert "CW101" in [c for c, _, _ in findings(json.dumps(body), "request.json")]


def test_breakpoint_rules_apply_to_anthropic_models_only() -> None:
    body = {
        "model": "gpt-4o",
        "system": LONG * 40,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    assert "CW305" not in [c for c, _, _ in findings(json.dumps(body), "request.json")]
    claude = {**body, "model": "claude-sonnet-4-5", "max_tokens": 100}
    assert "CW305" in [c for c, _, _ in findings(json.dumps(claude), "request.json")]


def test_a_tool_file_in_its_written_order_is_a_note() -> None:
    tool = {
        "name": "check_order",
        "description": "Check an order.",
        "parameters": {"type": "object", "properties": {"order_number": {}, "customer_name": {}}},
    }
    assert findings(json.dumps(tool), "expected_schema.json") == [("CW204", 1, "info")]
    yaml_tools = "- name: check_order\n  parameters:\n    properties:\n      zip: {}\n      city: {}\n"
    assert findings(yaml_tools, "tools.yaml") == [("CW204", 3, "info")]

    # Provider tools inside some other configuration are still read: they are sent.
    config = {"agent": "support", "tools": [tool]}
    assert findings(json.dumps(config), "agent.json") == [("CW204", 1, "info")]


# --- templates rendered as a user turn --------------------------------------------------------

TURN = "Project: {{ project_name }}\nQuestion: {{ question }}\n" + LONG * 12


def test_a_template_beside_a_system_template_is_a_user_turn(tmp_path: Path) -> None:
    folder = tmp_path / "prompts" / "developer"
    folder.mkdir(parents=True)
    (folder / "system.prompt").write_text("You are a developer.\n")
    turn = folder / "filter_files.prompt"
    turn.write_text(TURN)
    alone = tmp_path / "filter_files.prompt"
    alone.write_text(TURN)
    prefix = {"CW301", "CW401", "CW402"}
    assert [f.code for f in lint_source(str(turn), TURN) if f.code in prefix] == []
    assert "CW301" in [f.code for f in lint_source(str(alone), TURN)]  # no system template beside it


def test_a_template_named_for_the_user_turn_is_not_judged_as_a_prefix(tmp_path: Path) -> None:
    named = tmp_path / "user_prompt.j2"
    part = tmp_path / "user_profile.j2"  # a part the instructions may include
    assert [f.code for f in lint_source(str(named), TURN) if f.code == "CW301"] == []
    assert "CW301" in [f.code for f in lint_source(str(part), TURN)]
