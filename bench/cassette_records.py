"""Recorded OpenAI exchanges read from test cassettes (VCR), as records of ../shared/data/recorded.

A second held-out source for bench_counting.py and bench_replay.py (``--cassettes DIR``): public
projects' VCR cassettes (vcrpy's ``interactions`` and Ruby VCR's ``http_interactions``, plain or
gzipped YAML), unpacked under DIR as ``OWNER+NAME/PATH`` (the layout of /tmp/acc4/raw;
bench/cassette_sources.py names the repositories and commits and unpacks them again). They are
third-party data: read in place, never copied into this repository; the benches skip them when DIR
is absent.

Every POST to an OpenAI (or Azure OpenAI) ``/chat/completions`` or ``/responses`` route answered 200
with a ``usage`` block becomes one record with the fields the benches read: ``source``
(``owner/repo:path#i``), ``provider``, ``sequence_id`` (the cassette) and ``seq_index``,
``request``, ``usage``, ``total_input_tokens``, ``cache_read_tokens``, ``response_model``,
``recorded_at`` (Ruby VCR's time, else the response's ``Date`` header), ``streamed``, and the
quality flags ``self_contained`` (false when the provider counts what the body does not show:
images, files, audio, stored state, reasoning items, server tools; reasons in
``not_self_contained_reasons``), ``suspect`` (a hand-written response: placeholder ids, no input
count, cached tokens below OpenAI's 1,024-token minimum, a usage block another provider wrote, a
request body edited after its response was recorded: ``edited_after`` names the last commit with
the body as recorded, found in the repository's history by cassette_sources.py, or a body the
project's recorder rewrote before writing the cassette: ``frozen_clock``)
and ``duplicate_of`` (the same body with
the same reported count as an earlier record: many instrumentation suites record one call in
several variants, and it is counted once).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROUTES = (("/chat/completions", "openai-chat"), ("/responses", "openai-responses"))
# Input item types whose tokens come from outside the body, or from a server-side tool's state.
OPAQUE_ITEMS = frozenset(
    {
        "reasoning",
        "item_reference",
        "compaction",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "computer_call",
        "computer_call_output",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "tool_search_call",
        "tool_search_output",
    }
)
MEDIA_PARTS = frozenset({"image_url", "input_image", "input_file", "file", "input_audio", "audio"})
# OpenAI's response ids are long and random ("chatcmpl-" + 29, "resp_" + 48 characters); a short one
# ("chatcmpl-123", "resp_abc") was written by hand.
MIN_ID_LENGTH = 20
# Usage fields OpenAI never sends but OpenRouter's accounting adds: a cassette whose host was rewritten
# to api.openai.com after recording an OpenRouter answer (simonw/llm's test_tools_streaming variants
# c / d: response model "moonshotai/kimi-k2", 8-9 tokens over the body's OpenAI count). That count is
# another model's tokenizer, not a measure of ours.
FOREIGN_USAGE = frozenset({"is_byok", "cost", "cost_details"})
# Beside a repository's cassettes (written by cassette_sources.py from its git history): the
# interactions whose request body was edited after their response was recorded (``edited_bodies``).
EDITED_FILE = ".edited-bodies.json"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader (libyaml's where built: 50 MB of cassettes take ~2 min in pure Python) that also
    reads Ruby VCR's tags (``!ruby/object:…`` hold plain mappings)."""


