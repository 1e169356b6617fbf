"""Patterns learned from the fourth held-out set, each as a minimal fixture written here (not copied).

- an agent config in YAML keeps `system_template` and `instance_template` in one mapping: the
  instance template is the first user turn of a multi-step run, sent once, then cached history;
- `{% if %}` / `{% else %}` branches are never rendered together: a clock at the end of one branch
  is not before the static text of the other;
- `{{ "three" if is_search else "two" }}` picks one of two static texts: its test is not printed;
- `json.dumps(json.loads(text), indent=2)` pretty-prints text and keeps its key order;
- a whole request written as one list (system message, then one user message) re-sends the user
  message's static text on every call, so that text is read as prompt text;
- CW301 asks to move static text before a per-request value: when all of it would still be
  below the model's minimum cacheable prefix, the move buys nothing (a note);
- a Python file that starts with a UTF-8 byte order mark is valid Python.
"""

from __future__ import annotations

from cachewarden.linter.engine import lint_source
from lint_support import LONG


def found(source: str, path: str) -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.severity) for f in lint_source(path, source)]


def codes(source: str, path: str) -> set[str]:
    return {f.code for f in lint_source(path, source)}


def _indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


# --- YAML agent configs -----------------------------------------------------------------------


def test_an_instance_template_beside_a_system_template_in_one_mapping_is_a_user_turn() -> None:
    instance = "Please solve this issue: {{task}}\n" + LONG * 12
    config = (
        "agent:\n"
        "  system_template: |\n"
        "    You are a helpful assistant that can run shell commands.\n"
        "  instance_template: |\n" + _indented(instance, 4)
    )
    assert codes(config, "config/default.yaml") & {"CW301", "CW401", "CW402"} == set()
    alone = "agent:\n  instance_template: |\n" + _indented(instance, 4)
    assert "CW301" in codes(alone, "config/default.yaml")  # no system template beside it


# --- templates --------------------------------------------------------------------------------


def test_a_clock_ending_one_branch_is_not_before_the_other_branchs_text() -> None:
    branches = (
        "{% if answer_only %}\nAnswer the question from the knowledge base.\n"
        "Current datetime: {{ current_datetime }}\n"
        "{% else %}\n" + LONG * 24 + "Current datetime: {{ current_datetime }}\n{% endif %}\n"
    )
    assert [f for f in found(branches, "agent.j2") if f[0] in ("CW101", "CW401")] == []
    # The same clock before text that is rendered with it is still reported.
    sequential = "Current datetime: {{ current_datetime }}\n{% if answer_only %}Be brief.{% endif %}\n" + LONG
    assert ("CW101", 1, "error") in found(sequential, "agent.j2")


def test_the_test_of_an_inline_if_picks_static_text_and_is_not_per_request() -> None:
    picked = 'You have {{ "three" if is_search else "two" }} goals:\n' + LONG * 24
    assert "CW301" not in codes(picked, "choose.j2")
    printed = "You have these goals: {{ search_goals }}\n" + LONG * 24
    assert ("CW301", 1, "warning") in found(printed, "choose.j2")


def test_static_text_that_stays_below_the_minimum_when_moved_is_a_note() -> None:
    short = "Question: {{ question }}\n" + LONG * 12  # ~600 tokens: never cached by gpt-4o
    long = "Question: {{ question }}\n" + LONG * 24  # ~1,200 tokens: cached once moved
    assert ("CW301", 1, "info") in found(short, "answer.j2")
    assert ("CW301", 1, "warning") in found(long, "answer.j2")


# --- Python -----------------------------------------------------------------------------------


def test_json_text_pretty_printed_keeps_its_order_and_a_response_does_not() -> None:
    reformatted = (
        "import json\n\n\n"
        "def context_for_prompt(raw):\n"
        "    payload = json.loads(raw)\n"
        "    return json.dumps(payload, indent=2)\n"
    )
    assert [f for f in found(reformatted, "context.py") if f[0] == "CW201"] == [("CW201", 6, "info")]
    inline = (
        "import json\n\n\ndef context_for_prompt(raw):\n    return json.dumps(json.loads(raw), indent=2)\n"
    )
    assert [f for f in found(inline, "context.py") if f[0] == "CW201"] == [("CW201", 5, "info")]
    response = "import json\n\n\ndef context_for_prompt(resp):\n    return json.dumps(resp.json())\n"
    assert [f for f in found(response, "context.py") if f[0] == "CW201"] == [("CW201", 5, "warning")]


def _extraction(messages: str) -> str:
    return f"from .models import Message\n\n\ndef extract_edges(context):\n    return [\n{messages}    ]\n"


_SYSTEM = '        Message(role="system", content="You extract facts from messages."),\n'
_USER = (
    '        Message(role="user", content=f"""<MESSAGE>\n'
    "{context['episode_content']}\n</MESSAGE>\n" + LONG * 24 + '"""),\n'
)


def test_the_user_message_of_a_whole_request_written_as_one_list_is_prompt_text() -> None:
    single = _extraction(_SYSTEM + _USER)
    assert ("CW301", 8, "warning") in found(single, "prompts/extract_edges.py")
    # With a turn of history in the list the user message is one more turn of a conversation.
    history = '        Message(role="assistant", content="Noted."),\n'
    assert "CW301" not in codes(_extraction(_SYSTEM + history + _USER), "prompts/extract_edges.py")
    # A user message alone is not a whole request either (what comes before it is not in sight).
    assert "CW301" not in codes(_extraction(_USER), "prompts/extract_edges.py")


def test_a_python_file_with_a_byte_order_mark_is_read() -> None:
    source = (
        "\ufefffrom datetime import datetime\n\n"
        f'SYSTEM_PROMPT = f"""Now: {{datetime.now():%H:%M}}.\n{LONG}"""\n'
    )
    hits = lint_source("graph.py", source)
    assert [(f.code, f.line, f.column) for f in hits] == [("CW101", 3, 27)]


# --- TOML prompt files ------------------------------------------------------------------------


def _toml(system: str, user: str) -> str:
    return f'[review_prompt]\nsystem="""{system}"""\n\nuser="""\n{user}"""\n'


def test_prompts_kept_in_toml_are_read_as_templates_at_their_place_in_the_file() -> None:
    user = "Today's Date: {{ date }}\nTitle: '{{ title }}'\n" + LONG * 24
    source = _toml("You are a reviewer of pull requests.\n" + LONG, user)
    hits = [
        (f.code, f.line, f.column, f.severity) for f in lint_source("settings/reviewer_prompts.toml", source)
    ]
    assert ("CW101", 9, 18, "info") in hits  # `date` changes every day: a note, at its place
    # `user` sits beside `system` in one table: a later turn, not judged as a cached prefix.
    assert [h for h in hits if h[0] in ("CW301", "CW401", "CW402")] == []
    system = "Question: {{ question }}\n" + LONG * 24
    assert ("CW301", 2, 24, "warning") in [
        (f.code, f.line, f.column, f.severity) for f in lint_source("p.toml", f'[p]\nsystem="""{system}"""\n')
    ]


def test_a_toml_string_with_escapes_maps_its_findings_to_where_it_starts() -> None:
    source = '[p]\nsystem = "Now: {{ now() }}\\n' + LONG.replace("\n", " ") + '"\n'
    assert [(f.code, f.line, f.column) for f in lint_source("p.toml", source)] == [("CW101", 2, 11)]
