"""Python sources that build prompts: where text is followed, what is a finding, and what is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cachewarden.linter.engine import lint_source
from lint_support import LONG, Run, as_json

POLICY = f'POLICY = """{LONG}"""\n'


def codes(source: str, path: str = "agent.py") -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in lint_source(path, source)]


def test_follows_names_concatenation_and_augmented_assignment() -> None:
    source = (
        "from datetime import datetime\n"
        + POLICY
        + "def build_prompt():\n"
        + "    now = datetime.now()\n"
        + "    prompt = 'Now: ' + now.isoformat()\n"
        + "    prompt += POLICY\n"
        + "    return prompt\n"
    )
    assert codes(source) == [("CW101", 8)]


def test_follows_a_module_function_into_an_sdk_call() -> None:
    source = (
        "import time\n"
        + POLICY
        + "def header():\n"
        + "    return f'Epoch {time.time()}. ' + POLICY\n"
        + "def ask(client, q):\n"
        + "    return client.responses.create(model='gpt-4o', instructions=header(), input=q)\n"
    )
    assert codes(source) == [("CW101", 7)]


def test_percent_and_format_fields_take_their_arguments() -> None:
    source = (
        "import uuid\n"
        + POLICY
        + "SYSTEM_PROMPT = 'Session %s. ' % uuid.uuid4() + POLICY\n"
        + "INSTRUCTIONS = 'Trace {trace}. {body}'.format(trace=request_id, body=POLICY)\n"
    )
    assert codes(source) == [("CW102", 6), ("CW102", 7)]


def test_strftime_format_spec_and_aliases() -> None:
    source = (
        "from datetime import date\n" + POLICY + "d = date.today()\nSYSTEM_PROMPT = f'{d:%d %B}. ' + POLICY\n"
    )
    ((code, line),) = codes(source)
    assert (code, line) == ("CW101", 7)


def test_langchain_placeholders_and_system_message() -> None:
    source = (
        POLICY
        + "prompt = ChatPromptTemplate.from_messages([\n"
        + "    ('system', 'Today is {current_date}. ' + POLICY),\n"
        + "    ('human', '{question}'),\n"
        + "])\n"
        + "msg = SystemMessage(content=f'You help {user.email}.')\n"
    )
    assert codes(source) == [("CW101", 6), ("CW302", 9)]


def test_not_prompts_and_tails_are_not_findings() -> None:
    source = (
        '"""Module docstring written 2025-03-04T10:15:30Z."""\n'
        "import json, logging, uuid\n"
        "from datetime import datetime\n" + POLICY + "log = logging.getLogger(__name__)\n"
        "def ask(client, question, settings):\n"
        "    log.info(f'{datetime.now()} {uuid.uuid4()} {json.dumps(settings)}')\n"
        "    system = POLICY + f'Today is {datetime.now():%Y-%m-%d}.'\n"
        "    messages = [{'role': 'system', 'content': system},\n"
        "                {'role': 'user', 'content': f'{uuid.uuid4()} {question}'}]\n"
        "    return client.chat.completions.create(model='gpt-4o', messages=messages,\n"
        "                                          tools=[SEARCH, BOOK])\n"
        "def cache_key(x):\n"
        "    return f'{datetime.now()}-{x}'\n"
    )
    assert codes(source) == []


def test_unordered_iteration_fixes(project: Path, run: Run) -> None:
    (project / "p.py").write_text(
        "import json\n"
        "def system_prompt(tags, settings):\n"
        "    return ('Tags: ' + ', '.join(set(tags)) + '. Settings: ' + json.dumps(settings)\n"
        "            + '. Use only these tags and this schema.')\n"
    )
    code, out, _ = run("--format", "json", "p.py")
    found = {f["code"]: f for f in as_json(out)["findings"]}
    assert code == 1 and set(found) == {"CW201", "CW202"}
    assert found["CW201"]["fix"]["applicability"] == "safe"
    assert run("--fix", "p.py")[0] == 1  # the set still needs --unsafe-fixes
    assert "json.dumps(settings, sort_keys=True)" in (project / "p.py").read_text()
    assert run("--fix", "--unsafe-fixes", "p.py")[0] == 0
    assert "', '.join(sorted(set(tags)))" in (project / "p.py").read_text()


def test_columns_count_characters_not_bytes() -> None:
    source = (
        "from datetime import datetime\n"
        + POLICY
        + "SYSTEM_PROMPT = f'Jour é: {datetime.now()}. ' + POLICY\n"
    )
    (finding,) = lint_source("a.py", source)
    assert finding.column == source.splitlines()[5].index("datetime.now()") + 1


def test_noqa_and_syntax_errors(project: Path, run: Run) -> None:
    (project / "ok.py").write_text(
        "import uuid\n" + POLICY + "SYSTEM_PROMPT = f'{uuid.uuid4()} ' + POLICY  # noqa: CW102\n"
    )
    (project / "README.md").write_text("nothing here\n")
    code, out, _ = run("--format", "json", ".")
    assert code == 0 and as_json(out)["summary"]["files"] == 2
    (project / "bad.py").write_text("SYSTEM_PROMPT = (:\n")
    code, _, err = run("bad.py")
    assert (
        code == 2
        and err.startswith("cachewarden: error: bad.py:1: Python syntax error")
        and err.count("\n") == 1
    )


@pytest.mark.parametrize(
    "call",
    [
        "client.messages.create(model='claude-sonnet-4-5', system=SYSTEM, messages=m)",
        "client.beta.messages.stream(model='claude-sonnet-4-5', system=[{'type': 'text', 'text': SYSTEM}])",
        "litellm.completion(model='gpt-4o', messages=[{'role': 'developer', 'content': SYSTEM}])",
        "Agent(name='a', instructions=SYSTEM)",
    ],
)
def test_sinks(call: str) -> None:
    source = (
        "import secrets\n" + POLICY + f"SYSTEM = f'Nonce {{secrets.token_hex(8)}}. ' + POLICY\nx = {call}\n"
    )
    assert ("CW102", 6) in codes(source)


def test_sarif_and_json_for_python(project: Path, run: Run) -> None:
    (project / "a.py").write_text(
        "import random\n" + POLICY + "SYSTEM_PROMPT = f'{random.random()} ' + POLICY\n"
    )
    _, out, _ = run("--format", "sarif", "a.py")
    result = json.loads(out)["runs"][0]["results"][0]
    assert result["ruleId"] == "CW103"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "a.py"


def test_frequency_sets_message_and_severity() -> None:
    source = (
        "import time\nfrom datetime import date, datetime\n"
        + POLICY
        + "SYSTEM_PROMPT = f'Today is {date.today()}. ' + POLICY\n"
        + "STARTED = datetime.now()\n"
        + "class Agent:\n"
        + "    def __init__(self):\n"
        + "        self.instructions = f'Built {datetime.now():%H:%M}. ' + POLICY\n"
        + "def system_prompt(messages):\n"
        + "    return f\"{time.strftime('%H:%M')} {len(messages)} {STARTED:%S}. \" + POLICY\n"
        + "def daily_prompt():\n"
        + "    return f'Date: {datetime.now():%Y-%m-%d}. ' + POLICY\n"
    )
    found = [
        (f.code, f.line, f.severity, f.message.split(" and comes")[0]) for f in lint_source("a.py", source)
    ]
    assert found == [
        ("CW101", 7, "info", "`date.today()` changes once per process (computed at import)"),
        ("CW101", 11, "info", "`datetime.now()` changes once per object (computed when it is built)"),
        ("CW101", 13, "error", "`time.strftime('%H:%M')` changes every minute"),
        ("CW102", 13, "error", "`len(messages)` is new on every request"),
        ("CW101", 13, "info", "`STARTED` changes once per process (computed at import)"),
        ("CW101", 15, "info", "`datetime.now()` changes every day"),
    ]


def test_template_clock_graded_by_its_format() -> None:
    (finding,) = lint_source("s.j2", "Date: {{ now().strftime('%Y-%m-%d') }}.\n" + LONG)
    assert (finding.severity, "every day" in finding.message) == ("info", True)
    (finding,) = lint_source("s.j2", "Time: {{ now().strftime('%H:%M') }}.\n" + LONG)
    assert (finding.severity, "every minute" in finding.message) == ("error", True)


def test_render_follows_keywords_into_the_template(project: Path, run: Run) -> None:
    (project / "prompts").mkdir()
    (project / "prompts" / "system.j2").write_text("Now: {{ now }}\n" + LONG + "Ticket {{ ticket }}\n")
    (project / "app").mkdir()
    (project / "app" / "agent.py").write_text(
        "import uuid\nfrom datetime import datetime\nfrom jinja2 import Environment\n"
        "env = Environment()\n"
        "def build():\n"
        "    tpl = env.get_template('system.j2')\n"
        "    return tpl.render(now=datetime.now(), ticket=uuid.uuid4())\n"
        "def inline():\n"
        "    return Template('Id {{ rid }}. ' + 'x' * 3).render(rid=uuid.uuid4())\n"
    )
    _code, out, _ = run("--format", "json", "app/agent.py")
    ((finding),) = as_json(out)["findings"]  # `ticket` is at the very end of the template: fine
    assert (finding["code"], finding["line"], finding["column"]) == ("CW101", 7, 27)
    assert finding["message"].startswith("`datetime.now() (as now in prompts/system.j2:1)` changes on every")


def test_precision_on_patterns_seen_in_real_repositories() -> None:
    source = (
        "import json\nfrom datetime import date\n"
        + POLICY
        + "def system_prompt(client, memory, order, user, messages):\n"
        + "    schema = UserDetail.model_json_schema()\n"
        + "    return (f'Schema {json.dumps(schema)} for {UserDetail} via {client}. '\n"
        + "            f'Created {memory.created.strftime(\"%H:%M\")}. Today {date.today()}. ' + POLICY)\n"
    )
    # `date.today()` changes once a day: an info note, and no CW401 / CW402 about the prefix before it.
    assert [(f.code, f.severity) for f in lint_source("a.py", source)] == [("CW101", "info")]
    per_user = "def system_prompt(user):\n    return f'You help {user.email}.'\n"
    assert [f.code for f in lint_source("a.py", per_user)] == ["CW302"]


def test_schemas_serialise_in_a_fixed_order() -> None:
    source = (
        "import json\n"
        "def system_prompt(model, data):\n"
        "    model_schema = build(model)\n"
        "    return ('Schema: ' + json.dumps(model_schema, indent=2) + ' Data: ' + json.dumps(data)\n"
        "            + ' Answer with JSON that follows the schema above, and nothing else.')\n"
    )
    assert [(f.code, f.column) for f in lint_source("a.py", source)] == [("CW201", 75)]


def test_json_of_data_from_elsewhere_is_a_warning_else_a_note() -> None:
    source = (
        "import json\n"
        "def system_prompt(resp, settings, extra):\n"
        "    data = resp.json()\n"
        "    return ('Data: ' + json.dumps(data) + ' Settings: ' + json.dumps(settings)\n"
        "            + ' Merged: ' + json.dumps({**settings, **extra}) + ' Answer from the data only.')\n"
    )
    assert [(f.code, f.severity) for f in lint_source("a.py", source)] == [
        ("CW201", "warning"),
        ("CW201", "info"),
        ("CW201", "warning"),
    ]


def test_values_made_from_module_constants_are_static_text() -> None:
    source = (
        "from datetime import datetime\n"
        "EXAMPLES = ['a', 'b']\n"
        "@agent.system_prompt\n"
        "def prompt():\n"
        "    return f'Now {datetime.now()}\\n{format_as_xml(EXAMPLES)}'\n"
    )
    assert [f.code for f in lint_source("a.py", source)] == ["CW101"]
    assert lint_source("a.py", source.replace("format_as_xml(EXAMPLES)", "format_as_xml(examples)")) == []


def test_a_request_body_written_as_a_dict_is_a_site() -> None:
    source = (
        "import uuid\n"
        + POLICY
        + "def ask(client, text):\n"
        + "    kwargs = {'model': 'claude-sonnet-4-5', 'system': f'Run {uuid.uuid4()}. ' + POLICY}\n"
        + "    return client.messages.create(**kwargs)\n"
    )
    assert [f.code for f in lint_source("a.py", source)] == ["CW102"]


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source, encoding="utf-8")


ASK = (
    "def ask(client, q):\n"
    "    return client.messages.create(model='claude-sonnet-4-5', max_tokens=9, system={system},\n"
    "        messages=[{{'role': 'user', 'content': q}}])\n"
)


def test_calls_into_other_modules_of_the_tree(project: Path, run: Run) -> None:
    clock = "from datetime import datetime\n" + POLICY + "def build_system():\n"
    _tree(
        project,
        {
            "src/app/__init__.py": "from .text import tail_clock\n",  # a re-export
            "src/app/prompts.py": clock + "    return f'Time {datetime.now():%H:%M}. ' + POLICY\n",
            "src/app/text.py": "import time\ndef tail_clock():\n    return f'(at {time.time()})'\n",
            "src/app/loop_a.py": "from .loop_b import b\ndef a():\n    return b()\n",
            "src/app/loop_b.py": "from .loop_a import a\ndef b():\n    return a()\n",
            "src/app/agents/relative.py": "from ..prompts import build_system\n"
            + ASK.format(system="build_system()"),
            "src/app/agents/absolute.py": "from app import prompts\n"
            + ASK.format(system="prompts.build_system()"),
            "src/app/agents/reexport.py": "from app import tail_clock\n"
            + POLICY
            + ASK.format(system="tail_clock() + POLICY"),
            # At the very end of the prompt, a cycle of imports, a module that is not in the tree.
            "src/app/agents/clean.py": "from app import tail_clock\nfrom ..loop_a import a\n"
            + "from openai import x\n"
            + POLICY
            + ASK.format(system="POLICY + a() + x() + tail_clock()"),
            # A parameter named like the imported function is what the caller passes.
            "src/app/agents/shadowed.py": "from ..prompts import build_system\n"
            + "def ask(client, q, build_system):\n"
            + "    return client.messages.create(model='claude-sonnet-4-5', max_tokens=9,\n"
            + "        system=build_system(), messages=[{'role': 'user', 'content': q}])\n",
        },
    )
    _code, out, _ = run("--format", "json", "src")
    found = {(f["path"], f["line"], f["code"]): f["message"] for f in as_json(out)["findings"]}
    assert sorted(found) == [
        ("src/app/agents/absolute.py", 3, "CW101"),
        ("src/app/agents/reexport.py", 7, "CW101"),
        ("src/app/agents/relative.py", 3, "CW101"),
    ]
    message = found[("src/app/agents/relative.py", 3, "CW101")]
    assert message.startswith("`build_system() → datetime.now() in prompts.py:7` changes every minute")
    assert "time.time() in text.py:3" in found[("src/app/agents/reexport.py", 7, "CW101")]


def test_a_date_named_value_is_graded_by_the_format_it_is_made_with() -> None:
    source = (
        "from datetime import datetime, timezone\n"
        + POLICY
        + "def judge_system_prompt(task):\n"
        + "    current_date = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')\n"
        + "    today = datetime.now().strftime('%Y-%m-%d')\n"
        + "    return f'Now {current_date}. ' + POLICY + f' Day {today}. ' + POLICY\n"
    )
    found = [
        (f.code, f.line, f.severity, f.message.split(" and ")[0]) for f in lint_source("judge.py", source)
    ]
    assert found == [
        ("CW101", 9, "error", "`current_date` changes every minute"),
        ("CW101", 9, "info", "`today` changes every day"),
    ]


def test_semantic_kernel_and_handlebars_templates_are_read_by_their_fields() -> None:
    source = (
        "TODAY IS: {{year}}-{{month}}-{{day}} at {{time.Now}}\n"
        + LONG
        + "{{#each items}}{{this}}{{/each}}\nUser {{$firstName}}: {{recall $input}}\n"
    )
    found = [(f.code, f.severity, f.message.split(" and ")[0]) for f in lint_source("skprompt.txt", source)]
    assert [f for f in found if f[0] == "CW101"] == [
        ("CW101", "info", "`year` changes every year"),
        ("CW101", "info", "`month` changes every month"),
        ("CW101", "info", "`day` changes every day"),
        ("CW101", "error", "`time.Now` changes on every request"),
    ]
    # Markdown with the same fields is documentation about such a template: read as text.
    assert lint_source("notes.md", source) == []


def test_per_user_data_is_graded_by_the_static_text_after_it() -> None:
    instructions = LONG * 9  # some 550 tokens
    early = f"You help {{{{ user.email }}}}.\n{instructions}"
    late = f"{instructions}You help {{{{ user.email }}}}. Use their name.\n"
    found = {
        name: [(f.code, f.severity) for f in lint_source(name, text) if f.code == "CW302"]
        for name, text in (("early/system.j2", early), ("late/system.j2", late))
    }
    assert found == {"early/system.j2": [("CW302", "warning")], "late/system.j2": [("CW302", "info")]}
