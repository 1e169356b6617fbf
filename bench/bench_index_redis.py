"""Benchmark of the shared (Redis) prefix index against the in-memory one, in the same process.

Workload as bench/bench_index.py: a 4,000-token prompt sharing 3,600 tokens with 10 earlier turns
of its conversation, behind 1,000 other conversations under the same 1,203-token system prompt.
Measured per backend: lookup and insert latency (p50 / p99 over 300 calls) and the engine's
analysis time per request (an OpenAI chat conversation of ~6,000 tokens, one turn per request,
each body read as the proxy reads it, the backends taking turns conversation by conversation;
each request is a lookup and an insert of the backend under test, plus the model-blind index's,
which the proxy keeps in memory whatever ``--index`` says: it only serves attribution against
the replica's own history), as wall time and as the analysing thread's CPU time (the wall time
holds Redis' own CPU too when Redis shares the cores: a loaded machine then runs the server's
scripts while the client waits, or preempts the client on the send). Backends:
``MemoryIndex``, ``RedisIndex`` alone
(writes waited for, or sent behind: then "insert" is the time to send it without waiting for
its reply, and a lookup follows it on the same connection), and what ``open_index("redis://…")``
returns (Redis with writes behind + local mirror). Also: the records one insert writes and
Redis' memory per million tokens held (``INFO memory``).

Redis runs locally (a private redis-server on a free port, no persistence), so the figures are
its CPU cost plus a loopback round trip; add the network's round trips in production (an
analysis waits for one, two when a lookup stops early in a long prompt). It runs on a core of its
own (the idlest one at the start; the bench on the others), as a Redis on its own host does: a
loopback send is a "sync" wake-up, and the kernel would otherwise run the server's script on the
sender's core while the sender waits, even for a write it does not wait for (measured: a send of
13 µs of CPU then took 125 µs). ``--shared-cores`` leaves both where the scheduler puts them. On a
machine others load, either way is noisy: a pinned bench cannot leave a busy core.

Run: ``python bench/bench_index_redis.py`` (``--repeat 3``: the engine rows three times, then
their ranges, each run's load average and hypervisor steal beside it: a run during which the host
gave much of this machine's CPU time to other guests timed them too) — prints a table; skips (exit 0) without
redis-server or the redis package. About 30 s on 2 cores, ~15 s more per repeat. ``--shipped
--rounds 30 --repeat 2``: only memory and what the proxy ships, over more conversations (~10 s):
run it on two versions of the code one after the other to tell them apart (the ratio moves with
the machine's load from one sitting to the next more than a small change moves it). ``--split
--rounds 40``: what the proxy ships, live, with Redis' replies replayed and nothing sent, and
replayed with one PING to Redis an analysis (``split_row``): how much of what Redis adds is the
client's own Python (a figure steady enough to compare two versions of the code by in one
sitting) and how much waking an idle Redis costs the sender.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cachewarden.proxy.engine.engine import Engine
from cachewarden.proxy.engine.index.base import PrefixIndex
from cachewarden.proxy.engine.index.memory import MemoryIndex
from cachewarden.proxy.engine.reading import ConversationReader

SCOPE = "tenant\x1fopenai\x1fgpt-4o\x1f"
VOCAB = 200_000
SYSTEM = 1_203
PROMPT = 4_000
SHARED = 3_600
OTHERS = 1_000
CALLS = 300


def _idle(cpus: list[int], seconds: float = 0.5) -> dict[int, int]:
    """Idle ticks of each CPU over ``seconds`` (/proc/stat; empty where there is none)."""

    def ticks() -> dict[int, int]:
        try:
            lines = Path("/proc/stat").read_text().splitlines()
        except OSError:
            return {}
        out = {}
        for line in lines:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                out[int(name[3:])] = int(fields[3]) + int(fields[4])  # idle + iowait
        return out

    before = ticks()
    time.sleep(seconds)
    after = ticks()
    return {c: after[c] - before[c] for c in before if c in after}


def _steal_ticks() -> tuple[int, int]:
    """Ticks the hypervisor ran something else on this machine's CPUs, and all ticks, so far
    (/proc/stat's ``steal``; zeros where there is none)."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def _steal_since(before: tuple[int, int]) -> float:
    """The share of CPU time stolen since ``before`` (``_steal_ticks``): a run with much of it timed
    other guests' work too (a shared host), not the code."""
    steal, total = _steal_ticks()
    return (steal - before[0]) / max(total - before[1], 1)


def _pin(server_pid: int) -> str:
    """The server on the CPU this process may use that was idlest just now (other users of a shared
    machine), this process on the others (see the module doc); says where each runs."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if len(cpus) < 2:
        return "one CPU: redis-server and the bench share it"
    idle = _idle(cpus)
    server = max(cpus, key=lambda c: (idle.get(c, 0), c))
    rest = [c for c in cpus if c != server]
    os.sched_setaffinity(server_pid, {server})
    os.sched_setaffinity(0, set(rest))
    return f"redis-server on CPU {server}, the bench on CPU {','.join(map(str, rest))}"


@contextmanager
def redis_server(pin: bool = False) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        args += ["no", "--dir", tmp]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        placed = _pin(proc.pid) if pin else "redis-server and the bench where the scheduler puts them"
        try:
            import redis

            for _ in range(500):
                try:
                    redis.Redis(port=port).ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.01)
            print(placed)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _pct(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return qs[49], qs[98]


def _timed(fn: Callable[[int], object], n: int = CALLS) -> tuple[float, float]:
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    return _pct(samples)


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(n)]


def _index_row(index: PrefixIndex) -> tuple[float, ...]:
    rng = random.Random(7)
    system = _tokens(rng, SYSTEM)
    query = [*system, *_tokens(rng, PROMPT - SYSTEM)]
    index.clear()
    for i in range(OTHERS):
        index.insert(SCOPE, [*system, *_tokens(rng, 120)], now=i * 0.001)
    for _ in range(10):
        tail = _tokens(rng, 50)
        tail[0] = (query[SHARED] + 1) % VOCAB
        index.insert(SCOPE, [*query[:SHARED], *tail], now=100.0)
    match = index.lookup(SCOPE, query, now=200.0, ttl=300)
    assert match.common_prefix_tokens == SHARED, match
    lookup = _timed(lambda _: index.lookup(SCOPE, query, now=200.0, ttl=300))
    warm = [[*query[:SHARED], *_tokens(rng, PROMPT - SHARED)] for _ in range(CALLS)]
    cold = [_tokens(rng, PROMPT) for _ in range(CALLS)]
    insert_warm = _timed(lambda i: index.insert(SCOPE, warm[i], now=201.0))
    insert_cold = _timed(lambda i: index.insert(SCOPE, cold[i], now=201.0))
    index.clear()
    return (*lookup, *insert_warm, *insert_cold)


def layout_row(url: str) -> tuple[int, float]:
    """Records one 4,000-token insert writes, and Redis memory per million tokens held (250 distinct
    4,000-token prompts in a fresh namespace: the worst case, no block shared)."""
    import redis
    from cachewarden.proxy.engine.index.redis import RedisIndex

    client = redis.Redis.from_url(url)
    client.flushall()
    index = RedisIndex(client, namespace="layout")
    rng = random.Random(11)
    index.insert(SCOPE, _tokens(rng, PROMPT), now=0.0)
    # The nodes' members, and the full blocks' values in the scope's values hash.
    keys = list(client.scan_iter(match=b"layout:*"))
    records = sum(int(client.hlen(k) if k.endswith(b":v") else client.zcard(k)) for k in keys)
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    for i in range(250):
        index.insert(f"{SCOPE}{i % 10}", _tokens(rng, PROMPT), now=float(i), ttl=300)
    used = int(client.info("memory")["used_memory"]) - before
    client.flushall()
    return records, used / 2**20 / (250 * PROMPT / 1e6)


ROUNDS = 7  # conversations per backend, taken in turns (see engine_rows)


def _conversation() -> list[bytes]:
    """The bodies of a 60-turn OpenAI chat conversation under a ~5,000-token system prompt."""
    rules = (f"Rule {i}: answer questions about topic {i} from section {i}, quote it." for i in range(230))
    policy = "\n".join(rules)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": policy}]
    bodies = []
    for turn in range(60):
        msgs = [*msgs, {"role": "user", "content": f"Question {turn}: what does rule {turn} say?"}]
        bodies.append(json.dumps({"model": "gpt-4.1", "messages": msgs}).encode())
        msgs = [*msgs, {"role": "assistant", "content": f"Rule {turn} says to quote section {turn}."}]
    return bodies


def _analysed(
    engine: Engine,
    reader: ConversationReader,
    bodies: list[bytes],
    r: int,
    after: Callable[[], object] | None = None,
) -> list[float]:
    """The analysing thread's CPU time of each turn of conversation ``r`` (tenant ``t{r}``);
    ``after`` runs after each, untimed."""
    cpu = []
    for turn, raw in enumerate(bodies):
        prompt = reader.parse(reader.load(raw, tenant=f"t{r}"), "openai-chat", tenant=f"t{r}")
        c0 = time.thread_time()
        engine.analyse(prompt, tenant=f"t{r}", now=1000.0 + 100 * r + turn)
        cpu.append(time.thread_time() - c0)
        if after is not None:
            after()
    return cpu


def _replayed(replies: Iterator[Any]) -> Any:
    """The next recorded reply (``split_row``): the replayed calls must be the recorded ones."""
    try:
        return next(replies)
    except StopIteration:
        raise RuntimeError(
            "the replay asked for more replies than the live run had: its calls differ"
        ) from None


def split_row(url: str, rounds: int) -> dict[str, tuple[float, float]]:
    """CPU p50 of ``Engine.analyse`` on what the proxy ships (``open_index``), each beside the
    in-memory one's (their conversations alternating): live; with Redis' replies replayed and
    nothing sent; and replayed with a PING sent to Redis in place of an analysis' first send (its
    lookup, the one send of the live run that finds Redis idle). The live run's replies are
    recorded; then a fresh engine makes the same calls in the same order, its channel reading the
    recorded replies. "replayed" is the client's own Python (the prompt's blocks, the script
    calls, the channel, the merge with the mirror): free of the I/O's noise, it tells two versions
    of that code apart in one sitting. "replayed + PING" adds what waking an idle Redis costs the
    sender, and nothing of Redis' work (the PONGs are read after each analysis, untimed)."""
    import socket
    from unittest import mock

    import redis
    from cachewarden.proxy.engine.index import redis_writes
    from cachewarden.proxy.engine.index.open_index import open_index

    bodies = _conversation()
    replies: list[Any] = []
    read = redis_writes.Channel._reply

    def recorded(chan: redis_writes.Channel) -> Any:
        reply = read(chan)
        replies.append(reply)
        return reply

    def alternating(engine: Engine, after: Callable[[], object] | None = None) -> tuple[float, float]:
        memory_engine = Engine(index=MemoryIndex(), wide_index=MemoryIndex())
        memory_reader, reader = ConversationReader(), ConversationReader()
        memory: list[float] = []
        theirs: list[float] = []
        for r in range(rounds):
            memory += _analysed(memory_engine, memory_reader, bodies, r)
            theirs += _analysed(engine, reader, bodies, r, after)
        # An analysis that failed over to the mirror would time the mirror alone.
        errors = getattr(engine.index, "errors_total", 0)
        if errors:
            raise RuntimeError(f"{errors} calls to Redis failed: the figures would be the mirror's")
        return statistics.median(memory), statistics.median(theirs)

    rows: dict[str, tuple[float, float]] = {}
    with mock.patch.object(redis_writes.Channel, "_reply", recorded):
        live_engine = Engine(index=open_index(url), wide_index=MemoryIndex())
        live_engine.index.clear()
        rows["live"] = alternating(live_engine)
        live_engine.index.clear()
    kw = redis.Redis.from_url(url).connection_pool.connection_kwargs
    with socket.create_connection((kw["host"], kw["port"])) as pinged:
        pinged.setblocking(False)

        first = [True]

        def ping(conn: Any, data: bytes) -> None:
            if first[0]:
                os.write(pinged.fileno(), b"PING\r\n")
                first[0] = False

        def pongs() -> None:
            first[0] = True
            try:
                while pinged.recv(65536):
                    pass
            except BlockingIOError:
                pass

        replays: list[tuple[str, Callable[[Any, bytes], object], Callable[[], None] | None]] = [
            ("replayed", lambda conn, data: None, None),
            ("replayed + PING", ping, pongs),
        ]
        for db, (name, send, after) in enumerate(replays, 1):
            pending = iter(replies)  # the clear() after the live run read a few more: never asked for
            # Another database of the same server: a channel of its own (one is shared per server).
            other = url.rsplit("/", 1)[0] + f"/{db}"
            with (
                mock.patch.object(redis_writes, "_send_all", send),
                mock.patch.object(redis_writes.Channel, "_reply", lambda chan, it=pending: _replayed(it)),
            ):
                engine = Engine(index=open_index(other), wide_index=MemoryIndex())
                rows[name] = alternating(engine, after)
    return rows


