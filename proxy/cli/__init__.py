"""The `cachewarden` command: dispatches to one module per sub-command, imported lazily.

Lazy imports keep `cachewarden lint` free of FastAPI and fast to start in a pre-commit hook.
Each sub-command module exposes ``main(argv) -> int`` (exit 0 ok, 1 findings, 2 usage/input error).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from cachewarden.proxy import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    "count": ("cachewarden.proxy.cli.count", "tokens of a request body, per segment"),
    "diff": ("cachewarden.proxy.cli.diff", "why a request missed the cache after another"),
    "replay": ("cachewarden.proxy.cli.replay", "replay a traffic log into a cache report"),
    "lint": ("cachewarden.linter.cli", "find cache busters in prompt templates and request files"),
    "rules": ("cachewarden.linter.rules_cmd", "list the lint rules or show one rule's documentation"),
    "proxy": ("cachewarden.proxy.cli.proxy", "run the reverse proxy for the OpenAI and Anthropic APIs"),
    "emulate": (
        "cachewarden.proxy.cli.emulate",
        "run a local OpenAI / Anthropic API with a prefix cache",
    ),
    "demo": ("cachewarden.proxy.cli.demo", "run emulator + proxy + an agent workload and print the report"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: cachewarden [--version] COMMAND [ARGS...]",
        "",
        "Prompt-cache linter and proxy for LLM APIs.",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'cachewarden COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"cachewarden {__version__}")
        return 0
    name, rest = args[0], args[1:]
    entry = COMMANDS.get(name)
    if entry is None:
        print(f"cachewarden: error: unknown command {name!r} (see 'cachewarden --help')", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(entry[0])
    except ImportError as exc:
        missing = exc.name or str(exc)
        if missing.startswith("cachewarden"):
            print(f"cachewarden: error: '{name}' is not available in this version", file=sys.stderr)
        else:
            extra = "demo" if missing.split(".")[0] in ("openai", "anthropic") else "proxy"
            print(
                f"cachewarden: error: '{name}' needs {missing!r}: pip install 'cachewarden[{extra}]'",
                file=sys.stderr,
            )
        return 2
    try:
        code: int = module.main(rest)
    except BrokenPipeError:
        # `cachewarden lint . | head`: the reader left. Python would print a traceback when it
        # flushes stdout at exit; point stdout at /dev/null instead and stop quietly, as grep does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code
