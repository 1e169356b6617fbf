"""SARIF 2.1.0 for GitHub code scanning: one run, every rule with its docs, results with regions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from cachewarden.proxy import __version__

from .findings import Finding
from .rulebook import Rule

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFO_URI = "https://github.com/cachewarden/cachewarden"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.rationale},
        "help": {"text": rule.docs, "markdown": rule.docs},
        "helpUri": f"{INFO_URI}#{rule.code.lower()}",
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {
            "tags": ["prompt-cache", rule.category, rule.reason],
            "precision": "high" if rule.severity == "error" else "medium",
            "problem.severity": {"error": "error", "warning": "warning", "info": "recommendation"}[
                rule.severity
            ],
        },
    }


def render(findings: Sequence[Finding], rules: Mapping[str, Rule]) -> str:
    ordered = sorted(rules)
    index = {code: i for i, code in enumerate(ordered)}
    results = [
        {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": _LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path.replace("\\", "/")},
                        "region": {
                            "startLine": f.line,
                            "startColumn": f.column,
                            "endLine": f.end_line,
                            "endColumn": max(f.end_column, f.column + (f.end_line == f.line)),
                        },
                    }
                }
            ],
        }
        for f in findings
    ]
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "cachewarden",
                        "version": __version__,
                        "informationUri": INFO_URI,
                        "rules": [_rule(rules[c]) for c in ordered],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2)