def engine_rows(
    backends: dict[str, Callable[[], PrefixIndex]], rounds: int = ROUNDS
) -> dict[str, tuple[float, float, float]]:
    """``Engine.analyse`` per request: a 60-turn conversation, ``rounds`` times per backend, each
    body read as the proxy reads it (``ConversationReader``: parsed from where it extends the
    tenant's previous body, so the counter resumes the previous stream; only ``analyse`` is timed).
    The backends take turns conversation by conversation (in a rotating order), so that a load
    spike of the shared machine weighs on all of them alike rather than on whichever ran then."""
    bodies = _conversation()
    engines: dict[str, tuple[Engine, ConversationReader]] = {}
    tokens = 0
    for name, make in backends.items():
        # The model-blind index stays local in the proxy (cli/proxy.py build_engine): it is only
        # for attribution against this replica's own history. The memory row has two, as there.
        engine = Engine(index=make(), wide_index=MemoryIndex())
        reader = ConversationReader()
        engines[name] = (engine, reader)
        engine.index.clear()
        engine.wide_index.clear()
        for raw in [*bodies[:5], bodies[-1]]:  # warm the tokenizer memo: all backends do the same work
            prompt = reader.parse(reader.load(raw, tenant="warm"), "openai-chat", tenant="warm")
            tokens = engine.analyse(prompt, tenant="warm", now=0.0).tokenized.count
    samples: dict[str, list[float]] = {name: [] for name in backends}
    cpu: dict[str, list[float]] = {name: [] for name in backends}
    names = list(backends)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            engine, reader = engines[name]
            for turn, raw in enumerate(bodies):
                prompt = reader.parse(reader.load(raw, tenant=f"t{r}"), "openai-chat", tenant=f"t{r}")
                t0, c0 = time.perf_counter(), time.thread_time()
                engine.analyse(prompt, tenant=f"t{r}", now=1000.0 + 100 * r + turn)
                samples[name].append(time.perf_counter() - t0)
                cpu[name].append(time.thread_time() - c0)
    for engine, _ in engines.values():
        engine.index.clear()
        engine.wide_index.clear()
    return {
        f"{name} ({tokens:,} tok)": (*_pct(samples[name]), statistics.median(cpu[name])) for name in names
    }


