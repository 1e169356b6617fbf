"""Every rule file is valid, documented, and its examples behave: fail examples produce the rule's
code (on the marked line), pass examples do not, and `fixed` examples show the fix's output."""

from __future__ import annotations

from pathlib import Path

import pytest
from cachewarden.linter.context import Settings
from cachewarden.linter.engine import Options, lint_source
from cachewarden.linter.fixes import apply_fixes
from cachewarden.linter.rulebook import DOC_SECTIONS, Example, Rule, load_rules

RULES = load_rules()
CASES = [
    pytest.param(rule, example, kind, id=f"{code}-{kind}-{i}")
    for code, rule in RULES.items()
    for kind, examples in (("fail", rule.fail), ("pass", rule.passing))
    for i, example in enumerate(examples)
]


def _lint(rule: Rule, example: Example, folder: Path) -> list[str]:
    options = Options(settings=Settings(model=example.model), lenient=True)
    path = example.file
    if example.beside:  # a module that imports from others: the files are written out and read
        path = str(folder / example.file)
        for name, source in (*example.beside, (example.file, example.source)):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(source, encoding="utf-8")
    return [f"{f.code}:{f.line}" for f in lint_source(path, example.source, options)]


@pytest.mark.parametrize(("rule", "example", "kind"), CASES)
def test_rule_example(rule: Rule, example: Example, kind: str, tmp_path: Path) -> None:
    found = [c for c in _lint(rule, example, tmp_path) if c.split(":")[0] == rule.code]
    if kind == "pass":
        assert found == [], f"{rule.code} must not fire on:\n{example.source}"
        return
    assert found, f"{rule.code} must fire on:\n{example.source}"
    if example.line is not None:
        assert f"{rule.code}:{example.line}" in found, found


@pytest.mark.parametrize("rule", list(RULES.values()), ids=list(RULES))
def test_rule_is_documented(rule: Rule) -> None:
    for section in DOC_SECTIONS:
        assert section in rule.docs
    assert rule.fail and rule.passing
    assert rule.name in {r.name for r in RULES.values()}


@pytest.mark.parametrize(
    ("rule", "example"),
    [pytest.param(r, e, id=f"{c}-{i}") for c, r in RULES.items() for i, e in enumerate(r.fail) if e.fixed],
)
def test_rule_fix(rule: Rule, example: Example) -> None:
    options = Options(settings=Settings(model=example.model), lenient=True)
    findings = [f for f in lint_source(example.file, example.source, options) if f.code == rule.code]
    fixed, _ = apply_fixes(example.source, findings, unsafe=True)
    assert fixed == example.fixed


def test_codes_grouped_by_category() -> None:
    for code, rule in RULES.items():
        assert rule.category != "other", code


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ({"reason": "slow"}, "reason"),
        ({"code": "CW1"}, "code"),
        ({"name": "Bad_Name"}, "kebab-case"),
        ({"docs": "## What it does\nonly"}, "docs lack"),
        ({"extra": 1}, "unknown keys"),
        ({"fix": {"applicability": "maybe", "title": "x"}}, "applicability"),
    ],
)
def test_bad_rule_files_are_rejected(patch: dict[str, object], problem: str) -> None:
    import dataclasses

    import yaml
    from cachewarden.linter.rulebook import load_text
    from cachewarden.proxy.engine.errors import ConfigError

    rule = RULES["CW101"]
    raw = yaml.safe_load(
        __import__("importlib.resources")
        .resources.files("cachewarden.rules")
        .joinpath("CW101_timestamp-in-cached-prefix.yaml")
        .read_text()
    )
    raw.update(patch)
    with pytest.raises(ConfigError, match=problem):
        load_text(yaml.safe_dump(raw), "CW101_timestamp-in-cached-prefix.yaml")
    assert dataclasses.is_dataclass(rule)
