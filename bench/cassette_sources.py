"""The held-out cassette sources of bench_counting.py / bench_replay.py, and how to unpack them again.

The cassette sources (/tmp/acc4/raw, /tmp/acc5/raw, /tmp/acc6/raw by default) are third-party data: never
copied into this repository, and gone with the machine they were unpacked on. This module holds
what they were made from — each repository, the commit read, its licence, the rule that picks its
files — so that the same held-out records can be made again on a new machine, from clones (or bare
mirrors) of those repositories at those commits:

    python bench/cassette_sources.py unpack GIT_DIR_PATTERN [--set acc4|acc5|acc6|all]

``GIT_DIR_PATTERN`` names each repository's git directory with ``{owner}`` and ``{name}`` (e.g.
``/src/{owner}+{name}/.git`` or ``/mirrors/{owner}+{name}/repo``); a work tree's directory works too.
Files are read from the listed commit with ``git cat-file`` (nothing is checked out) and written as
``ROOT/OWNER+NAME/PATH``, the layout cassette_records.py reads. A repository that is missing, or
that lacks the commit, is reported and skipped (exit 1 at the end); the rest is still unpacked.

Selection rules, fixed before the first run of each source:

* ``cassette-dir`` (acc4): every ``.yaml|.yml|.yaml.gz|.yml.gz`` file with a directory named
  ``*cassette*`` (any case) on its path;
* ``openai-vcr`` (acc5, acc6): every such file, anywhere, whose (decompressed) text is a VCR cassette
  (``interactions:``, which ``http_interactions:`` contains) naming an OpenAI host
  (``api.openai.com`` or ``openai.azure.com``).

Beside each repository's files, ``.edited-bodies.json`` lists the interactions whose request body
its history shows edited after the response was recorded (``edited``): the reader marks those
records suspect. It needs the history up to the commit (a shallow clone finds nothing: then every
body is taken as recorded). About a minute for all 47 repositories.

Unpacked from the commits below on 2026-12-03, acc4 and acc5 gave every figure the README printed
for them (bench_counting.py --pooled --split: the same n and exact share in every row); acc6 was
first unpacked that day.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import importlib.util
import json
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

SUFFIXES = (".yaml", ".yml", ".yaml.gz", ".yml.gz")
OPENAI_HOSTS = (b"api.openai.com", b"openai.azure.com")


@dataclass(frozen=True)
class Source:
    repo: str  # owner/name on GitHub
    commit: str
    licence: str
    rule: str  # "cassette-dir" or "openai-vcr"


@dataclass(frozen=True)
class CassetteSet:
    name: str
    root: Path
    sources: tuple[Source, ...]


def _set(name: str, rule: str, rows: str) -> CassetteSet:
    sources = []
    for line in rows.strip().splitlines():
        repo, commit, licence = line.split(maxsplit=2)
        sources.append(Source(repo, commit, licence, rule))
    return CassetteSet(name, Path(f"/tmp/{name}/raw"), tuple(sources))


SETS = (
    _set(
        "acc4",
        "cassette-dir",
        """
        crmne/ruby_llm fb5a49bf04da78d3e74496431ad1c99df5e7e5f0 MIT
        activeagents/activeagent a76142897fc61fe7a6f53d28b030fff35a46c3d6 MIT
        traceloop/openllmetry 93429cfb9767e6b51db6cb35f6b70f758117669a Apache-2.0
        Arize-ai/openinference 1fe497f1d9f45a07eee55d97fe185e020560f9c7 Apache-2.0
        jackmpcollins/magentic 58b72cf58134b9b888a9518932465d7187448e92 MIT
        simonw/llm f3f4f29c6e5e623c3776cbf6455dda2345638214 Apache-2.0
        pydantic/logfire e484a6b53a0df3062d304ce258573e387cf3140a MIT
        open-telemetry/opentelemetry-python-contrib 466ae4c00de77d1f54f77a9600f1d08eba2306b5 Apache-2.0
        """,
    ),
    _set(
        "acc5",
        "openai-vcr",
        """
        posit-dev/chatlas ea4531130e56d3c5bb003d87a1792dd942554b8d MIT
        tidyverse/ellmer 57e3d72d5dbe1a8bce4a3017b3468ad5fe3b2945 MIT
        DataDog/dd-trace-py 3bb9ecda22830e3303b18b0ffa5abe7586aef6a7 Apache-2.0/BSD-3-Clause
        DataDog/dd-apm-test-agent 32c02b9bc19ac3c5a7b57a7b896c1290123bf09a BSD-3-Clause
        langchain-ai/langsmith-sdk bc8dd672a7b9e7d09bcb2fdada0baff80700f9b0 MIT
        braintrustdata/braintrust-sdk-python a7053505083fb7b7ae6ed1c10a4141a0d8673cc4 Apache-2.0
        braintrustdata/braintrust-sdk-ruby 1ca9a9991d5ea9d161192b360afe66a760abb9d3 Apache-2.0
        newrelic/newrelic-python-agent e3c9c1d035a5889d70ef6ce1bb90379b70040c4d Apache-2.0
        simonw/llm-openai-plugin 4f1787d1c81523ceae1dd2b34075fa9632502795 Apache-2.0
        alexrudall/ruby-openai 62938e02bb83e9f243ad2447805bc461d5d126fe MIT
        Future-House/ldp f0a29f1f3e6313b44e131bb394a13e64920cec73 Apache-2.0
        Future-House/paper-qa d2c3c698fdf06986aa021812ab3186d3696438d8 Apache-2.0
        Future-House/llm-client ce9ef5dc45a73341218d99c9a4c26b616414495b Apache-2.0
        Future-House/aviary 826577f332a02ec2f5883cdb042fb12f14b4c7b3 Apache-2.0
        sublayerapp/sublayer d103e662e25109ba54e1efb2e049d7f2fd29d371 MIT
        elastic/elastic-otel-python-instrumentations 935ab4fafc7182be2e00e70f0f9881f8ec84085a Apache-2.0
        instructor-ai/instructor-rb e96ab3b4e9c8c1d08c8f784c0ac091f33a12a916 MIT
        OlympiaAI/raix 7e1b0da45fe88f526388171fad321115c09259ec MIT
        AgentOps-AI/agentops a855a92dfaa7fd4423f9a68b1ba0295a3a72da80 MIT
        Scale3-Labs/langtrace-python-sdk b62abd9b083bbfb04a5b5301f309cb7deaf28187 Apache-2.0
        datasette/datasette-extract 4456f54f0cebf6aee9d0d5f7ee06f5988b34402e Apache-2.0
        datasette/datasette-enrichments-gpt 1bede50ad21d7ae9fa663fd2a199bcd46b52cf6e Apache-2.0
        datasette/datasette-query-assistant ee588baa5b9958a381f6a13a14affd484f4165ca Apache-2.0
        DataDog/dd-trace-js 5735ffe7643cd9a984a8d21bde2131cc2fbe3a50 Apache-2.0/BSD-3-Clause
        """,
    ),
    # Stop 36: the projects found after the rules of acc4 / acc5, chosen (and the dev / final split
    # kept) before any of their records was counted. Left out: Arize-ai/phoenix (Elastic License, not
    # an open-source one) and two AGPL projects.
    _set(
        "acc6",
        "openai-vcr",
        """
        lmnr-ai/lmnr-python 67dea392f4961bfcf7b5cde3733aaa4a452bb9f9 Apache-2.0
        BoxcarsAI/boxcars 2475765a7ca590101aa927dbea4267cb34835903 MIT
        vicentereig/dspy.rb 377298ba87e35d545c8c7002e921d5a034b1149a MIT
        Significant-Gravitas/Auto-GPT-test-cassettes e0f7f4a599620b139e72b8233eb0defdc8339b45 MIT
        signalfx/splunk-otel-python-contrib 9f5af26be6699901f48d6a7983fd4a72cc885b7e Apache-2.0
        llmrb/llm 9ecfe454ccd5bb0f1f7399346eb70e1356a6a8d2 0BSD
        langchain-ai/langchain-azure 9870d265907919db547ab4d1fbe210ffb6daf367 MIT
        eidolon-ai/typedai 05be7c2babf27dd32a7653441a9944a1f77a9f1b MIT
        livingbio/gpt-fn 4c266e9ea7c90a7b12b8c0ff88fd691428ed6cf5 MIT
        alchaplinsky/regent d3eb8ae6fa69455c527031759d59d2e57e453c89 MIT
        rungalileo/galileo-python a1a0821789e77b4e6ff9bd3fc8cb862fd256d2ca Apache-2.0
        MagnivOrg/prompt-layer-library c19662d2a2e50a2fc7f8af6d24ba6e9c0a9ac430 Apache-2.0
        superduper-io/superduper 6d192e7bf255f913b445a44dc9486e7013ddc6bc Apache-2.0
        foobara/open-ai-api-rack 4c4bcf3db275964161a886878ec57d79b8d72408 MIT
        genai-impact/ecologits 2d0a1c76358a1aad0c530d47794e37465ad029e8 MPL-2.0
        """,
    ),
)


class SourceError(Exception):
    """A repository that cannot be read at its commit (one line, for the report)."""


def _git(git_dir: Path, *args: str) -> bytes:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SourceError(lines[-1] if lines else f"git {args[0]} failed")
    return done.stdout


def _git_dir(pattern: str, repo: str) -> Path:
    owner, name = repo.split("/", 1)
    path = Path(pattern.format(owner=owner, name=name))
    return path / ".git" if (path / ".git").exists() else path


def picked(rule: str, path: str, read: Callable[[], bytes]) -> bytes | None:
    """The bytes of ``path`` when ``rule`` takes it, else None (``read`` fetches them when needed)."""
    if not path.lower().endswith(SUFFIXES):
        return None
    if rule == "cassette-dir":
        return read() if any("cassette" in part.lower() for part in path.split("/")[:-1]) else None
    data = read()
    try:
        text = gzip.decompress(data) if path.lower().endswith(".gz") else data
    except (OSError, EOFError, zlib.error):
        return None  # not a readable gzip: no cassette the reader could use either
    if b"interactions:" in text and any(host in text for host in OPENAI_HOSTS):
        return data
    return None


@functools.cache
def _reader() -> ModuleType:
    """cassette_records.py, the cassettes' reader beside this file (bench/ is no package)."""
    path = Path(__file__).with_name("cassette_records.py")
    spec = importlib.util.spec_from_file_location("cassette_records", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _versions(git_dir: Path, commit: str, paths: set[str]) -> dict[str, list[str]]:
    """The commits up to ``commit`` that changed each of ``paths``, newest first (renames are not
    followed: a cassette's versions under an older name are not read)."""
    log = _git(
        git_dir, "-c", "core.quotePath=false", "log", "--format=%x00%H", "--name-only", "--no-renames", commit
    )
    found: dict[str, list[str]] = {}
    for entry in log.decode("utf-8", "surrogateescape").split("\0")[1:]:
        sha, *changed = entry.strip().splitlines()
        for path in changed:
            if path in paths:
                found.setdefault(path, []).append(sha)
    return found


def edited(source: Source, git_dir: Path, taken: dict[str, bytes]) -> dict[str, dict[str, str]]:
    """{path: {interaction index: last commit with its body as recorded}} for the interactions of
    the ``taken`` files whose request body the repository's history shows edited after their
    response was recorded (cassette_records.edited_bodies)."""
    reader = _reader()
    found: dict[str, dict[str, str]] = {}
    for path, commits in _versions(git_dir, source.commit, set(taken)).items():
        shas = commits[1:]  # commits[0] made the version taken
        if not shas:
            continue  # one version: nothing to compare it with
        older: list[bytes] = []
        for sha in shas:
            try:
                older.append(_git(git_dir, "cat-file", "blob", f"{sha}:{path}"))
            except SourceError:
                older.append(b"")  # deleted in that commit, or a blob the clone lacks
        hits = reader.edited_bodies(taken[path], older)
        if hits:
            found[path] = {str(index): shas[at] for index, at in sorted(hits.items())}
    return found


def unpack(source: Source, git_dir: Path, root: Path) -> Iterator[str]:
    """Writes the files ``source`` takes under ``root/OWNER+NAME/``, and beside them the interactions
    whose request bodies were edited after recording (``edited``); yields each path taken."""
    _git(git_dir, "cat-file", "-e", f"{source.commit}^{{commit}}")
    listing = _git(git_dir, "ls-tree", "-r", "-z", "--name-only", source.commit)
    target = root / source.repo.replace("/", "+", 1)
    taken: dict[str, bytes] = {}
    for path in filter(None, listing.decode("utf-8", "surrogateescape").split("\0")):

        def read(path: str = path) -> bytes:
            return _git(git_dir, "cat-file", "blob", f"{source.commit}:{path}")

        try:
            data = picked(source.rule, path, read)
        except SourceError:
            continue  # a blob the clone lacks (a partial clone's large file): not taken
        if data is None:
            continue
        out = target / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        taken[path] = data
        yield path
    if taken:
        found = edited(source, git_dir, taken)
        (target / _reader().EDITED_FILE).write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="each source: set, repository, commit, licence, rule")
    listing.add_argument("--set", choices=[s.name for s in SETS] + ["all"], default="all")
    run = sub.add_parser("unpack", help="unpack the sources from git directories")
    run.add_argument("pattern", help="each repository's git directory, with {owner} and {name}")
    run.add_argument("--set", choices=[s.name for s in SETS] + ["all"], default="all")
    run.add_argument("--root", type=Path, help="where to unpack (default: the set's /tmp/NAME/raw)")
    opts = parser.parse_args(argv)
    if opts.command == "unpack":
        try:
            opts.pattern.format(owner="owner", name="name")
        except (KeyError, IndexError, ValueError) as exc:
            parser.error(f"pattern {opts.pattern!r}: only {{owner}} and {{name}} can be filled in ({exc!r})")
    chosen = [s for s in SETS if opts.set in ("all", s.name)]
    if opts.command == "list":
        for cset in chosen:
            for src in cset.sources:
                print(f"{cset.name}  {src.repo:<46} {src.commit}  {src.licence:<24} {src.rule}")
        return 0
    failed = 0
    for cset in chosen:
        root = opts.root if opts.root is not None else cset.root
        for src in cset.sources:
            try:
                taken = sum(1 for _ in unpack(src, _git_dir(opts.pattern, src.repo), root))
            except SourceError as exc:
                failed += 1
                print(f"{cset.name} {src.repo}: skipped ({exc})")
                continue
            print(f"{cset.name} {src.repo}@{src.commit[:8]}: {taken} files -> {root}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