def index_rows(backends: dict[str, Callable[[], PrefixIndex]], url: str) -> None:
    """Lookup and insert latency of each backend, and the Redis layout's records and memory."""
    rows = {name: _index_row(make()) for name, make in backends.items()}
    print(f"prefix index, {PROMPT:,}-token prompt sharing {SHARED:,}; {CALLS} calls; µs")
    head = ("lookup p50", "p99", "insert warm p50", "p99", "insert cold p50", "p99")
    print(f"{'backend':<22}" + "".join(f"{h:>16}" for h in head) + f"{'lookup ×mem':>13}")
    base = rows["memory"][0]
    for name, row in rows.items():
        print(f"{name:<22}" + "".join(f"{v * 1e6:>16.0f}" for v in row) + f"{row[0] / base:>13.1f}")
    records, mib = layout_row(url)
    print(
        f"\nRedis layout: {records} records for one {PROMPT:,}-token insert "
        f"({PROMPT / records:.0f} tokens "
        f"a record); {mib:.1f} MiB of Redis memory per million tokens held"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--shared-cores", action="store_true", help="do not give redis-server a core of its own"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, metavar="N", help="the engine rows N times, then their ranges"
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, metavar="N", help=f"conversations a backend (default {ROUNDS})"
    )
    parser.add_argument(
        "--shipped",
        action="store_true",
        help="only the engine rows of memory and of what the proxy ships (redis+local): the quick "
        "figure to compare two versions of the code by, run after one another",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="only what the proxy ships: live, with Redis' replies replayed (nothing sent: the client's "
        "Python) and replayed with a PING to Redis an analysis (a wake-up of an idle Redis); split_row",
    )
    opts = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("skipped: redis-server is not installed (Debian: apt-get install redis-server)")
        return 0
    try:
        import redis
    except ImportError:
        print("skipped: the redis package is not installed (pip install 'cachewarden[redis]')")
        return 0
    from cachewarden.proxy.engine.index.open_index import open_index
    from cachewarden.proxy.engine.index.redis import RedisIndex

    with redis_server(pin=not opts.shared_cores) as url:
        backends: dict[str, Callable[[], PrefixIndex]] = {
            "memory": MemoryIndex,
            "redis": lambda: RedisIndex(redis.Redis.from_url(url)),
            # Inserts and marks sent by a thread of their own, beside the caller (what open_index uses).
            "redis, writes behind": lambda: RedisIndex(redis.Redis.from_url(url), write_behind=True),
            "redis+local": lambda: open_index(url),
        }
        if opts.split:
            head = f"engine.analyse CPU p50, {opts.rounds} conversations each, ms"
            print(f"\n{head}   (replayed: Redis' replies replayed, nothing sent: the client's Python)")
            for name, (beside, theirs) in split_row(url, opts.rounds).items():
                print(
                    f"redis+local {name:<16} {theirs * 1e3:.3f}   memory beside it {beside * 1e3:.3f}"
                    f"   ×mem {theirs / beside:.2f}"
                )
            return 0
        if opts.shipped:
            backends = {name: backends[name] for name in ("memory", "redis+local")}
        else:
            index_rows(backends, url)
        ratios: dict[str, list[tuple[float, float, float, float]]] = {}
        for _ in range(max(opts.repeat, 1)):
            print(
                f"\nengine.analyse per request (OpenAI chat, a turn a request, {opts.rounds} conversations "
                f"each), ms; load average {os.getloadavg()[0]:.2f} before"
            )
            stolen = _steal_ticks()
            erows = engine_rows(backends, opts.rounds)
            ebase, _, cbase = next(iter(erows.values()))
            load, steal = os.getloadavg()[0], _steal_since(stolen)
            for name, (p50, p99, c50) in erows.items():
                print(
                    f"{name:<38} p50 {p50 * 1e3:>7.2f}   p99 {p99 * 1e3:>7.2f}   ×mem {p50 / ebase:>5.2f}"
                    f"   CPU p50 {c50 * 1e3:>6.2f}   ×mem {c50 / cbase:>5.2f}"
                )
                ratios.setdefault(name.split(" (")[0], []).append((p50 / ebase, c50 / cbase, load, steal))
        if opts.repeat > 1:
            print(
                f"\nover {opts.repeat} runs, ×mem: wall, CPU (each run's wall@load average after it"
                ", and the share of CPU time the hypervisor stole during it)"
            )
            for name, got in list(ratios.items())[1:]:
                walls, cpus = [w for w, _, _, _ in got], [c for _, c, _, _ in got]
                each = ", ".join(f"{w:.2f}@{at:.1f} steal {st:.0%}" for w, _, at, st in got)
                print(
                    f"{name:<22} wall {min(walls):.2f}–{max(walls):.2f}   CPU {min(cpus):.2f}–{max(cpus):.2f}"
                    f"   ({each})"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
