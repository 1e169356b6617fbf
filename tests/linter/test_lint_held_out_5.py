"""Patterns learned from the fifth held-out set, each as a minimal fixture written here (not copied).

- a prompt-named local sent only as the conversation's newest user turn (an agent's
  ``run(task)``, a ``{"role": "user"}`` message, a chain's ``{"input": ...}``) is the request's own
  input: a value in it busts only a static block after it that could be cached on its own;
- ``len(chunks)`` is as new as the chunks it counts; ``len(messages)`` counts the turns;
- a clock read by a helper called while a module constant is built is frozen at import, in this
  module or in another one of the package;
- a system message that the conversation's history follows (appended in a loop, extended, listed
  before ``*history``) is followed by cached text: a clock at its very end still busts it.
"""

from __future__ import annotations

import json
from pathlib import Path

from cachewarden.linter.cli import main
from cachewarden.linter.engine import lint_source
from lint_support import LONG


def found(source: str, path: str = "agent.py") -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.severity) for f in lint_source(path, source)]


# --- the newest user turn -----------------------------------------------------------------------

AGENT_TASK = '''from swarms import Agent

controller = Agent(agent_name="controller", system_prompt="You steer a multi-phase workflow.")


def next_phase(phase, history):
    decision_prompt = f"""Decide the strategy for phase {phase}.
    Completed phases: {len(history)}
    Options: explore, analyse, build, validate, finish. Explain the choice in two sentences.
    """
    return controller.run(decision_prompt)
'''


def test_a_prompt_given_to_an_agents_run_is_its_newest_user_turn() -> None:
    assert found(AGENT_TASK) == []
    # The same text bound to a name and sent as the system prompt is a cached prefix.
    as_system = AGENT_TASK.replace(
        "return controller.run(decision_prompt)", "return Agent(system_prompt=decision_prompt)"
    )
    assert ("CW102", 8, "error") in found(as_system)


def test_a_prompt_used_anywhere_else_too_is_still_read_as_a_prompt() -> None:
    both = AGENT_TASK.replace(
        "    return controller.run(decision_prompt)\n",
        "    log(decision_prompt)\n    return controller.run(decision_prompt)\n",
    )
    assert ("CW102", 8, "error") in found(both)


USER_MESSAGE = '''import time

from openai import OpenAI

client = OpenAI()


def summarise(text):
    prompt = f"""Summary written at {time.strftime("%H:%M:%S")}.
{text}
BODY"""
    return client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": prompt}])
'''


def test_a_clock_in_a_user_message_counts_only_before_a_block_the_cache_could_serve() -> None:
    short = USER_MESSAGE.replace("BODY", "Keep it to ten bullet points and drop small talk.")
    assert found(short) == []
    # Static text after it past gpt-4o's 1,024-token minimum: moving the clock would let it be cached.
    long = USER_MESSAGE.replace("BODY", LONG * 30)
    assert [(code, line) for code, line, _ in found(long)] == [("CW101", 9)]


def test_a_chains_input_mapping_is_the_user_turn() -> None:
    source = (
        "import datetime\n\n\n"
        "def ask(chain, question):\n"
        '    query_prompt = f"Asked at {datetime.datetime.now()}: {question}. Answer in one line, '
        'cite the source document and say when you are unsure."\n'
        '    return chain.invoke({"input": query_prompt})\n'
    )
    assert found(source) == []


# --- counters -----------------------------------------------------------------------------------


def test_the_length_of_this_requests_chunks_is_not_a_turn_counter() -> None:
    source = (
        "def part_prompts(chunks, summary):\n"
        "    prompts = []\n"
        "    for index, chunk in enumerate(chunks):\n"
        '        system_prompt = f"Part {index + 1} of {len(chunks)}. " + POLICY\n'
        "        prompts.append(system_prompt)\n"
        "    return prompts\n\n\n"
        f"POLICY = {LONG!r}\n"
    )
    assert [f for f in found(source) if f[0] == "CW102"] == []
    counted = source.replace("len(chunks)", "len(messages)").replace(
        "(chunks, summary)", "(chunks, messages)"
    )
    assert ("CW102", 4, "error") in found(counted)


# --- frozen at import ---------------------------------------------------------------------------

STAMP = """from datetime import datetime


def stamp():
    now = datetime.now()
    return f"Current time: {now.strftime('%A, %B %d, %Y %H:%M')}\\n"
"""


def test_a_clock_helper_called_while_a_module_constant_is_built_is_frozen_at_import() -> None:
    constant = STAMP + f'\n\nAGENT_SYSTEM_PROMPT = f"""Time: {{stamp()}}\n{LONG}"""\n'
    assert [(c, s) for c, _, s in found(constant) if c == "CW101"] == [("CW101", "info")]
    # Called per request, the same helper's minute clock is an error.
    per_request = STAMP + f'\n\ndef build_system_prompt():\n    return f"""Time: {{stamp()}}\n{LONG}"""\n'
    assert ("CW101", "error") in [(c, s) for c, _, s in found(per_request)]


