"""The rule engine: one file's text in, findings out (rules applied, suppressions and selection honoured)."""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import suppressions
from .context import Context, Settings
from .findings import Finding, Fix, Hit
from .readers import FileError, lint_json, lint_python, lint_template, lint_toml, lint_yaml
from .rulebook import Rule, load_rules
from .selection import Selection
from .sources import Source, kind_of, sniff


@dataclass(frozen=True, slots=True)
class Options:
    selection: Selection = field(default_factory=Selection)
    settings: Settings = field(default_factory=Settings)
    lenient: bool = False  # a file that cannot be read is a CW502 finding, not an error (directory walks)


class _Args(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render_message(rule: Rule, args: Mapping[str, Any]) -> str:
    return string.Formatter().vformat(rule.message, (), _Args(args))


def hits_for(source: Source, settings: Settings) -> tuple[list[Hit], object]:
    """Every hit of every rule in one file, and the JSON suppression header (if any)."""
    ctx = Context(source, settings)
    if source.kind == "template":
        return list(lint_template(ctx)), None
    if source.kind == "json":
        return lint_json(ctx)
    if source.kind == "python":
        return list(lint_python(ctx)), None
    if source.kind == "toml":
        return lint_toml(ctx), None
    return lint_yaml(ctx), None


def lint_source(
    path: str, text: str, options: Options | None = None, display_path: str | None = None
) -> list[Finding]:
    """Findings for one file's text; the file kind comes from ``path``'s extension."""
    options = options or Options()
    kind = kind_of(path) or sniff(text) or "template"
    source = Source(path, text, kind)
    rules = load_rules()
    try:
        hits, header = hits_for(source, options.settings)
    except FileError as exc:
        if not options.lenient:
            raise
        at = source.line_start(exc.line)
        hits, header = [Hit("CW502", at, at, {"problem": exc.problem})], None
    if not hits:
        return []  # most files: no suppression comments to read
    quiet = suppressions.parse(text, header)
    shown = display_path or path
    findings: dict[tuple[str, int, int], Finding] = {}
    for hit in hits:
        rule = rules[hit.code]
        line, column = source.position(hit.start)
        if not options.selection.enabled(hit.code, shown) or quiet.covers(hit.code, line):
            continue
        end_line, end_column = source.position(max(hit.end, hit.start))
        fix = None
        if rule.fix is not None:
            spans = tuple((*source.position(e.start), *source.position(e.end)) for e in hit.edits)
            fix = Fix(rule.fix.applicability, rule.fix.title, hit.edits, spans)
        key = (hit.code, hit.start, hit.end)
        findings.setdefault(
            key,
            Finding(
                code=rule.code,
                name=rule.name,
                reason=rule.reason,
                severity=hit.severity or rule.severity,
                path=shown,
                line=line,
                column=column,
                end_line=end_line,
                end_column=end_column,
                message=render_message(rule, hit.args),
                fix=fix,
                source_line=source.line_text(line),
            ),
        )
    return sorted(findings.values(), key=lambda f: (f.line, f.column, f.code))
