"""RedisIndex on a real Redis Cluster: three `redis-server --cluster-enabled yes` nodes on
127.0.0.1, joined by `redis-cli --cluster create`. Every scope's keys hash to one slot; the
answers are the memory index's (the brute-force reference); a node restarted empty (no
persistence) only makes its own scopes cold while the others keep answering, and the client
follows it back."""

from __future__ import annotations

import gc
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cachewarden.proxy.engine.index.open_index import open_index
from cachewarden.proxy.engine.index.resilient import ResilientIndex
from cachewarden.proxy.testing import free_port
from hypothesis import given, settings

redis = pytest.importorskip("redis", reason="the redis package is not installed")
from cachewarden.proxy.engine.index.redis import RedisIndex  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402
from test_index_redis import REF, _agrees  # noqa: E402

# redis-py's cluster client drops its connections to a restarted node without closing them:
# collect them inside the tests, where this filter (and no other) applies.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]
CLI = shutil.which("redis-cli")
SERVER = shutil.which("redis-server")


def cluster_port() -> int:
    """A free port whose cluster bus port (10,000 higher) is free too."""
    while True:
        port = free_port()
        if port > 55535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class Cluster:
    """Three primaries, no replicas; a node may be stopped and started again on its port."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = [cluster_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start_node(self, port: int) -> None:
        d = self.workdir / str(port)
        d.mkdir(exist_ok=True)
        args = [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes"]
        args += ["--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"]
        # The other slots keep serving while one node is away.
        args += ["--cluster-require-full-coverage", "no", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(d), "--logfile", str(d / "redis.log")]
        self.procs[port] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.wait(lambda: self.ask(port, "PING"), f"node {port} up")

    def stop_node(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.terminate()
        proc.wait(timeout=10)

    def ask(self, port: int, *command: str) -> Any:
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=2) as node:
            return node.execute_command(*command)

    def wait(self, check: Any, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                logs = [(p / "redis.log").read_text()[-800:] for p in self.workdir.iterdir() if p.is_dir()]
                raise AssertionError(f"{what}: not after {timeout}s\n" + "\n".join(logs))
            time.sleep(0.05)

    def healthy(self) -> bool:
        return all(b"cluster_state:ok" in self.ask(p, "CLUSTER", "INFO") for p in self.ports)

    def start(self) -> None:
        for port in self.ports:
            self.start_node(port)
        create = [CLI, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)]
        subprocess.run([*create, "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True)
        self.wait(self.healthy, "cluster state ok")

    def stop(self) -> None:
        for port in list(self.procs):
            self.stop_node(port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0?cluster=1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if SERVER is None or CLI is None:
        pytest.skip("redis-server / redis-cli are not installed (Debian: apt-get install redis-server)")
    running = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def _collect_dropped_connections() -> Iterator[None]:
    yield
    gc.collect()


def client(cluster: Cluster) -> Any:
    return RedisCluster(host="127.0.0.1", port=cluster.ports[0], socket_timeout=2)


@settings(max_examples=20, deadline=None)
@given(ops=REF.workload_st)
def test_cluster_agrees_with_reference(cluster: Cluster, ops: list[tuple[object, ...]]) -> None:
    c = client(cluster)
    index = RedisIndex(c, block_size=4, namespace=f"p{time.monotonic_ns()}")
    try:
        _agrees(index, ops)
    finally:
        index.clear()
        c.close()


def test_a_scope_lives_in_one_slot_spread_over_the_nodes(cluster: Cluster) -> None:
    c = client(cluster)
    index = RedisIndex(c, block_size=4, namespace="slots")
    for i in range(30):
        scope = f"tenant-{i}\x1fopenai\x1fgpt-4.1\x1f"
        toks = list(range(i, i + 23))
        index.insert(scope, toks, now=0)
        index.mark(scope, toks, [8, 13], now=0)
        assert index.lookup(scope, toks, now=1, ttl=0).held_prefix_tokens == 23
        assert index.marks(scope, toks, [8, 13], now=1, ttl=0) == {8: 1.0, 13: 1.0}
    mine = {k.split(b"}")[0] for k in c.scan_iter(match=b"slots:*")}
    assert len(mine) == 30  # one hash tag a scope
    by_tag: dict[bytes, set[int]] = {}
    for key in c.scan_iter(match=b"slots:*"):
        by_tag.setdefault(key.split(b"}")[0], set()).add(c.keyslot(key))
    assert all(len(s) == 1 for s in by_tag.values())
    owners = {c.get_node_from_key(key).port for key in c.scan_iter(match=b"slots:*")}
    assert owners == set(cluster.ports)  # 30 scopes land on all three nodes
    index.clear()
    assert not list(c.scan_iter(match=b"slots:*"))
    c.close()


def test_a_node_restart_only_colds_its_own_scopes(cluster: Cluster) -> None:
    outages: list[str] = []
    index = open_index(cluster.url + "&namespace=restart", on_outage=outages.append, block_size=4)
    assert isinstance(index, ResilientIndex)
    c = client(cluster)
    scopes = [f"t{i}\x1fanthropic\x1fclaude\x1f" for i in range(12)]
    toks = list(range(40))
    # Connected first: the wrapper would skip Redis while backing off from a slow first connection.
    cluster.wait(index.primary.ping, "the lazy cluster client connects")
    for scope in scopes:
        index.insert(scope, toks, now=0)
    assert isinstance(index.primary, RedisIndex)
    index.primary.flush()
    assert not outages
    owner = {s: c.get_node_from_key(next(iter(c.scan_iter(match=_tag(c, s)))), False).port for s in scopes}
    victim = cluster.ports[1]
    assert victim in owner.values() and set(owner.values()) != {victim}
    cluster.stop_node(victim)
    # While it is down: every scope still answers (the local index), outages are counted.
    for scope in scopes:
        assert index.lookup(scope, toks, now=1, ttl=0).held_prefix_tokens == 40
    cluster.start_node(victim)
    cluster.wait(cluster.healthy, "cluster state ok after the restart")
    # Back: a fresh replica (no local copy) sees the other nodes' scopes, the restarted node's
    # scopes are cold (no persistence), and new writes there work again.
    fresh = open_index(cluster.url + "&namespace=restart", block_size=4)
    deadline = time.monotonic() + 20
    while True:
        got = {s: fresh.lookup(s, toks, now=2, ttl=0).held_prefix_tokens for s in scopes}
        if all(got[s] == (0 if owner[s] == victim else 40) for s in scopes) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got == {s: 0 if owner[s] == victim else 40 for s in scopes}
    for scope in scopes:
        fresh.insert(scope, toks, now=3)
    assert isinstance(fresh, ResilientIndex) and isinstance(fresh.primary, RedisIndex)
    fresh.primary.flush()
    again = open_index(cluster.url + "&namespace=restart", block_size=4)
    assert all(again.lookup(s, toks, now=4, ttl=0).held_prefix_tokens == 40 for s in scopes)
    assert outages  # the outage was seen and counted
    RedisIndex(c, namespace="restart").clear()
    c.close()
    for opened in (index, fresh, again):
        assert isinstance(opened, ResilientIndex) and isinstance(opened.primary, RedisIndex)
        opened.primary.close()


def _tag(c: Any, scope: str) -> bytes:
    """The key pattern of one scope (its hash tag), found from a fresh index's root."""
    root = RedisIndex(c, block_size=4, namespace="restart")._root(scope)
    return b"restart:{" + root.hex().encode() + b"}:*"