def test_a_helper_of_another_module_called_at_import_is_frozen_too(tmp_path: Path) -> None:
    package = tmp_path / "agents"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "clock.py").write_text(STAMP, encoding="utf-8")
    prompts = package / "prompts.py"
    prompts.write_text(
        f'from agents.clock import stamp\n\nAGENT_SYSTEM_PROMPT = f"""Time: {{stamp()}}\n{LONG}"""\n',
        encoding="utf-8",
    )
    hits = [(f.code, f.severity) for f in lint_source(str(prompts), prompts.read_text(encoding="utf-8"))]
    assert ("CW101", "info") in hits and ("CW101", "error") not in hits


# --- a system message the history follows ---------------------------------------------------------

LOOP = """import time


def build_messages(system_prompt, history, next_step):
    messages = [{"role": "system", "content": system_prompt}]
    messages.append({"role": "system", "content": f"The time now is {time.strftime('%c')}"})
    AFTER
    messages.append({"role": "user", "content": next_step})
    return messages
"""


def test_a_clock_in_a_system_message_before_the_appended_history_busts_the_history() -> None:
    history = (
        "for turn in history:\n        messages.append({'role': turn['role'], 'content': turn['content']})"
    )
    assert [(c, line, s) for c, line, s in found(LOOP.replace("AFTER", history))] == [("CW101", 6, "error")]
    assert ("CW101", 6, "error") in found(LOOP.replace("AFTER", "messages.extend(history)"))
    # Only this request's own message after it: nothing cached follows the clock.
    assert found(LOOP.replace("AFTER", "pass")) == []


def test_a_system_message_listed_before_the_history_busts_it() -> None:
    source = (
        "import time\n\n\n"
        "def build(history, question):\n"
        "    return [\n"
        '        {"role": "system", "content": f"Now: {time.time()}"},\n'
        "        *history,\n"
        '        {"role": "user", "content": question},\n'
        "    ]\n"
    )
    assert ("CW101", 6, "error") in found(source)


# --- str.format prompt files ----------------------------------------------------------------------


def test_a_text_prompt_with_format_fields_is_read_as_a_template() -> None:
    text = "## Context\n{context}\n\nToday is {date}.\n\n## Rules\n" + LONG * 30 + "\nInput: {user_input}\n"
    hits = {(code, line, severity) for code, line, severity in found(text, "prompts/Think About It.txt")}
    assert ("CW301", 2, "warning") in hits and ("CW101", 4, "info") in hits
    # One braced word in prose is not a template; nor are a Markdown page's routes.
    assert found("Replace {name} with yours.\n" + LONG * 30, "prompts/intro.txt") == []
    routes = "GET /tasks/{task_id}\nGET /sessions/{session_id}/tasks\n" + LONG * 30
    assert [f for f in found(routes, "prompts/api.md") if f[2] != "info"] == []


def test_a_json_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    system = {"role": "system", "content": "Now: 2026-05-01T10:00:00Z. Be brief and cite the policy."}
    body = "\ufeff" + json.dumps({"model": "gpt-4o", "messages": [system]})
    assert [(code, line) for code, line, _ in found(body, "request.json")] == [("CW101", 1)]
    # Named on the command line, a valid file with a byte order mark is linted, not exit 2.
    settings = tmp_path / "launchSettings.json"
    settings.write_text('\ufeff{"profiles": {"web": {"commandName": "Project"}}}\n', encoding="utf-8")
    assert main([str(settings)]) == 0


# --- tool lists from constants (set 6) ---------------------------------------------------------


def _tools_package(tmp_path: Path, constant: str, iterated: str) -> list[tuple[str, str]]:
    package = tmp_path / "finder"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "tool_defs.py").write_text(f"SEARCH_TOOLS = {constant}\n", encoding="utf-8")
    source = (
        "from openai import OpenAI\n\nfrom .tool_defs import SEARCH_TOOLS\n\n\n"
        "class Finder:\n"
        "    def get_tools(self):\n        return SEARCH_TOOLS\n\n"
        "    def run(self, client, query):\n"
        "        messages = [{'role': 'user', 'content': query}]\n"
        "        return client.chat.completions.create(model='gpt-4o', messages=messages,\n"
        f"            tools=[{{'type': 'function', 'function': t}} for t in {iterated}])\n"
    )
    (package / "agent.py").write_text(source, encoding="utf-8")
    return [(f.code, f.severity) for f in lint_source(str(package / "agent.py"), source)]


def test_tools_from_a_list_constant_of_another_module_keep_their_order(tmp_path: Path) -> None:
    tools = '[{"name": "grep", "parameters": {}}, {"name": "read", "parameters": {}}]'
    assert ("CW203", "warning") not in _tools_package(tmp_path / "a", tools, "SEARCH_TOOLS")
    assert ("CW203", "warning") not in _tools_package(tmp_path / "b", tools, "self.get_tools()")


def test_tools_from_a_set_constant_are_still_unordered(tmp_path: Path) -> None:
    tools = '{"grep", "read"}'
    assert ("CW203", "warning") in _tools_package(tmp_path / "c", tools, "SEARCH_TOOLS")