def _ruby(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("!ruby/", _ruby)


def _header_name(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    """vcrpy's dump of an aiohttp header name (``multidict.istr``, a case-insensitive ``str``): the
    name, its only argument. Without this, every cassette of an aiohttp-based client was unreadable."""
    if isinstance(node, yaml.SequenceNode):
        args = loader.construct_sequence(node, deep=True)
        return str(args[0]) if args else ""
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


for _tag in ("apply", "new"):
    for _module in ("multidict._multidict", "multidict._multidict_py"):
        _Loader.add_constructor(f"tag:yaml.org,2002:python/object/{_tag}:{_module}.istr", _header_name)
# Ruby VCR writes a non-UTF-8 body as ``!binary`` (a local tag, base64 as YAML's own ``!!binary``).
_Loader.add_constructor("!binary", lambda loader, node: base64.b64decode(loader.construct_scalar(node)))


def _text(raw: Any) -> str | None:
    """A body as text: vcrpy keeps ``str`` or ``bytes`` (maybe gzip / deflate), Ruby VCR a mapping
    with ``string`` (or ``base64_string``)."""
    if isinstance(raw, Mapping):
        raw = base64.b64decode(raw["base64_string"]) if raw.get("base64_string") else raw.get("string")
    if raw is None:
        return None
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes | bytearray):
        data = bytes(raw)
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        elif data[:1] == b"\x78":
            with contextlib.suppress(zlib.error):
                data = zlib.decompress(data)
        return data.decode("utf-8", "replace")
    return None


def _header(headers: Any, name: str) -> str | None:
    if not isinstance(headers, Mapping):
        return None
    for key, value in headers.items():
        if str(key).lower() == name:
            if isinstance(value, list):
                return str(value[0]) if value else None
            return str(value)
    return None


def _usage(text: str) -> tuple[dict[str, Any] | None, str | None, str | None, bool]:
    """(usage, response model, response id, streamed) of a JSON or server-sent-events body."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            body = json.loads(stripped)
        except ValueError:
            return None, None, None, False
        if not isinstance(body, Mapping):
            return None, None, None, False
        usage = body.get("usage")
        return (usage if isinstance(usage, dict) else None), body.get("model"), body.get("id"), False
    usage = model = rid = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if not payload.startswith("{"):
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(event, Mapping):
            continue
        response = event.get("response") if isinstance(event.get("response"), Mapping) else event
        model = response.get("model") or model
        rid = response.get("id") or rid
        if isinstance(response.get("usage"), dict):
            usage = response["usage"]
    return usage, model, rid, True


def _route(uri: str) -> str | None:
    """The request format of an OpenAI (api.openai.com, Azure OpenAI) route, else None: other
    OpenAI-compatible hosts (OpenRouter, DeepSeek, …) count with their own tokenizers."""
    path = uri.split("?", 1)[0]
    host = path.split("/")[2] if path.count("/") >= 2 else ""
    if host != "api.openai.com" and not host.endswith(".openai.azure.com"):
        return None
    for suffix, provider in ROUTES:
        if path.endswith(suffix):
            return provider
    return None


def _deployment(uri: str) -> str | None:
    match = re.search(r"/deployments/([^/?]+)/", uri)
    return match.group(1) if match else None


def _parts(content: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping):
                yield part


def not_self_contained(provider: str, req: Mapping[str, Any]) -> list[str]:
    """Why the provider's count includes what this body does not show (empty: self-contained)."""
    reasons: list[str] = []
    model = str(req.get("model") or "")
    if "search" in model or "audio" in model or "realtime" in model:
        reasons.append(f"model {model}")
    if req.get("audio") or "audio" in (req.get("modalities") or []):
        reasons.append("audio")
    if req.get("web_search_options") is not None:
        reasons.append("web_search_options")
    for key in ("previous_response_id", "conversation", "prompt"):
        if req.get(key):
            reasons.append(key)
    for tool in req.get("tools") or []:
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind not in ("function", "custom", None):
            reasons.append(f"tool {kind}")
    items = req.get("messages") if provider == "openai-chat" else req.get("input")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        if kind in OPAQUE_ITEMS:
            reasons.append(f"item {kind}")
        for part in _parts(item.get("content")):
            if part.get("type") in MEDIA_PARTS:
                reasons.append(f"part {part.get('type')}")
        for part in _parts(item.get("output")):
            if part.get("type") in MEDIA_PARTS:
                reasons.append(f"part {part.get('type')}")
    return sorted(set(reasons))


def _when(raw: Any) -> str | None:
    """A cassette's own recording time as ISO 8601: R's and some Ruby VCR files hold a YAML timestamp,
    which the loader has already made a datetime (naive ones are UTC)."""
    if isinstance(raw, datetime):
        return (raw if raw.tzinfo else raw.replace(tzinfo=UTC)).isoformat()
    return str(raw) if raw else None


# A recorder filter's stand-in: Significant-Gravitas' Auto-GPT tests (tests/vcr/vcr_filter.py,
# REPLACEMENTS) replaced every ctime-style date in a request body with "Tue Jan  1 00:00:00 2000"
# before the cassette was written, so the body on file is not the body sent. With cl100k the stand-in
# is 20 tokens, a sent date with a two-digit day 19: each of the cassettes' 290 dev-half records
# with it (duplicates included; Auto-GPT-test-cassettes) was exact when its response's Date was on a
# day 1-9 (84 of 84) and one over on the 10th or later (206 of 206). Only a filter known from its
# source is listed: a date in a body may be one a test really sent (a frozen test clock).
STAND_INS = ("Tue Jan  1 00:00:00 2000",)


def _texts(req: Mapping[str, Any]) -> Iterator[str]:
    """Every message text of a chat or Responses body (where a filter rewrites prompt text)."""
    items = req.get("messages") or req.get("input") or []
    if isinstance(items, str):
        items = [{"content": items}]
    if isinstance(req.get("instructions"), str):
        yield req["instructions"]
    for item in items if isinstance(items, list) else []:
        content = item.get("content") if isinstance(item, Mapping) else None
        if isinstance(content, str):
            yield content
        for part in _parts(content):
            if isinstance(part.get("text"), str):
                yield part["text"]


def frozen_clock(req: Mapping[str, Any]) -> bool:
    """Whether a recorder filter's stand-in (``STAND_INS``) replaced text of the body."""
    return any(stand_in in text for text in _texts(req) for stand_in in STAND_INS)


def _input_tokens(usage: Mapping[str, Any]) -> tuple[int | None, int]:
    total = usage.get("prompt_tokens", usage.get("input_tokens"))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return (total if isinstance(total, int) else None), (cached if isinstance(cached, int) else 0)


def _interactions(path: Path) -> list[Mapping[str, Any]]:
    return interactions_of(path.read_bytes())


def interactions_of(raw: bytes) -> list[Mapping[str, Any]]:
    """The interactions of one cassette's bytes (plain or gzipped YAML); raises yaml's and gzip's
    errors on a file that is neither."""
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = yaml.load(raw, Loader=_Loader)  # a SafeLoader
    if not isinstance(doc, Mapping):
        return []
    found = doc.get("interactions") or doc.get("http_interactions") or []
    return [i for i in found if isinstance(i, Mapping)]


def _pairing(interaction: Mapping[str, Any]) -> tuple[str, str] | None:
    """(response body, request body re-serialised: key order kept, layout not) of an interaction
    with both and a response that can only come from one recording, else None."""
    request, response = interaction.get("request"), interaction.get("response")
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        return None
    answer, asked = _text(response.get("body")), _text(request.get("body"))
    if not answer or asked is None:
        return None
    # Only an answer with usage and a provider's long id is unique to its recording (an error body
    # or a hand-written answer is the same text beside many requests).
    usage, _, rid, _ = _usage(answer)
    if usage is None or not rid or len(str(rid)) < MIN_ID_LENGTH:
        return None
    with contextlib.suppress(ValueError):  # not JSON: compared as the text it is
        asked = json.dumps(json.loads(asked))
    return answer, asked


def edited_bodies(current: bytes, older: list[bytes]) -> dict[int, int]:
    """Interactions of ``current`` whose request body was edited after their response was recorded:
    {index: position in ``older`` (a cassette's earlier versions, newest first) of the newest
    version that pairs the very same response body with another request body}. A response body
    is unique to its recording (ids, timestamps), so the same one beside another body means the
    body was changed by hand (paper-qa e1b6d3ec added a line to a prompt and kept the answer):
    the usage it reports is the original body's. Unreadable versions are skipped (an unreadable
    ``current``: none)."""
    try:
        pairs = [_pairing(i) for i in interactions_of(current)]
    except (yaml.YAMLError, OSError, EOFError, zlib.error, UnicodeDecodeError):
        return {}
    wanted = {p[0]: i for i, p in enumerate(pairs) if p is not None}
    edited: dict[int, int] = {}
    for position, raw in enumerate(older):
        try:
            earlier = interactions_of(raw)
        except (yaml.YAMLError, OSError, EOFError, zlib.error, UnicodeDecodeError):
            continue
        for pair in map(_pairing, earlier):
            if pair is None or pair[0] not in wanted:
                continue
            index = wanted[pair[0]]
            if pairs[index] != pair:
                edited.setdefault(index, position)  # ``older`` is newest first
    return edited


def _edited(repo_dir: Path) -> dict[str, dict[str, str]]:
    """The edited bodies cassette_sources.py found in this repository's history ({path: {index:
    commit}}); none when it was unpacked without history."""
    try:
        found = json.loads((repo_dir / EDITED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def cassette_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(``owner/repo:path``, file) for every cassette under ``root/OWNER+NAME/``."""
    for repo_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        repo = repo_dir.name.replace("+", "/", 1)
        for path in sorted(repo_dir.rglob("*")):
            if path.is_file() and path.name.endswith((".yaml", ".yml", ".yaml.gz", ".yml.gz")):
                yield f"{repo}:{path.relative_to(repo_dir).as_posix()}", path


def records(root: Path) -> Iterator[dict[str, Any]]:
    """The records of every cassette under ``root`` (module doc), in file and interaction order."""
    seen: dict[tuple[str, int], str] = {}
    edits: dict[str, dict[str, dict[str, str]]] = {}
    for sequence_id, path in cassette_files(root):
        try:
            interactions = _interactions(path)
        except (yaml.YAMLError, OSError, EOFError, zlib.error, UnicodeDecodeError):
            continue
        repo, rel = sequence_id.split(":", 1)
        if repo not in edits:
            edits[repo] = _edited(root / repo.replace("/", "+", 1))
        edited = edits[repo].get(rel, {})
        for index, interaction in enumerate(interactions):
            record = _record(sequence_id, index, interaction)
            if record is None:
                continue
            record["edited_after"] = edited.get(str(index))
            record["suspect"] = record["suspect"] or record["edited_after"] is not None
            key = (json.dumps(record["request"], sort_keys=True), record["total_input_tokens"])
            if key in seen:
                record["duplicate_of"] = seen[key]
            else:
                seen[key] = record["source"]
            yield record


def _record(sequence_id: str, index: int, interaction: Mapping[str, Any]) -> dict[str, Any] | None:
    request = interaction.get("request")
    response = interaction.get("response")
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        return None
    if str(request.get("method", "")).upper() != "POST":
        return None
    provider = _route(str(request.get("uri", "")))
    status = response.get("status")
    code = status.get("code") if isinstance(status, Mapping) else status
    if provider is None or str(code) != "200":
        return None
    try:
        body_text = _text(request.get("body"))
        req = json.loads(body_text) if body_text else None
    except ValueError:
        return None
    text = _text(response.get("body"))
    if not isinstance(req, dict) or text is None:
        return None
    usage, model, rid, streamed = _usage(text)
    if usage is None:
        return None
    total, cached = _input_tokens(usage)
    if total is None:
        return None
    reasons = not_self_contained(provider, req)
    recorded_at = _when(interaction.get("recorded_at")) or _header(response.get("headers"), "date")
    rewritten = frozen_clock(req)
    return {
        "source": f"{sequence_id}#{index}",
        "provider": provider,
        "sequence_id": sequence_id,
        "seq_index": index,
        "request": req,
        "usage": usage,
        "streamed": streamed,
        "host": str(request.get("uri", "")).split("/")[2] if "//" in str(request.get("uri")) else None,
        "response_model": model,
        # Azure names the deployment in the path, not the body (bench_counting.fallback_model).
        "path": _deployment(str(request.get("uri", ""))),
        "response_id": rid,
        "recorded_at": recorded_at,
        "frozen_clock": rewritten,
        "total_input_tokens": total,
        "cache_read_tokens": cached,
        "self_contained": not reasons,
        "not_self_contained_reasons": reasons,
        # OpenAI: "For requests under 1024 tokens, cached_tokens is zero" (prompt-caching guide): a
        # read below that was written by hand (openinference's llama_index token-count fixture).
        "suspect": total <= 0
        or rewritten
        or not rid
        or len(str(rid)) < MIN_ID_LENGTH
        or (cached > 0 and total < 1024)
        or not FOREIGN_USAGE.isdisjoint(usage),
    }


def main(argv: list[str]) -> int:
    """Write the records of DIR as JSONL (for inspection): ``cassette_records.py DIR OUT.jsonl``."""
    root, out = Path(argv[0]), Path(argv[1])
    with out.open("w", encoding="utf-8") as fh:
        for record in records(root):
            fh.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
