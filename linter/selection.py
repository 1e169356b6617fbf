"""Which rules run: --select / --ignore / per-file-ignores, by code or code prefix (Ruff semantics)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cachewarden.proxy.engine.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Selection:
    select: tuple[str, ...] = ("CW",)
    ignore: tuple[str, ...] = ()
    per_file_ignores: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def enabled(self, code: str, path: str) -> bool:
        if not _matches(code, self.select) or _matches(code, self.ignore):
            return False
        posix = path.replace("\\", "/")
        return not any(
            _matches(code, codes) for pattern, codes in self.per_file_ignores.items() if _glob(posix, pattern)
        )


def _matches(code: str, prefixes: Iterable[str]) -> bool:
    return any(p == "ALL" or code.startswith(p) for p in prefixes)


def _glob(path: str, pattern: str) -> bool:
    return (
        fnmatch.fnmatch(path, pattern)
        or fnmatch.fnmatch(path, f"*/{pattern}")
        or ("/" not in pattern and fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern))
    )


def check_codes(codes: Iterable[str], known: Iterable[str], where: str) -> tuple[str, ...]:
    """Validate codes / prefixes against the rule set: an unknown one is a usage error (exit 2)."""
    known = list(known)
    out = []
    for raw in codes:
        code = raw.strip().upper()
        if not code:
            continue
        if code != "ALL" and not any(k.startswith(code) for k in known):
            raise ConfigError(f"{where}: unknown rule code or prefix {raw!r}")
        out.append(code)
    return tuple(out)
