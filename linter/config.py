"""`[tool.cachewarden]` in the nearest pyproject.toml (searching up from the working directory).

Keys: select, ignore, per-file-ignores, model, exclude, tojson-sort-keys. Unknown keys and unknown
rule codes are configuration errors (exit 2). Command-line flags override the file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cachewarden.proxy.engine.errors import ConfigError

_KEYS = {"select", "ignore", "per-file-ignores", "model", "exclude", "tojson-sort-keys"}


@dataclass(frozen=True, slots=True)
class FileConfig:
    path: Path | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    per_file_ignores: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model: str | None = None
    exclude: tuple[str, ...] = ()
    tojson_sort_keys: bool = True

    @property
    def root(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


def find_pyproject(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings")
    return tuple(value)


def load_config(start: Path | None = None) -> FileConfig:
    path = find_pyproject((start or Path.cwd()).resolve())
    if path is None:
        return FileConfig()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration ({exc})") from exc
    table = data.get("tool", {}).get("cachewarden")
    if table is None:
        return FileConfig(path=path)
    where = f"{path}: [tool.cachewarden]"
    # Linter keys may also sit in a [tool.cachewarden.lint] sub-table; other sub-tables are the proxy's.
    table = {k: v for k, v in table.items() if not isinstance(v, dict) or k == "per-file-ignores"}
    table.update(data["tool"]["cachewarden"].get("lint", {}))
    unknown = set(table) - _KEYS - {"lint", "proxy", "models", "pricing"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}: per-file-ignores must be a table of glob = [codes]")
    model = table.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{where}: model must be a string")
    sort_keys = table.get("tojson-sort-keys", True)
    if not isinstance(sort_keys, bool):
        raise ConfigError(f"{where}: tojson-sort-keys must be true or false")
    return FileConfig(
        path=path,
        select=_strings(table["select"], f"{where} select") if "select" in table else None,
        ignore=_strings(table.get("ignore", []), f"{where} ignore"),
        per_file_ignores={k: _strings(v, f"{where} per-file-ignores") for k, v in pfi.items()},
        model=model,
        exclude=_strings(table.get("exclude", []), f"{where} exclude"),
        tojson_sort_keys=sort_keys,
    )
