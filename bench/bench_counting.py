"""Accuracy of `count` against the input tokens providers reported (../shared/data/recorded).

Prints the README's accuracy table: per kind of request, the share counted exactly, within ±1 token,
and the median relative error |counted - reported| / reported, on the training part and on the
held-out part of the data. The split was fixed before looking at any error: every record of one
source project (pydantic/pydantic-ai, a third of the data, other test suites, other client code) is
held out; rules and constants were found on the other two projects (Mirascope, crewAI). The held-out
columns stand for traffic the project has never seen. Only records that are self-contained and not
suspect count (README of the data). The data are third-party: read in place, never copied.

The held-out project is split once more, by cassette (a hash of ``sequence_id``, fixed before any
error was looked at): "dev" records may be inspected one by one when a rule is sought (and are
then no longer unseen), "final" records never are; only their aggregate is printed. ``--split``
prints the two halves as separate columns; the default table pools them.

    .venv/bin/python bench/bench_counting.py [PATH/interactions.jsonl] [--split] [--detail]
    .venv/bin/python bench/bench_counting.py --cassettes[=DIR] [--split] [--detail]

``--cassettes`` measures a second held-out source instead: public projects' VCR cassettes unpacked
under DIR (default /tmp/acc4/raw; bench/cassette_records.py reads them; bench/cassette_sources.py
names the repositories and commits and unpacks them again from git). No rule was found on them
before their first run, so every record is held out; they split into dev / final by cassette with
the same hash.

``--pooled`` pools every held-out record there is: the held-out project of the recorded data and
the cassette sources (/tmp/acc4/raw, /tmp/acc5/raw, /tmp/acc6/raw, where present; a body an earlier
source holds too is counted once), training records left out: the figure the issue's goals are
about, by half with ``--split``.

``--counts`` adds the number of exact requests to each cell (``#ex``: a share rounds to one decimal).

``--detail`` adds rows per model for tools, Responses and Anthropic, and the largest errors outside the
final part (training and held-out dev records only: the final part is never listed).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cassette_records
from cachewarden.proxy.engine import adapters
from cachewarden.proxy.engine.counting import PromptCounter
from cachewarden.proxy.engine.errors import CachewardenError
from cachewarden.proxy.engine.models import load_model_table
from cachewarden.proxy.replay.logs import LogLineError, parse_timestamp

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "recorded" / "interactions.jsonl"
HELD_OUT_SOURCE = "pydantic/pydantic-ai:"
CASSETTES = Path("/tmp/acc4/raw")
CASSETTE_SOURCES = (CASSETTES, Path("/tmp/acc5/raw"), Path("/tmp/acc6/raw"))


def cassettes_root(argv: list[str]) -> Path | None:
    """The cassettes directory ``--cassettes[=DIR]`` (or ``--cassettes DIR``) names, the default
    for the bare flag; None without the flag."""
    for i, a in enumerate(argv):
        if a == "--cassettes":
            after = argv[i + 1] if i + 1 < len(argv) else ""
            return Path(after) if after and not after.startswith("--") else CASSETTES
        if a.startswith("--cassettes="):
            return Path(a.partition("=")[2] or CASSETTES)
    return None


# The Responses API's first weeks (it opened on 2025-03-11): every exchange recorded in March 2025 reports
# 18 tokens or more beyond its body (a bare "1+1?" on gpt-4o is 27; an openai-agents first turn over
# 200 more), across five projects (logfire, ruby-openai, llm-openai-plugin, dd-trace-py; pydantic-ai's,
# dated by their response ids), and every one from May 2025 on does not (the cassettes have none of
# April): hidden content
# the API no longer adds. Counted in a row of their own, out of the Responses row, so that the figure
# for today's API is not mixed with that period's.
RESPONSES_LAUNCH = "OpenAI Responses, March 2025"
RESPONSES_SETTLED = datetime(2025, 4, 1, tzinfo=UTC).timestamp()
IDS_SINCE = datetime(2023, 1, 1, tzinfo=UTC).timestamp()  # before any response id could be a time

# Row order of the table; a record goes to its first matching kind (see kinds()).
ROWS = (
    "OpenAI chat, no tools",
    "  plain messages only",
    "  with response_format json_schema",
    "  with a name on a message",
    "  with legacy functions",
    "OpenAI chat with tools",
    "OpenAI Responses",
    RESPONSES_LAUNCH,
    "Anthropic (estimated)",
)


def clean(rec: Mapping[str, Any]) -> bool:
    return bool(rec.get("self_contained")) and not rec.get("suspect") and not rec.get("duplicate_of")


def records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if clean(rec):
                yield rec


def cassette_source(rec: Mapping[str, Any]) -> bool:
    """A record of the second held-out source (``--cassettes``): none of it was ever training data."""
    return bool(rec.get("cassette"))


def load_cassettes(root: Path) -> list[dict[str, Any]]:
    """Every record of the cassettes under ``root`` (cassette_records), marked as that source."""
    out = []
    for rec in cassette_records.records(root):
        rec["cassette"] = True
        out.append(rec)
    return out


def pooled_cassettes(roots: list[Path], only: Path | None = None) -> Iterator[dict[str, Any]]:
    """The clean records of every root (of ``only``, with the earlier roots read first), a body (with
    its reported count) that an earlier root holds too left out: projects copy one another's
    cassettes (an instrumentation's fork, say), and the copy keeps the half of the first one."""
    seen: set[tuple[str, Any]] = set()
    for root in roots:
        for rec in load_cassettes(root):
            key = (json.dumps(rec["request"], sort_keys=True), rec["total_input_tokens"])
            if clean(rec) and key not in seen:
                seen.add(key)
                if only is None or root == only:
                    yield rec
        if root == only:
            return


def held_out(rec: Mapping[str, Any]) -> bool:
    return cassette_source(rec) or str(rec["source"]).startswith(HELD_OUT_SOURCE)


def part(rec: Mapping[str, Any]) -> str:
    """ "training", or for the held-out project "dev" / "final" by its cassette (whole cassettes, since
    the requests of one cassette share their tools and system prompt)."""
    if not held_out(rec):
        return "training"
    digest = hashlib.blake2b(str(rec["sequence_id"]).encode(), digest_size=2).digest()
    return "dev" if digest[0] % 2 == 0 else "final"


def kinds(rec: Mapping[str, Any]) -> list[str]:
    """The table rows a record counts in (a sub-row also counts in its parent row)."""
    provider = rec["provider"]
    if provider == "openai-responses":
        when = recorded_at(rec)
        return [RESPONSES_LAUNCH if when is not None and when < RESPONSES_SETTLED else "OpenAI Responses"]
    if provider == "anthropic":
        return ["Anthropic (estimated)"]
    req = rec["request"]
    if req.get("tools"):
        return ["OpenAI chat with tools"]
    messages = req.get("messages") or []
    if not all(isinstance(m, Mapping) and isinstance(m.get("content"), str | None) for m in messages):
        return []  # parts (images, files): not in the rows
    rows = ["OpenAI chat, no tools"]
    fmt = req.get("response_format")
    if req.get("functions"):
        rows.append("  with legacy functions")
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        rows.append("  with response_format json_schema")
    elif any("name" in m and m.get("role") not in ("tool", "function") for m in messages):
        rows.append("  with a name on a message")
    else:
        rows.append("  plain messages only")
    return rows


def recorded_at(rec: Mapping[str, Any]) -> float | None:
    """When the exchange was recorded (epoch seconds), if the record says (a Date header or ISO 8601),
    else when OpenAI made the response: a Responses id starts with its creation time, 8 hex digits of
    epoch seconds ("resp_68659e7d…" is 2025-07-02T21:02:53, the Date header of that exchange; every
    dated record of the cassette sources agrees). Placeholder ids (scrubbed, hand-written) decode to
    no time after 2023 and are not used."""
    try:
        when = parse_timestamp(rec.get("recorded_at"))
    except LogLineError:
        when = None
    if when is not None:
        return when
    rid = str(rec.get("response_id") or "")
    if not rid.startswith("resp_") or len(rid) <= 13:
        return None
    try:
        made = float(int(rid[5:13], 16))
    except ValueError:
        return None
    return made if IDS_SINCE <= made <= time.time() else None


def fallback_model(rec: Mapping[str, Any]) -> str | None:
    # Azure / Bedrock bodies carry no model: what the response named, else the deployment in the path.
    return rec.get("response_model") or rec.get("path") or None


# A snapshot's date after its alias: "-0301" (2023), "-2024-08-06" (since).
SNAPSHOT = re.compile(r"-(?:\d{4}|\d{4}-\d{2}-\d{2})")


def request_of(rec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The body to count, or None when the model that ran is unknown. Elsewhere than on Azure it is
    the body, with an alias model replaced by the dated snapshot the response names. Azure OpenAI
    routes by the deployment in the path and ignores the body's ``model`` (clients fill it with the
    deployment's name, "openllmetry-testing", or with any model name: activeagent sends "gpt-4" to a
    gpt-4.1 deployment): the model is the one the response names, if that is one of OpenAI's; a
    scrubbed one ("AZURE_DEPLOYMENT-2025-04-14") leaves it unknown.
    """
    req: Mapping[str, Any] = rec["request"]
    model = str(rec.get("response_model") or "")
    if not str(rec.get("host") or "").endswith(".openai.azure.com"):
        # An alias ("gpt-3.5-turbo") names whichever snapshot it pointed to then; a response that
        # names a dated snapshot of it says which one ran (boxcars' 2023 bodies: gpt-3.5-turbo-0301).
        sent = req.get("model")
        if (
            isinstance(sent, str)
            and sent
            and model.startswith(sent)
            and SNAPSHOT.fullmatch(model[len(sent) :])
        ):
            return {**req, "model": model}
        return req
    return {**req, "model": model} if _openai_model(model) else None


def _openai_model(name: str) -> bool:
    return name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-"))


def cell(errs: list[tuple[int, int]], counts: bool = False) -> str:
    """n, exact share (and with ``counts`` how many: a share rounds), share within one token, median
    relative error."""
    if not errs:
        return f"{'-':>5} {'':>6} {'':>6} {'':>7}" + (f" {'':>5}" if counts else "")
    n = len(errs)
    hits = sum(1 for c, r in errs if c == r)
    near = sum(1 for c, r in errs if abs(c - r) <= 1) / n
    median = statistics.median(abs(c - r) / r for c, r in errs)
    return f"{n:>5} {hits / n:6.1%} {near:6.1%} {median:7.2%}" + (f" {hits:>5}" if counts else "")


def main(argv: list[str]) -> int:
    detail = "--detail" in argv
    split = "--split" in argv
    args = [a for a in argv if not a.startswith("--")]
    pooled = "--pooled" in argv
    cassettes = cassettes_root(argv)
    path = cassettes if cassettes is not None else Path(args[0]) if args else DEFAULT
    if not path.exists():
        print(f"bench_counting: skipped, no recorded data at {path}")
        return 0
    if pooled:
        roots = [root for root in CASSETTE_SOURCES if root.exists()]
        source_records: Iterator[dict[str, Any]] = iter(
            [r for r in records(path) if held_out(r)] + list(pooled_cassettes(roots))
        )
        path = Path(" + ".join(str(p) for p in (path, *roots)))
    elif cassettes is not None and cassettes in CASSETTE_SOURCES:
        # A later source alone: without the bodies an earlier one holds (they count there).
        earlier = [root for root in CASSETTE_SOURCES if root.exists() or root == cassettes]
        source_records = pooled_cassettes(earlier, only=cassettes)
    elif cassettes is not None:
        source_records = iter([r for r in load_cassettes(path) if clean(r)])
    else:
        source_records = records(path)
    counter = PromptCounter(load_model_table())
    columns: tuple[str, ...] = ("training", "dev", "final") if split else ("training", "held-out")
    if pooled or cassettes is not None:  # held-out records only: no training column
        columns = columns[1:]
    table: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    worst: list[tuple[float, str, int, int]] = []
    skipped = 0
    for rec in source_records:
        reported = rec.get("total_input_tokens")
        rows = kinds(rec)
        if not isinstance(reported, int) or reported <= 0 or not rows:
            skipped += 1
            continue
        body = request_of(rec)
        if body is None:
            skipped += 1
            continue
        try:
            prompt = adapters.parse_request(body, provider=rec["provider"], model=fallback_model(rec))
            counted = counter.tokenize(prompt).count
        except CachewardenError:
            skipped += 1
            continue
        where = part(rec)
        column = where if split or where == "training" else "held-out"
        for row in rows:
            table[(row, column)].append((counted, reported))
        if detail and rows[0] in ("OpenAI chat with tools", "OpenAI Responses", "Anthropic (estimated)"):
            family = prompt.model.split("-20")[0]
            table[(f"  {rows[0].split(' (')[0][:18]}: {family}", column)].append((counted, reported))
        if where != "final" and counted != reported:
            worst.append((abs(counted - reported) / reported, rec["source"], counted, reported))
    held = "dev | final by cassette" if split else "pooled"
    source = HELD_OUT_SOURCE.rstrip(":")
    if pooled or cassettes is not None:
        source = "held-out records only" if pooled else "all of it"
    print(f"recorded data: {path} (held out: {source}, {held}; {skipped} records skipped)")
    counts = "--counts" in argv
    head = f"{'n':>5} {'exact':>6} {'±1':>6} {'median':>7}" + (f" {'#ex':>5}" if counts else "")
    titles = {"dev": "held-out dev", "final": "held-out final"}
    print(f"  {'':<36} " + "   ".join(f"{titles.get(c, c):^27}" for c in columns))
    print(f"  {'requests':<36} " + "   ".join(head for _ in columns))
    extra = sorted({k for k, _ in table if k not in ROWS})
    for row in (*ROWS, *extra):
        print(f"  {row:<36} " + "   ".join(cell(table[(row, c)], counts) for c in columns))
    if detail:
        for err, source, counted, reported in sorted(worst, reverse=True)[:20]:
            print(f"    {err:7.2%} counted {counted:>6} reported {reported:>6}  {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
