"""Rules as data: load every ``rules/CW*.yaml`` file and validate it before any file is linted.

The validator is a small, strict schema in Python (unknown keys are errors, like a JSON Schema with
``additionalProperties: false``) so that a bad rule file stops the run with one line, exit 2.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, cast

import yaml
from cachewarden.proxy.engine.errors import ConfigError

from .findings import Applicability, Severity

REASONS = frozenset(
    {
        "cold",
        "expired",
        "model-changed",
        "params-changed",
        "tools-changed",
        "tools-reordered",
        "key-order",
        "whitespace",
        "timestamp",
        "unique-id",
        "system-changed",
        "history-edited",
        "history-truncated",
        "below-minimum",
        "no-breakpoint",
        "breakpoint-too-far",
        "content-changed",
        "unexplained",
    }
)
CATEGORIES = {"1": "volatile-values", "2": "serialization", "3": "structure", "4": "size", "5": "reading"}
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "Use instead:", "## Fix safety")
_CODE = re.compile(r"^CW[1-9]\d\d$")
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_REQUIRED = {"code", "name", "reason", "severity", "message", "rationale", "docs", "examples"}
_OPTIONAL = {"fix", "status", "since", "providers"}
_EXAMPLE_KEYS = {"file", "source", "line", "fixed", "model", "beside"}


@dataclass(frozen=True, slots=True)
class Example:
    file: str  # a file name whose extension picks the reader: prompt.j2, request.json
    source: str
    line: int | None = None  # the line the finding must start on (fail examples)
    fixed: str | None = None  # the source after all fixes of this rule are applied
    model: str | None = None
    # Other files of the same tree, by path relative to ``file`` (a module it imports from).
    beside: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RuleFix:
    applicability: Applicability
    title: str


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    name: str
    reason: str
    severity: Severity
    message: str
    rationale: str
    docs: str
    fail: tuple[Example, ...]
    passing: tuple[Example, ...]
    fix: RuleFix | None
    status: str = "stable"
    since: str = "0.1.0"

    @property
    def category(self) -> str:
        return CATEGORIES.get(self.code[2], "other")

    @property
    def summary(self) -> str:
        """The first sentence of the rationale: SARIF shortDescription, `rules` listing."""
        return self.rationale.strip().split(". ")[0].rstrip(".") + "."


# libyaml's safe loader where PyYAML has it: the 23 rule files are read on every run (pre-commit
# included), ~0.3 s with the pure-Python parser.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _fail(where: str, problem: str) -> ConfigError:
    return ConfigError(f"bad rule file {where}: {problem}")


def _str(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"'{key}' must be a non-empty string")
    return value


def _examples(raw: object, where: str, kind: str) -> tuple[Example, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(where, f"examples.{kind} must be a non-empty list")
    out = []
    for i, item in enumerate(raw):
        here = f"{where} examples.{kind}[{i}]"
        if not isinstance(item, Mapping):
            raise _fail(here, "must be a mapping with 'file' and 'source'")
        unknown = set(item) - _EXAMPLE_KEYS
        if unknown:
            raise _fail(here, f"unknown keys {sorted(unknown)}")
        line = item.get("line")
        if line is not None and (not isinstance(line, int) or line < 1):
            raise _fail(here, "'line' must be a positive integer")
        fixed = item.get("fixed")
        if fixed is not None and not isinstance(fixed, str):
            raise _fail(here, "'fixed' must be a string")
        model = item.get("model")
        beside = item.get("beside") or {}
        if not isinstance(beside, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in beside.items()
        ):
            raise _fail(here, "'beside' must map file names to their source")
        out.append(
            Example(
                _str(item, "file", here),
                _str(item, "source", here),
                line,
                fixed,
                model,
                tuple(beside.items()),
            )
        )
    return tuple(out)


def parse_rule(raw: object, where: str) -> Rule:
    """Validate one rule document; raises ConfigError naming the file and the first problem."""
    if not isinstance(raw, Mapping):
        raise _fail(where, "must be a mapping")
    missing, unknown = _REQUIRED - set(raw), set(raw) - _REQUIRED - _OPTIONAL
    if missing or unknown:
        raise _fail(
            where, f"missing keys {sorted(missing)}" if missing else f"unknown keys {sorted(unknown)}"
        )
    code, name = _str(raw, "code", where), _str(raw, "name", where)
    if not _CODE.match(code) or code[2] not in CATEGORIES:
        raise _fail(where, f"code {code!r} must be CW + 3 digits in a known category (1xx-5xx)")
    if not _NAME.match(name):
        raise _fail(where, f"name {name!r} must be kebab-case")
    if raw["reason"] not in REASONS:
        raise _fail(where, f"reason {raw['reason']!r} is not a reason code of DESIGN.md")
    if raw["severity"] not in ("error", "warning", "info"):
        raise _fail(where, "severity must be error, warning or info")
    docs = _str(raw, "docs", where)
    absent = [s for s in DOC_SECTIONS if s not in docs]
    if absent:
        raise _fail(where, f"docs lack the section(s) {', '.join(absent)}")
    examples = raw["examples"]
    if not isinstance(examples, Mapping) or set(examples) != {"fail", "pass"}:
        raise _fail(where, "examples must have exactly 'fail' and 'pass'")
    fix = raw.get("fix")
    rule_fix = None
    if fix is not None:
        if not isinstance(fix, Mapping) or set(fix) != {"applicability", "title"}:
            raise _fail(where, "fix must have exactly 'applicability' and 'title'")
        if fix["applicability"] not in ("safe", "unsafe", "display-only"):
            raise _fail(where, "fix.applicability must be safe, unsafe or display-only")
        rule_fix = RuleFix(fix["applicability"], _str(fix, "title", where))
    status = raw.get("status", "stable")
    if status not in ("preview", "stable", "deprecated"):
        raise _fail(where, "status must be preview, stable or deprecated")
    return Rule(
        code=code,
        name=name,
        reason=raw["reason"],
        severity=cast(Severity, raw["severity"]),
        message=_str(raw, "message", where).strip(),
        rationale=_str(raw, "rationale", where).strip(),
        docs=docs.strip(),
        fail=_examples(examples["fail"], where, "fail"),
        passing=_examples(examples["pass"], where, "pass"),
        fix=rule_fix,
        status=status,
        since=str(raw.get("since", "0.1.0")),
    )


def load_text(text: str, where: str) -> Rule:
    try:
        raw = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise _fail(where, f"not valid YAML ({exc.__class__.__name__})") from exc
    rule = parse_rule(raw, where)
    if not where.startswith(f"{rule.code}_{rule.name}"):
        raise _fail(where, f"file name must be {rule.code}_{rule.name}.yaml")
    return rule


@functools.cache
def load_rules() -> dict[str, Rule]:
    """Every shipped rule by code, validated; raises ConfigError on the first bad file."""
    rules: dict[str, Rule] = {}
    names: set[str] = set()
    for entry in sorted(files("cachewarden.rules").iterdir(), key=lambda e: e.name):
        if not (entry.name.startswith("CW") and entry.name.endswith(".yaml")):
            continue
        rule = load_text(entry.read_text(encoding="utf-8"), entry.name)
        if rule.code in rules or rule.name in names:
            raise _fail(entry.name, f"duplicate code or name ({rule.code} {rule.name})")
        rules[rule.code] = rule
        names.add(rule.name)
    return rules
