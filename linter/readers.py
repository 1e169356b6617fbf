"""Turn one file into hits: pick the reader by kind, run the checks that apply to it.

Templates embedded elsewhere (a `.prompty` body after its front matter, a string in a YAML prompt
config) are checked as templates of their own and their offsets mapped back into the file.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TypeVar

import jinja2
from cachewarden.proxy.engine.errors import CachewardenError

from .checks_python import check_python
from .checks_request import check_body, document_kind
from .checks_template import PREFIX_RULES, check_template, system_ranges
from .checks_text import check_text
from .context import Context
from .findings import Hit
from .go_template import is_go_template, scan_go
from .py_sites import prompt_name
from .py_source import PyModule
from .template_moustache import moustache_scan
from .template_scan import FORMAT_CLOCK, PLAIN_SUFFIXES, Piece, Scan, scan_template
from .toml_tree import parse_toml
from .tree import Node, ParseError, parse_json, parse_yaml
from .vocab import words

STRICT_TEMPLATES = frozenset({".j2", ".jinja", ".jinja2", ".prompty"})
GO_TEMPLATES = frozenset({".tpl", ".tmpl", ".gotmpl"})  # Go text/template, else read as Jinja
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)---[ \t]*\r?\n", re.S)
_TEMPLATE_KEYS = frozenset(
    {
        "system",
        "system_prompt",
        "instructions",
        "prompt",
        "template",
        "content",
        "user",
        "developer",
        "text",
        "preamble",
        "messages",
    }
)
_SYSTEM_KEYS = frozenset({"system", "system_prompt", "instructions", "developer", "preamble"})

# Every Python prompt site (py_sites) needs one of these in the file. Plain substring tests on the
# lowered text cost a fraction of a parse, which most files of a large repository then skip.
_PROMPT_WORDS = ("systemmessage", "from_messages", "from_template", ".render(")
# Else a prompt name (``prompt_name``: `SYSTEM_PROMPT`, `instructions`; not `prompt_tokens`) where
# code binds, defines, passes or calls it: `x =`, `x +=`, `x: str =`, `def x(`, `x(`, `.x.`, `"x":`,
# `@agent.x` at a line's end. The word in a docstring, a comment or a log line is not a site: a
# framework's model adapters mention `prompt_tokens` and "the prompt" in most of their modules.
_PROMPT_STEMS = ("prompt", "instruction", "preamble", "backstory")
_SITE_AFTER = re.compile(r"""['"]?[ \t]*(?:[-+]?=(?!=)|\(|\.|:[^\n=]*=|:)|[ \t]*\r?\n""")
_GUARDED = (
    ("system", re.compile(r"system_|system\s*(?::[^\n=]*)?=|role['\"]?\s*[:=]\s*['\"]system")),
    ("developer", re.compile(r"role['\"]?\s*[:=]\s*['\"]developer")),
    ("completion", re.compile(r"completions?\s*\.\s*\w|completion\(")),
    ("messages", re.compile(r"messages\s*\.\s*(?:create|stream|parse|count_tokens)")),
    ("responses", re.compile(r"responses\s*\.\s*(?:create|stream|parse)")),
)
_Tree = TypeVar("_Tree", Node, Node | None)  # what a parser of a config format returns


def _promptish(text: str) -> bool:
    low = text.lower()
    if any(word in low for word in _PROMPT_WORDS):
        return True
    if any(word in low and pattern.search(low) for word, pattern in _GUARDED):
        return True
    if len(low) != len(text):
        return any(stem in low for stem in _PROMPT_STEMS)  # offsets differ: the plain word test
    return any(_names_a_prompt(text, low, stem) for stem in _PROMPT_STEMS)


def _names_a_prompt(text: str, low: str, stem: str) -> bool:
    """Whether a prompt name with ``stem`` is bound, defined, passed or called in ``text``.
    ``str.find`` on the lowered text: a case-blind regex over a whole module costs more than a parse."""
    size = len(text)
    at = low.find(stem)
    while at >= 0:
        start, end = at, at + len(stem)
        while start and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        while end < size and (text[end].isalnum() or text[end] == "_"):
            end += 1
        after = _SITE_AFTER.match(text, end)
        # A line that ends in the word is a site only as a decorator (`@agent.system_prompt`).
        decorator = text[start - 1 : start] in ("@", ".")
        if after is not None and (after.group().strip() or decorator) and prompt_name(text[start:end]):
            return True
        at = low.find(stem, end)
    return False


# A fence may be indented (inside a list item): the closing fence then is too.
_MOUSTACHE_DIALECT = re.compile(r"\{\{\s*[$#/]\w")
_CODE_SUFFIXES = frozenset(
    {".py", ".sh", ".bash", ".ps1", ".yaml", ".yml", ".json", ".toml", ".ini", ".cfg", ".conf", ".env"}
    | {".html", ".htm", ".xml", ".css", ".js", ".ts", ".sql", ".tf", ".rst", ".go", ".rs", ".java", ".cs"}
    | {".dockerfile", ".service", ".properties", ".csv", ".ipynb"}
)
_CODE_FILES = frozenset({"dockerfile", "containerfile", "makefile", "justfile", "gemfile", "procfile"})
_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?^[ \t]*\1[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"`[^`\n]+`")
_PROMPT_STEM_WORDS = frozenset({"prompt", "prompts", "system", "instructions", "preamble", "persona"})
_PROMPT_FOLDER_WORDS = frozenset(
    {"prompt", "prompts", "template", "templates", "instructions", "personas", "skills"}
)
_AGENT_FILES = frozenset({"agents", "claude", "gemini", "skill", "copilot-instructions"})  # AGENTS.md...


class FileError(CachewardenError):
    """A file the linter cannot read (bad JSON / YAML / template syntax): exit 2 when the file was
    named, an info finding (CW502) when a directory walk found it."""

    def __init__(self, message: str, line: int = 1, problem: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.problem = problem or message


def _moustache(where: str, text: str) -> bool:
    """A Semantic Kernel / Handlebars template (not Markdown: there it is documentation)."""
    return not where.lower().endswith(".md") and _MOUSTACHE_DIALECT.search(text) is not None


def _system_file(path: str) -> bool:
    return bool(
        set(words(os.path.splitext(os.path.basename(path))[0])) & {"system", "instructions", "developer"}
    )


# What a template that opens the cached prefix is judged by: per-request values with static text
# after them (CW301), and how much of the template comes before the first of them (CW401 / CW402).
_TURN_WORDS = frozenset({"user", "human"})


def _turn_template(path: str) -> bool:
    """A template rendered as a user turn, not as the instructions: named so (``user.j2``,
    ``human_prompt.txt``), or beside a ``system`` template of the same kind in one folder
    (``prompts/developer/system.prompt`` and ``prompts/developer/filter_files.prompt``)."""
    stem, suffix = os.path.splitext(os.path.basename(path))
    ws = set(words(stem))
    if ws & {"system", "instructions", "developer"}:
        return False
    # `user_prompt.j2`, `human.txt`; not `user_profile.j2` (a part the instructions may include).
    named = bool(ws & _TURN_WORDS) and ws <= _TURN_WORDS | {"prompt", "message", "template", "turn", "input"}
    return named or _has_system_sibling(os.path.dirname(os.path.abspath(path)), suffix.lower())


@functools.lru_cache(maxsize=1024)
def _has_system_sibling(folder: str, suffix: str) -> bool:
    return os.path.isfile(os.path.join(folder, "system" + suffix))


def _template_hits(ctx: Context, text: str, strict: bool, whole_system: bool, where: str) -> Iterator[Hit]:
    if os.path.splitext(where)[1].lower() in GO_TEMPLATES and is_go_template(text):
        scan = scan_go(text)
        yield from check_template(ctx, text, scan, system_ranges(text, whole_system, scan))
        return
    try:
        scan = scan_template(text, plain_fields=where.lower().endswith(PLAIN_SUFFIXES))
    except jinja2.TemplateSyntaxError as exc:
        dialect = "unknown tag" in (exc.message or "")
        if strict and not dialect:
            problem = f"template syntax error: {exc.message}"
            raise FileError(f"{where}:{exc.lineno}: {problem}", exc.lineno or 1, problem) from exc
        # Plain text that only looks like Jinja ("{%" in an example), or a dialect with tags of its
        # own (an extension's): read as text, all of it static, and say so for a real template.
        # A Semantic Kernel / Handlebars template (`{{$name}}`, `{{#each}}`) is read by its fields.
        scan = (
            moustache_scan(text) if _moustache(where, text) else Scan([Piece(True, 0, len(text), text=text)])
        )
        if strict:
            at = ctx.source.line_start(exc.lineno or 1)
            tag = (exc.message or "").split("'")[1] if "'" in (exc.message or "") else "?"
            yield Hit("CW501", at, at, {"tag": tag})
    yield from check_template(ctx, text, scan, system_ranges(text, whole_system, scan))


def _fences_as_text(text: str) -> str:
    """Markdown code fences and spans are examples: their `{{ }}` is shown, not rendered (same offsets)."""

    def shown(m: re.Match[str]) -> str:
        return m.group().replace("{", "(").replace("}", ")")

    return _SPAN.sub(shown, _FENCE.sub(shown, text))


def _prompt_file(path: str, text: str) -> bool:
    """A Markdown / text file is a prompt when it says so: template syntax, or a name that does."""
    if "{{" in text or "{%" in text or FORMAT_CLOCK.search(text):
        return True
    *folders, stem = os.path.normpath(os.path.splitext(path)[0]).split(os.sep)
    if stem.lower() in _AGENT_FILES or set(words(stem)) & _PROMPT_STEM_WORDS:
        return True
    return any(set(words(folder)) & _PROMPT_FOLDER_WORDS for folder in folders)


def _renders_code(path: str) -> bool:
    """``Dockerfile.j2``, ``setup.py.jinja2``, ``workflow.yml.j2``: a template that renders a file of
    another kind (code, configuration), not a prompt."""
    stem = os.path.splitext(os.path.basename(path))[0]
    inner = os.path.splitext(stem)[1].lower()
    return inner in _CODE_SUFFIXES or stem.lower() in _CODE_FILES


def lint_template(ctx: Context) -> Iterator[Hit]:
    source = ctx.source
    text = source.text
    suffix = os.path.splitext(source.path)[1].lower()
    if _renders_code(source.path):
        return
    if suffix == ".md":
        text = _fences_as_text(text)
    if suffix in (".md", ".txt") and not _prompt_file(source.path, text):
        return  # a README, a changelog, a data file: not a prompt
    m = _FRONT_MATTER.match(text)
    if m and suffix in (".prompty", ".md", ".prompt"):
        try:
            meta = parse_yaml(m.group(1))
        except ParseError:
            meta = None
        if meta is not None and meta.kind == "object":
            ctx.model = _front_matter_model(meta.to_python())
        # Blank the front matter (same length, same newlines) so offsets stay those of the file.
        text = re.sub(r"[^\n]", " ", m.group()) + text[m.end() :]
    hits = _template_hits(ctx, text, suffix in STRICT_TEMPLATES, _system_file(source.path), source.path)
    if _turn_template(source.path):
        # A user turn is sent once, after the instructions and the history: the static text after
        # its values is never a cached prefix of this request, and is the same history afterwards.
        hits = (hit for hit in hits if hit.code not in PREFIX_RULES)
    yield from hits
    yield from check_text(source.text, markdown=suffix == ".md")


def _front_matter_model(meta: object) -> str | None:
    if not isinstance(meta, dict):
        return None
    model = meta.get("model")
    if isinstance(model, str):
        return model
    if isinstance(model, dict):
        for key in ("id", "name"):
            if isinstance(model.get(key), str):
                return str(model[key])
        config = model.get("configuration")
        if isinstance(config, dict):
            for key in ("name", "model", "azure_deployment"):
                if isinstance(config.get(key), str):
                    return str(config[key])
    return None


def lint_python(ctx: Context) -> Iterator[Hit]:
    if not _promptish(ctx.source.text):
        return  # no SDK call, message or prompt name can be in it: not worth a parse
    try:
        module = PyModule.parse(ctx.source)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte in the source
        line = getattr(exc, "lineno", None) or 1
        message = getattr(exc, "msg", None) or str(exc)
        problem = f"Python syntax error: {message}"
        raise FileError(f"{ctx.source.path}:{line}: {problem}", line, problem) from exc
    yield from check_python(ctx, module)


def lint_json(ctx: Context) -> tuple[list[Hit], object]:
    try:
        root = parse_json(ctx.source.text)
    except ParseError as exc:
        line, col = ctx.source.position(exc.offset)
        raise FileError(
            f"{ctx.source.path}:{line}:{col}: not valid JSON: {exc}", line, f"not valid JSON: {exc}"
        ) from exc
    header = root.get("//") if root.kind == "object" else None
    if document_kind(root) is None:
        return [], None  # test data, a saved state, a server's records: never sent as it is
    return list(check_body(ctx, root, ctx.source.text, fixable=True)), header.to_python() if header else None


def lint_yaml(ctx: Context) -> list[Hit]:
    root = _parsed(ctx, parse_yaml)
    if root is None or (root.kind == "object" and root.get("interactions") is not None):
        return []  # empty, or a VCR cassette: recorded HTTP traffic, not a prompt config
    if root.kind == "array" and document_kind(root) is None:
        return []
    if document_kind(root) is not None:
        hits = list(check_body(ctx, root, ctx.source.text, fixable=False))
        if root.kind == "array" or root.get("messages") is not None:
            return hits
    else:
        hits = []
        model = root.get("model")
        if model is not None and isinstance(model.value, str):
            ctx.model = model.value
    return hits + _prompt_config_hits(ctx, root, lambda node: _scalar_mapper(ctx.source.text, node))


def lint_toml(ctx: Context) -> list[Hit]:
    """Prompts kept in TOML (``[pr_review_prompt]`` with ``system`` and ``user`` strings), read as
    YAML prompt configs are: a template string under a prompt key, or any string with template syntax."""
    return _prompt_config_hits(ctx, _parsed(ctx, parse_toml), _toml_mapper)


def _toml_mapper(node: Node) -> Callable[[int], int]:
    # a string without escapes maps offset for offset; one with them is reported at its start
    exact = node.end - node.start == len(node.value)
    return (lambda offset: node.start + offset) if exact else (lambda _offset: node.start)


def _parsed(ctx: Context, parse: Callable[[str], _Tree]) -> _Tree:
    try:
        return parse(ctx.source.text)
    except ParseError as exc:
        line, col = ctx.source.position(exc.offset)
        raise FileError(f"{ctx.source.path}:{line}:{col}: {exc}", line, str(exc)) from exc


def _prompt_config_hits(
    ctx: Context, root: Node, mapper_of: Callable[[Node], Callable[[int], int]]
) -> list[Hit]:
    """The template findings of a config's prompt strings, at their places in the file
    (``mapper_of(node)`` maps an offset in the string's value to one in the file)."""
    hits: list[Hit] = []
    for key, node, system, turn in _prompt_strings(root, None, False, False):
        mapper = mapper_of(node)
        for hit in _template_hits(ctx, node.value, False, system, f"{ctx.source.path} ({key})"):
            if turn and hit.code in PREFIX_RULES:
                continue  # a user turn (see _prompt_strings): as a turn template file
            start, end = mapper(hit.start), mapper(hit.end)
            hits.append(replace(hit, start=start, end=max(start, end), edits=()))
    return hits


def _system_key(name: str) -> bool:
    return name in _SYSTEM_KEYS or "system" in words(name)


def _prompt_strings(
    node: Node, key: str | None, system: bool, turn: bool
) -> Iterator[tuple[str, Node, bool, bool]]:
    """Prompt strings with whether they are instructions and whether they are a user turn: a
    template beside a system template in one mapping (an agent config's `system_template` and
    `instance_template`) is sent as a later message, as a template file beside `system.j2` is."""
    if node.kind == "string" and key is not None:
        text = node.value
        # `${{ github.run_id }}` is a GitHub Actions expression: only a prompt key makes it prompt text.
        actions = "${{" in text and "{{" not in text.replace("${{", "")
        if actions:
            if set(words(key)) & {"prompt", "instructions", "system"}:
                yield key, node, system, turn
        elif key in _TEMPLATE_KEYS or "{{" in text or "{%" in text:
            yield key, node, system, turn
    role = node.get("role") if node.members else None
    beside_system = any(_system_key(name) and child.kind == "string" for name, _, child in node.members)
    for name, _, child in node.members:
        in_system = (
            system
            or name in _SYSTEM_KEYS
            or (name == "content" and role is not None and role.value in ("system", "developer"))
        )
        later = turn or (beside_system and not in_system and not _system_key(name))
        yield from _prompt_strings(child, name, in_system, later)
    for child in node.items:
        yield from _prompt_strings(child, key, system, turn)


def _scalar_mapper(text: str, node: Node) -> Callable[[int], int]:
    """Map an offset in a YAML scalar's value to the file: exact for `|` blocks, else the scalar start."""
    if text[node.start : node.start + 1] != "|":
        return lambda _offset: node.start
    first = text.find("\n", node.start) + 1
    body_line = text[first : text.find("\n", first) if "\n" in text[first:] else len(text)]
    indent = len(body_line) - len(body_line.lstrip(" "))
    line_starts = [first]
    pos = first
    while pos < node.end:
        nxt = text.find("\n", pos)
        if nxt < 0:
            break
        pos = nxt + 1
        line_starts.append(pos)
    value: str = node.value

    def mapper(offset: int) -> int:
        line = value.count("\n", 0, offset)
        col = offset - (value.rfind("\n", 0, offset) + 1)
        return line_starts[min(line, len(line_starts) - 1)] + indent + col

    return mapper
