"""`cachewarden rules [CODE]`: list every rule, or print one rule's documentation."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from cachewarden.proxy.engine.errors import CachewardenError

from .rulebook import Rule, load_rules


def run(argv: Sequence[str]) -> int:
    rules = load_rules()
    if argv and argv[0] in ("-h", "--help"):
        print("usage: cachewarden rules [CODE|NAME]")
        return 0
    if not argv:
        print(f"{'code':<6} {'name':<34} {'reason':<19} {'severity':<8} fixable")
        for each in rules.values():
            fixable = each.fix.applicability if each.fix else "-"
            print(f"{each.code:<6} {each.name:<34} {each.reason:<19} {each.severity:<8} {fixable}")
        return 0
    wanted = argv[0]
    rule: Rule | None = rules.get(wanted.upper()) or next(
        (r for r in rules.values() if r.name == wanted), None
    )
    if rule is None:
        print(f"cachewarden: error: unknown rule {wanted!r} (see 'cachewarden rules')", file=sys.stderr)
        return 2
    fix = f"{rule.fix.applicability}: {rule.fix.title}" if rule.fix else "none"
    print(f"# {rule.name} ({rule.code})\n")
    print(f"Reason: `{rule.reason}` · Severity: {rule.severity} · Fix: {fix} · Status: {rule.status}\n")
    print(rule.docs)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(list(sys.argv[1:] if argv is None else argv))
    except CachewardenError as exc:
        print(f"cachewarden: error: {exc}", file=sys.stderr)
        return 2
