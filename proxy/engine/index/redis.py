"""A ``PrefixIndex`` in Redis (or a Redis Cluster), shared by several proxy replicas.

Same answers as ``MemoryIndex`` (tests/redis check it against the brute-force reference of
tests/engine/test_index.py), with records per block of ``block_size`` tokens (512 by default):

* A prompt's tokens are cut into blocks. ``H0`` is a keyed blake2b digest of the scope (and the
  block size); ``H(k+1) = blake2b(H(k) + block k)``. Python's ``hash()`` is salted per process and
  would make replicas disagree; blake2b does not. The scope only enters the root, so two tenants
  never share a key.
* The children of node ``H(k)`` (every block k seen after that prefix, full or the partial last
  block of a prompt) are the members of one sorted set ``{ns}:{root}:n:{H(k)}``: 4 bytes a token,
  then, for a partial block, ``last_seen tokens entry_id`` of the newest insert through it
  (redis_scripts.py explains the order that makes the exact token-level LCP inside a block an
  O(log n) lookup). A full block's member ends with its chain digest instead, and its value is the
  field of that digest (8 bytes) in the scope's one values hash ``{ns}:{root}:v``: a lookup finds
  the held blocks by digest, and a write through blocks it knows are stored sends 8 bytes a block
  and sets their values in one HSET, not 2 KiB and three calls a block.
  A token's 4 bytes are a keyed 31-bit pseudo-random function of the token id, XORed with a
  keystream of the node: equal tokens at the same place of the same prefix compare equal, and
  nothing else can be read from them without the index secret (no token id, no prompt text).
* Marks (cache writes at exact positions) live in the hash ``{ns}:{root}:m:{H(p // bs)}``, field =
  8-byte digest of the partial block up to ``p``, value = ``last_seen``.
* ``{root}`` (hex) is a hash tag: all keys of a scope are in one Redis Cluster slot, so every
  script touches one node, and a scope's data moves with its slot.
* The layout's version enters every root (``_VERSION``): an upgraded replica reads and writes
  keys of its own, never a mix with an older layout's, which expire on their own (v3 kept a full
  block's value in a member of its node; v4 in the values hash).

An entry id may name a request another replica served; the engine keeps prompts in its own history,
so attribution then degrades to what the index tells (lengths and ages, no diff against the text).

Round trips: a lookup and an insert are one script call each (per 512 blocks), and the engine's
two lookups share one (``lookup_many``). With ``write_behind`` (what ``open_index`` uses)
inserts and marks are sent at once on a connection the indexes of the process on one Redis
share, their replies read later; a lookup follows them on that connection, so it reads them
without waiting for them (redis_writes.py; on a Redis Cluster a thread sends them). Behind a local
mirror, a prompt's insert may even go out while its own lookup is still in Redis
(``insert_during_lookup``, where the mirror proves the walk needs no second round trip). Time: correctness
comes from the stored ``last_seen`` compared with the caller's ``now``; Redis key expiry is garbage
collection only: each write sets the key's expiry to the scope's TTL plus
``expired_window_seconds`` (so that a request after the TTL is told ``expired`` rather than
``cold``), capped by ``max_age_seconds``, and never shortens a longer expiry.

Inside one node, a lookup looks at up to ``scan_limit`` children on each side of the query for the
newest (and the newest live) one among those sharing its longest prefix: the held prefix is always
exact; past that many siblings sharing as many tokens, the age and liveness come from the nearest.

This module is long because the key layout, the member encoding (hashing, keystream, mask) and
the client that builds the script calls from them only make sense together; the scripts
themselves are in redis_scripts.py.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import sys
import threading
import uuid
from array import array
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, ClassVar, NamedTuple

import redis

from .base import NO_MATCH, IndexStats, Insert, Lookup, Marks, Match, insert_after
from .query import _common_blocks, origin_of
from .redis_scripts import AROUND, LOOKUP, MARK_WRITE, WRITE, Script
from .redis_writes import Channel, Command, WriteBehind, argument, bulk
from .rope import as_tokens, is_frozen

__all__ = ["RedisIndex"]

_SCRIPTS = (LOOKUP, AROUND, WRITE, MARK_WRITE)

_VERSION = b"cachewarden-index-v4"
_DIGEST = 16  # chain digests (node names)
_FIELD = 8  # mark fields
_GROUP = 4  # bytes a token in a member
_GIVEN = 2  # blocks whose bytes a lookup sends with its walk (the stop is most often there)
_CHUNK = 512  # blocks per script call: each stays well under a 50 ms client timeout
# Full blocks whose digest and member bytes are remembered, by (parent digest, tokens): ~6.5 KiB
# each at 512 tokens (the tokens tuple, 2 KiB of member), so ~26 MiB at most.
_BLOCK_CACHE = 4096
_STORED = 1 << 16  # chain digests of full blocks known to be in Redis (~150 bytes each)
_TOKEN_MEMO = 1 << 18  # token -> its 4 bytes (a vocabulary is ~200k tokens)
_STREAMS = 1024  # keystreams of recent nodes, 2 KiB each at 512 tokens a block
_ROOTS = 4096  # root digests of recent scopes
_RETENTIONS = 64  # key expiries of distinct TTLs
# Scopes whose last prompt is kept for the next one to start from. Its tuple is the engine's own
# (the memory index keeps the same one); its members cost 4 bytes a token (0.8 MiB at 200,000
# tokens), the same bytes objects from one turn to the next: at most ~50 MiB for 64 such scopes.
_SCOPES = 64
_BY_TOKS, _BY_TOKS_TOKENS = 256, 1 << 21  # recent prompts kept by tuple: ~8 MiB of members at most
_GIVEN_MASK, _LEFT_MASK = ord("g"), ord("-")  # a WRITE's block sent with its bytes, or without
_ESCAPE = -(2**63)  # int64 token values are 8 bytes; this one introduces a longer encoding


class Call(NamedTuple):
    """One script call. ``groups``: a WRITE's member bytes of every block, also of those whose bytes
    it leaves out (sent again if Redis lacks them)."""

    script: Script
    keys: list[bytes]
    args: list[bytes | str | int | float]
    groups: list[bytes] | None = None
    resp: bytes | None = None  # the call in RESP, for a channel (``_resp``)


# A lookup in steps (``RedisIndex._walk``): yields each round trip's calls, is sent their answers.
_Walk = Generator[list[Call], list[Any], Match]


_ESCAPE_BYTES = _ESCAPE.to_bytes(8, "little", signed=True)


def _encode(toks: Sequence[int]) -> tuple[bytes, Sequence[int]]:
    """Token bytes and the byte offset of every token (plus the end): prefix-free, platform-free.
    Encoding is token by token: the bytes of a slice are the slice of the bytes."""
    try:
        packed = array("q", toks)
    except OverflowError:
        pass
    else:
        if sys.byteorder != "little":
            packed.byteswap()
        data = packed.tobytes()
        # The escape token itself needs the long form; a search in C finds it (min() would box
        # every token).
        at = data.find(_ESCAPE_BYTES)
        while at >= 0 and at % 8:
            at = data.find(_ESCAPE_BYTES, at + 1)
        if at < 0:
            return data, range(0, len(data) + 1, 8)
    parts: list[bytes] = []
    offsets = [0]
    for t in toks:
        if _ESCAPE < t < 2**63:
            b = t.to_bytes(8, "little", signed=True)
        else:
            size = (t.bit_length() + 8) // 8
            b = _ESCAPE.to_bytes(8, "little", signed=True) + size.to_bytes(4, "little")
            b += t.to_bytes(size, "little", signed=True)
        parts.append(b)
        offsets.append(offsets[-1] + len(b))
    return b"".join(parts), offsets


def _common_tokens(a: Sequence[int], b: Sequence[int], start: int = 0, known: int = 0) -> int:
    """How many tokens ``a`` and ``b`` start with, the first ``max(start, known)`` being equal
    already: a few tokens one by one (a turn of a conversation shares all of the previous one's
    partial block but the last few tokens the counter made again), then by bisection over
    C-speed slice compares. Read from one slice of each (a rope's item or slice is a call)."""
    hi = min(len(a), len(b))
    lo = min(max(known, start, 0), hi)
    x, y = tuple(a[lo:hi]), tuple(b[lo:hi])
    n = len(x)
    for i in range(min(n, 8)):
        if x[i] != y[i]:
            return lo + i
    at = min(8, n)
    if at == n or x[at:] == y[at:]:
        return hi
    top = n - 1
    while at < top:
        mid = (at + top + 1) // 2
        if x[at:mid] == y[at:mid]:
            at = mid
        else:
            top = mid - 1
    return lo + at


def _server_of(client: redis.Redis) -> tuple[object, ...]:
    """What makes two clients reach the same Redis: then one pipeline may carry both indexes' calls."""
    pool = client.connection_pool
    kw = pool.connection_kwargs
    fields = ("host", "port", "path", "db", "username", "password")
    return (pool.connection_class, *(kw.get(f) for f in fields))


def _trim(cache: dict[Any, Any], size: int) -> None:
    """Drops the oldest entries past ``size`` (the caller holds the cache's lock)."""
    excess = len(cache) - size
    if excess > 0:
        for old in list(itertools.islice(cache, excess)):
            del cache[old]


def _command(call: Call) -> Command:
    if call.resp is not None:
        return call.resp
    return ("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)


_HEADS = {script: b"$7\r\nEVALSHA\r\n" + bulk(script.sha.encode()) for script in _SCRIPTS}


def _resp(script: Script, keys: bytes, n: int, args: Sequence[bytes | str | int | float]) -> bytes:
    """An EVALSHA in RESP from its ``n`` keys already packed (``bulk``) and joined: what ``_pack``
    makes of the command, without packing the keys again on every call (most of a call's
    arguments; a prompt's lookup and insert send the same ones)."""
    return b"".join([_head(script, keys, n, len(args)), *map(argument, args)])


def _head(script: Script, keys: bytes, n: int, args: int) -> bytes:
    """An EVALSHA of ``args`` arguments in RESP up to its first argument, its ``n`` keys packed and
    joined (``keys``)."""
    return b"*%d\r\n" % (3 + n + args) + _HEADS[script] + bulk(b"%d" % n) + keys


def _stored_mask(full: int, partial: bool) -> bytes:
    """A WRITE's mask when every full block is stored: their bytes left out, a partial block's given."""
    return b"%c" % _LEFT_MASK * full + b"%c" % _GIVEN_MASK * partial


def _tail(members: list[bytes]) -> list[bytes]:
    """The last member as the last argument of a call in RESP, in pieces (joined once, with the
    rest of the call)."""
    last = members[-1]
    return [b"$%d\r\n" % len(last), last, b"\r\n"]


def _threshold(now: float, ttl: float) -> float:
    return -math.inf if ttl <= 0 else now - ttl


class _Record:
    __slots__ = ("entry_id", "last_seen", "tokens")

    def __init__(self, raw: bytes) -> None:
        ts, n, eid = raw.split(b" ", 2)
        self.last_seen = float(ts)
        self.tokens = int(n)
        self.entry_id = eid.decode()


class _Packs(NamedTuple):
    """A one-call prompt's LOOKUP and (all full blocks stored) WRITE in RESP but for what changes
    from one request to the next: the threshold, the write's value and time, the partial block's
    member (``partial``: whether it has one). Made once a chain of blocks: a conversation's turns
    that fill no block share them."""

    lookup_head: bytes  # up to the first argument (the live threshold)
    lookup_mid: bytes  # from the second to the full blocks' given members
    write_head: bytes  # up to the first argument (the value)
    write_mid: bytes  # the digests and the mask
    partial: bool


class _Prepared(NamedTuple):
    """A prompt's blocks as the index sends them (a tuple: made on every request, read-only)."""

    scope: str
    toks: Sequence[int]  # a tuple or a rope (immutable)
    root: bytes
    chain: list[bytes]  # H0 … H(full blocks)
    members: list[bytes]  # one a block, the partial last one included
    nodes: list[bytes]  # the key of the node of each block (its parent's children)
    values: bytes  # the key of the scope's values hash (full blocks' values by digest)
    packed: list[bytes]  # the nodes' keys, then the values hash's, in RESP (``bulk``)
    digests: list[bytes]  # the 8-byte digest of each full block (its values field)
    keys: bytes  # ``packed`` joined, when the prompt's calls are one call each (else empty)
    blob: bytes  # ``digests`` joined, when the prompt's calls are one call each (else empty)
    packs: _Packs | None  # when the prompt's calls are one call each, on a channel

    def keys_of(self, ks: range) -> tuple[bytes, int]:
        """The packed keys of the call over blocks ``ks`` (their nodes, then the values hash), and
        how many."""
        if self.keys and len(ks) == len(self.members):
            return self.keys, len(self.packed)
        return b"".join([*self.packed[ks.start : ks.stop], self.packed[-1]]), len(ks) + 1


def _nothing_to_learn(call: Call, answer: Any) -> bool:
    """Whether a write's reply tells nothing new: not a WRITE of blocks, or every full block was
    known to be stored (none given with its bytes) and still is (none missing)."""
    if call.script is not WRITE or call.groups is None:
        return True
    blob, mask = call.args[5], call.args[6]
    assert isinstance(blob, bytes) and isinstance(mask, bytes)
    return not answer and _GIVEN_MASK not in mask[: len(blob) // _FIELD]


def _unwritable(entry_id: str, now: float) -> str | None:
    """Why an insert of ``entry_id`` at ``now`` cannot be stored, if it cannot."""
    if "\x00" in entry_id:
        return "an entry id holds no NUL character (it ends a record in Redis)"
    if not math.isfinite(now):
        return f"now must be a finite time (got {now!r})"
    return None


def _found(
    groups: list[tuple[bytes, list[bytes], list[int]]], answers: Sequence[Any], now: float, ttl: float
) -> dict[int, float]:
    """Ages of the live marks among HMGET answers (one list of values per group)."""
    t = _threshold(now, ttl)
    found: dict[int, float] = {}
    for (_, _, where), got in zip(groups, answers, strict=True):
        for p, raw in zip(where, got, strict=True):
            if raw is not None and (when := float(raw)) >= t:
                found[p] = now - when
    return found


class RedisIndex:
    """``PrefixIndex`` in Redis. Thread-safe (the client's pool is); every error is the caller's:
    wrap it in ``ResilientIndex`` to keep answering when Redis is away. ``client`` may be a
    ``redis.Redis`` or a ``redis.cluster.RedisCluster``."""

    # ``lookup_many`` takes ``meanwhile`` (work to do while Redis answers; resilient.py).
    answers_meanwhile: ClassVar[bool] = True

    def __init__(
        self,
        client: Any,
        *,
        block_size: int = 512,
        namespace: str = "cachewarden",
        secret: bytes = b"",
        expired_window_seconds: float = 3600.0,
        max_age_seconds: float = 24 * 3600,
        sweep_fields: int = 4096,
        scan_limit: int = 256,
        write_behind: bool = False,
        read_own_writes: bool = True,
    ) -> None:
        if not 1 <= block_size <= 1024:
            raise ValueError("block_size must be between 1 and 1024")
        if not namespace or not all(c.isalnum() or c in "._-" for c in namespace):
            raise ValueError(f"namespace must be letters, digits, '.', '_' or '-' (got {namespace!r})")
        self._r = client
        # A Redis Cluster runs each call on its slot's node: only a single Redis gets pipelines.
        self._pipelined = isinstance(client, redis.Redis)
        self._server = _server_of(client) if self._pipelined else None
        self._bs = block_size
        self._ns = namespace.encode()
        # blake2b takes keys of up to 64 bytes; a longer secret is condensed first.
        self._key = secret if len(secret) <= 64 else hashlib.blake2b(secret).digest()
        self._token_key = hashlib.blake2b(b"token", key=self._key, digest_size=32).digest()
        self._stream_key = hashlib.blake2b(b"keystream", key=self._key, digest_size=32).digest()
        self._window = max(expired_window_seconds, 0.0)
        self._max_age = max_age_seconds
        self._sweep = max(sweep_fields, 0)
        self._scan = max(scan_limit, 1)
        self._memo: dict[int | bytes, bytes] = {}
        self._retentions: dict[float | None, tuple[int, str, bytes]] = {}
        self._masks: dict[int, int] = {}
        # (parent digest, a few tokens) -> (chain digest, member bytes, tokens) of a full block: a
        # conversation's next turn re-sends the same blocks, so each is encoded and hashed once and
        # a turn costs its new tokens. Bounded, oldest first out.
        self._blocks: dict[tuple[bytes, int, int, int, int], tuple[bytes, bytes, tuple[int, ...]]] = {}
        # Full blocks this index wrote or walked: a write sends only their digest, not their bytes.
        self._stored: dict[bytes, None] = {}
        self._blocks_lock = threading.Lock()
        self._last = threading.local()
        self._streams: dict[bytes, bytes] = {}
        self._roots: dict[str, bytes] = {}  # scope -> its root digest (a keyed hash a request)
        self._scopes: OrderedDict[str, _Prepared] = OrderedDict()
        # The prompts of recent requests by their tuple's id (a prepared one holds its tuple), for
        # the next request of each conversation (``query.derived`` names its earlier tuple).
        self._by_toks: OrderedDict[int, _Prepared] = OrderedDict()
        self._by_toks_tokens = 0
        # open_index turns this on for the proxy: writes leave the analysis' path (redis_writes.py).
        # On a single Redis, writes go out at once on a connection of the index's own and their
        # replies are read later; on a cluster, a thread sends them (redis_writes.py).
        self._chan: Channel | None = None
        self._writes: WriteBehind | None = None
        if write_behind and self._pipelined:
            prelude = [("SCRIPT", "LOAD", script.source) for script in _SCRIPTS]
            self._chan = Channel.shared(self._server, client.connection_pool, prelude)
        elif write_behind:
            self._writes = WriteBehind(self._write)
        # With a thread sending the writes, a read first sends what is queued and waits for what
        # is in flight. ``open_index`` turns that off: its local mirror holds this replica's
        # writes, so the merged answer is the same without them. (A channel needs no wait.)
        self._own = read_own_writes
        # Walks whose answer was left out, as an insert went behind them (``insert_during_lookup``).
        self.early_retracted = 0

    # -- hashing ------------------------------------------------------------------------------------

    def _root(self, scope: str) -> bytes:
        root = self._roots.get(scope)
        if root is None:
            head = b"%s\x00%d\x00" % (_VERSION, self._bs)
            root = self._digest(head + scope.encode("utf-8", "surrogatepass"))
            with self._blocks_lock:
                self._roots[scope] = root
                _trim(self._roots, _ROOTS)
        return root

    def _digest(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=_DIGEST, key=self._key).digest()

    def _token(self, t: int, raw: bytes) -> bytes:
        g = hashlib.blake2b(raw, digest_size=_GROUP, key=self._token_key).digest()
        memo = self._memo
        if len(memo) >= _TOKEN_MEMO:
            memo.clear()
        memo[t if _ESCAPE < t < 2**63 else raw] = g
        return g

    def _groups(
        self,
        node: bytes,
        part: Sequence[int],
        encoded: tuple[bytes, Sequence[int]] | None = None,
        start: int = 0,
    ) -> bytes:
        """The member bytes of the tokens ``part``, from position ``start`` on of a block under
        ``node`` (4 a token, high bit set on the first of each): bytes are mixed token by token, so
        a block's member is the member of a prefix of it followed by the rest's, and a partial block
        that extends an earlier one costs its new tokens. ``encoded``: ``_encode(part)``, made here
        if a token is not in the memo."""
        parts = list(map(self._memo.get, part))  # in C: most tokens are known
        try:
            raw = b"".join(parts)  # type: ignore[arg-type]
        except TypeError:  # a token not in the memo (None)
            data, offsets = encoded if encoded is not None else _encode(part)
            for i, got in enumerate(parts):
                if got is None:
                    parts[i] = self._token(part[i], data[offsets[i] : offsets[i + 1]])
            raw = b"".join(parts)  # type: ignore[arg-type]
        size = len(raw)
        at = start * _GROUP
        stream = self._stream(node)[at : at + size]
        mask = self._masks.get(size)
        if mask is None:
            mask = self._masks[size] = int.from_bytes(b"\x80\x00\x00\x00" * (size // _GROUP), "big")
        mixed = (int.from_bytes(raw, "big") ^ int.from_bytes(stream, "big")) | mask
        return mixed.to_bytes(size, "big")

    def _stream(self, node: bytes) -> bytes:
        """The keystream of a node, for a whole block (an XOF: a shorter one is its prefix). Kept for
        the nodes of recent partial blocks, which a conversation's next turns extend."""
        stream = self._streams.get(node)
        if stream is None:
            stream = hashlib.shake_256(self._stream_key + node).digest(self._bs * _GROUP)
            with self._blocks_lock:
                self._streams[node] = stream
                _trim(self._streams, _STREAMS)
        return stream

    def _prepare(self, scope: str, toks: Sequence[int]) -> _Prepared:
        """Chain and member bytes of a prompt. The engine looks a prompt up, then inserts and marks
        the same one: the last one of each thread is kept for those calls. A prompt starts from the
        blocks it shares with the scope's previous one (a conversation's previous turn), so that
        it costs what is new in it, not the conversation's length."""
        last: _Prepared | None = getattr(self._last, "value", None)
        # A copy, compared by value: a caller may reuse and change its list between calls.
        key = toks if is_frozen(toks) else tuple(toks)
        # Lengths first: tuples compare item by item before they compare lengths, and the next
        # prompt of a conversation starts with the whole previous one.
        if (
            last is not None
            and last.scope == scope
            and len(last.toks) == len(key)
            and (last.toks is key or last.toks == key)
        ):
            return last
        n, bs = len(key), self._bs
        full = n // bs
        # The earlier prompt of the same conversation when the counter names it (many
        # conversations of a tenant share a scope), else the scope's last one.
        origin = origin_of(key)
        with self._blocks_lock:
            earlier = self._by_toks.get(id(origin[0])) if origin is not None else None
            if earlier is None or origin is None or earlier.toks is not origin[0] or earlier.scope != scope:
                earlier = self._scopes.get(scope)
        # Tokens known equal to the earlier prompt's by construction (query.derived).
        same = origin[1] if earlier is not None and origin is not None and origin[0] is earlier.toks else 0
        if (
            earlier is not None
            and n > full * bs
            and same >= full * bs
            and len(earlier.toks) // bs == full
            and len(earlier.members) == full + 1 == len(earlier.chain)
        ):
            # A conversation's turn that filled no block (most turns): the earlier prompt's full
            # blocks by construction and its partial block's node; only that block's member is new.
            e = earlier
            members = [*e.members[:full], self._partial(key, e, full, same)]
            prepared = _Prepared(
                scope,
                key,
                e.root,
                e.chain,
                members,
                e.nodes,
                e.values,
                e.packed,
                e.digests,
                e.keys,
                e.blob,
                e.packs,
            )
        else:
            prepared = self._prepared(scope, key, earlier, same)
        self._last.value = prepared
        with self._blocks_lock:
            self._scopes[scope] = prepared
            self._scopes.move_to_end(scope)
            while len(self._scopes) > _SCOPES:
                self._scopes.popitem(last=False)
            if is_frozen(toks):  # the caller's own tuple or rope: its id is that of the one kept
                old = self._by_toks.pop(id(key), None)
                self._by_toks[id(key)] = prepared
                self._by_toks_tokens += n - (len(old.toks) if old is not None else 0)
                while len(self._by_toks) > _BY_TOKS or self._by_toks_tokens > _BY_TOKS_TOKENS:
                    _, gone = self._by_toks.popitem(last=False)
                    self._by_toks_tokens -= len(gone.toks)
        return prepared

    def _partial(self, key: Sequence[int], earlier: _Prepared, full: int, same: int) -> bytes:
        """The member of the partial block after ``full`` blocks that ``key`` shares with ``earlier``,
        whose block ``full`` has the same node: the earlier's bytes of the tokens both start with
        there, then the new tokens' (a frozen sequence's slice is a tuple)."""
        bs = self._bs
        kept = _common_tokens(key, earlier.toks, full * bs, same) - full * bs
        head = earlier.members[full][: kept * _GROUP] if kept else b""
        return head + self._groups(earlier.chain[full], key[full * bs + kept :], start=kept)

    def _prepared(self, scope: str, key: Sequence[int], earlier: _Prepared | None, same: int) -> _Prepared:
        """``_prepare`` of a prompt from the full blocks it shares with ``earlier`` (the first
        ``same`` tokens equal by construction), the others hashed and encoded, or found in the
        cache of recent blocks."""
        n, bs = len(key), self._bs
        full = n // bs
        members, nodes, packed, digests = [], [], [], []
        shared = 0  # full blocks taken from the earlier prompt
        if earlier is None:
            chain = [self._root(scope)]
        else:
            limit = min(full, len(earlier.toks) // bs)
            shared = _common_blocks(key, earlier.toks, bs, limit, min(same // bs, limit))
            chain = earlier.chain[: shared + 1]
            members = earlier.members[:shared]
            nodes = earlier.nodes[:shared]
            packed = earlier.packed[:shared]
            digests = earlier.digests[:shared]
        root = chain[0]
        cache, fresh = self._blocks, []
        for k in range(shared, full):
            block = tuple(key[k * bs : (k + 1) * bs])  # a slice is one already (no copy)
            # Found by the parent and a few tokens (hashing all 512 would cost more than the rest
            # of the lookup), then checked token by token: the tokens of a conversation's turns
            # are mostly the very same int objects, so the check is a pass over pointers.
            step = (chain[k], block[0], block[-1], block[bs // 2], block[bs // 3])
            got = cache.get(step)
            if got is None or got[2] != block:
                data, offsets = _encode(block)
                got = (self._digest(chain[k] + data), self._groups(chain[k], block, (data, offsets)), block)
                fresh.append((step, got))
            chain.append(got[0])
            members.append(got[1])
        if n > full * bs:
            if earlier is not None and shared == full and len(earlier.members) > full:
                members.append(self._partial(key, earlier, full, same))
            else:
                members.append(self._groups(chain[full], key[full * bs :]))
        if fresh:
            with self._blocks_lock:
                cache.update(fresh)
                _trim(cache, _BLOCK_CACHE)
        tag = b"%s:{%s}:" % (self._ns, root.hex().encode())
        new = [tag + b"n:" + chain[k] for k in range(len(nodes), len(members))]
        nodes.extend(new)
        packed.extend(map(bulk, new))
        packed.append(bulk(tag + b"v"))
        digests.extend(c[:_FIELD] for c in chain[shared + 1 : full + 1])
        one = len(members) <= _CHUNK
        joined, blob = (b"".join(packed), b"".join(digests)) if one else (b"", b"")
        packs = self._packs(members, len(packed), joined, blob, n > full * bs) if one and self._chan else None
        return _Prepared(
            scope, key, root, chain, members, nodes, tag + b"v", packed, digests, joined, blob, packs
        )

    def _packs(self, members: list[bytes], n: int, keys: bytes, blob: bytes, partial: bool) -> _Packs:
        """``_Packs`` of a one-call prompt: its ``n`` keys packed and joined, its digests joined."""
        given = members[-_GIVEN:]
        fixed = given[:-1] if partial else given  # the full blocks' members: the chain's
        lookup_mid = b"".join([argument(self._scan), argument(len(given)), bulk(blob), *map(bulk, fixed)])
        return _Packs(
            _head(LOOKUP, keys, n, 4 + len(given)),
            lookup_mid,
            _head(WRITE, keys, n, 7 + partial),
            bulk(blob) + bulk(_stored_mask(len(members) - partial, partial)),
            partial,
        )

    def _known(self, digests: Sequence[bytes]) -> None:
        """Full blocks now known to be in Redis (written, or walked: their members are there)."""
        stored = self._stored
        # Most often all of them are known already (a conversation's turns walk and write the same
        # blocks): a read-only pass, no lock.
        if all(map(stored.__contains__, digests)):
            return
        with self._blocks_lock:
            stored.update(dict.fromkeys(digests))
            _trim(stored, _STORED)

    def _fields(
        self, parent: bytes, data: bytes, offsets: Sequence[int], start: int, ends: Iterable[int]
    ) -> list[bytes]:
        """Mark fields: digests of the prefixes ``tokens[start:end]`` (one per end) under ``parent``."""
        h = hashlib.blake2b(parent, digest_size=_DIGEST, key=self._key)
        out: list[bytes] = []
        at = offsets[start]
        for end in ends:
            h.update(data[at : offsets[end]])
            at = offsets[end]
            out.append(h.copy().digest()[:_FIELD])
        return out

    def _key_of(self, root: bytes, kind: bytes, node: bytes) -> bytes:
        return b"%s:{%s}:%s:%s" % (self._ns, root.hex().encode(), kind, node)

    def _retention_ms(self, ttl: float | None) -> tuple[int, str, bytes]:
        """Key expiry for a scope of TTL ``ttl``: in ms, in seconds as a script reads it, and a
        WRITE's three arguments from there (expiry, retention, sweep threshold) in RESP. Kept for
        the few TTLs a deployment has (each write asks)."""
        got = self._retentions.get(ttl)
        if got is None:
            keep = self._max_age if ttl is None or ttl <= 0 else min(self._max_age, ttl + self._window)
            keep = max(keep, 0.001)
            px, seconds = max(1, math.ceil(keep * 1000)), repr(keep)
            got = px, seconds, b"".join(map(argument, (px, seconds, self._sweep)))
            if len(self._retentions) < _RETENTIONS:
                self._retentions[ttl] = got
        return got

    # -- Redis calls --------------------------------------------------------------------------------

    def _scripts(self, calls: list[Call]) -> list[Any]:
        """Run script calls in one round trip. A Redis that does not know a script (first use, a
        restarted node) gets its source once (EVAL also caches it there)."""
        if not self._pipelined and len(calls) > 1:
            return [self._scripts([call])[0] for call in calls]
        if len(calls) == 1:  # one direct call: no pipeline to set up
            script, keys, args = calls[0][:3]
            try:
                return [self._r.evalsha(script.sha, len(keys), *keys, *args)]
            except redis.exceptions.NoScriptError:
                return [self._r.eval(script.source, len(keys), *keys, *args)]
        pipe = self._r.pipeline(transaction=False)
        for script, keys, args, *_ in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        try:
            return list(pipe.execute())
        except redis.exceptions.NoScriptError:
            return [self._r.eval(c.script.source, len(c.keys), *c.keys, *c.args) for c in calls]

    # -- PrefixIndex --------------------------------------------------------------------------------

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        return self._run([(self, self._walk(scope, tokens, now, ttl))])[0]

    def lookup_many(
        self, queries: Sequence[Lookup], *, now: float, meanwhile: Callable[[], object] | None = None
    ) -> list[Match]:
        """``JointLookups``: the lookups of every ``RedisIndex`` on this one's server (whatever its
        secret or namespace) or with a channel of its own share each round trip; the others are
        their index's own lookup. ``meanwhile`` runs once the first round trip is on its way and
        before its replies are read (``ResilientIndex`` does its local lookups there, while Redis
        works); on a raise before that point it has not run."""
        out: list[Match | None] = [None] * len(queries)
        joined: list[int] = []
        walks: list[tuple[RedisIndex, _Walk]] = []
        for i, q in enumerate(queries):
            index = q.index
            if isinstance(index, RedisIndex) and (
                index is self
                or index._chan is not None
                or (self._server is not None and index._server == self._server)
            ):
                joined.append(i)
                walks.append((index, index._walk(q.scope, q.tokens, now, q.ttl)))
        for i, match in zip(joined, self._run(walks, meanwhile), strict=True):
            out[i] = match
        found = [
            m if m is not None else q.index.lookup(q.scope, q.tokens, now=now, ttl=q.ttl)
            for m, q in zip(out, queries, strict=True)
        ]
        insert_after(queries)
        return found

    def _run(
        self, walks: list[tuple[RedisIndex, _Walk]], meanwhile: Callable[[], object] | None = None
    ) -> list[Match]:
        """Runs walks side by side: each round trip carries the next calls of all of them, on the
        channel of their index if it has one, else in one pipeline of this index's client (with,
        on the first, the writes a sending thread still has queued: each reads its own writes)."""
        if len(walks) == 1 and (chan := walks[0][0]._chan) is not None:
            return [self._run_one(chan, walks[0][1], meanwhile)]
        results: list[Match] = [NO_MATCH] * len(walks)
        replies: list[list[Any] | None] = [None] * len(walks)
        active = list(range(len(walks)))
        first = True
        while active:
            batch: list[Call] = []
            spans: list[tuple[int, int, int]] = []
            for i in active:
                try:
                    reply = replies[i]
                    calls = next(walks[i][1]) if reply is None else walks[i][1].send(reply)
                except StopIteration as done:
                    results[i] = done.value
                    continue
                spans.append((i, len(batch), len(calls)))
                batch.extend(calls)
            if not spans:
                break
            # Asks on channels first (they wait below), then the pipeline, then the channels' replies.
            asked: dict[int, tuple[Channel, list[tuple[int, int, int]], Any]] = {}
            rest: list[tuple[int, int, int]] = []
            for span in spans:
                chan = walks[span[0]][0]._chan
                if chan is None:
                    rest.append(span)
                else:
                    asked.setdefault(id(chan), (chan, [], None))[1].append(span)
            for key, (chan, own, _) in asked.items():
                cmds = [_command(c) for i, at, size in own for c in batch[at : at + size]]
                asked[key] = (chan, own, chan.ask(cmds))
            if meanwhile is not None:
                meanwhile()  # while the asks are on their way (a pipeline below waits at once)
                meanwhile = None
            if rest:
                pending: list[Call] = []
                if first:
                    for index in {id(walks[i][0]): walks[i][0] for i, _, _ in rest}.values():
                        if index._writes is not None and index._own:
                            pending.extend(index._writes.take())
                sync = [c for _, at, size in rest for c in batch[at : at + size]]
                got = self._scripts([*pending, *sync])
                if pending:
                    self._written(pending, got[: len(pending)])
                    got = got[len(pending) :]
                at_got = 0
                for i, _, size in rest:
                    replies[i] = got[at_got : at_got + size]
                    at_got += size
            for chan, own, ticket in asked.values():
                got = chan.wait(ticket)
                at_got = 0
                for i, _, size in own:
                    replies[i] = got[at_got : at_got + size]
                    at_got += size
            first = False
            active = [i for i, _, _ in spans]
        return results

    @staticmethod
    def _run_one(chan: Channel, walk: _Walk, meanwhile: Callable[[], object] | None) -> Match:
        """``_run`` of one walk on a channel (the proxy's lookup): its round trips one after the
        other, ``meanwhile`` while the first is on its way."""
        reply: list[Any] | None = None
        while True:
            try:  # only the walk's own end: a StopIteration from elsewhere is an error
                calls = next(walk) if reply is None else walk.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            ticket = chan.ask([_command(c) for c in calls])
            if meanwhile is not None:
                meanwhile()
                meanwhile = None
            reply = chan.wait(ticket)

    def _walk(self, scope: str, tokens: Sequence[int], now: float, ttl: float) -> _Walk:
        """A lookup as a generator: yields the script calls of each round trip, gets their answers."""
        toks = as_tokens(tokens)
        n, bs = len(toks), self._bs
        self._last.walking = self._last.early = None
        if not n:
            return NO_MATCH
        prep = self._prepare(scope, toks)
        members = prep.members
        t = repr(max(_threshold(now, ttl), -1e300))  # Lua's tonumber cannot read "-inf"
        # Until its first answer, this walk is the one ``insert_during_lookup`` may send behind.
        self._last.walking = prep
        full = n // bs
        # Full blocks are found by their chain digest; the bytes of a block are needed only where
        # the held ones end, which is most often one of the last two.
        digests = prep.digests
        walked = 0  # full blocks held
        last: bytes | None = None  # the value of the last one (read only if it is the answer's)
        stop: list[Any] | None = None
        live: int | None = None  # tokens of the live prefix, once known
        for s in range(0, len(members), _CHUNK):
            ks = range(s, min(s + _CHUNK, len(members)))
            keys = prep.nodes[ks.start : ks.stop]
            given = members[max(ks.start, ks.stop - _GIVEN) : ks.stop]
            blob = prep.blob if prep.keys else b"".join(digests[ks.start : min(ks.stop, full)])
            args: list[bytes | str | int | float] = [t, self._scan, len(given), blob, *given]
            resp = None
            if (packs := prep.packs) is not None:
                tail = _tail(members) if packs.partial else []
                resp = b"".join([packs.lookup_head, bulk(t.encode()), packs.lookup_mid, *tail])
            elif self._chan is not None:
                resp = _resp(LOOKUP, *prep.keys_of(ks), args)
            call = Call(LOOKUP, [*keys, prep.values], args, None, resp)
            held, value, stop, dead, dead_live, need_stop, need_dead = (yield [call])[0]
            self._last.walking = None
            if self._last.early is prep and (need_stop or need_dead or ks.stop < len(members)):
                # Redis holds less than this replica wrote (lost, evicted, flushed): a further round
                # trip would see the insert sent behind the lookup. Redis' answer is left out; the
                # local index, which holds this replica's prompts, answers.
                self.early_retracted += 1
                return NO_MATCH
            if held:
                self._known(digests[s : s + held])
                last = value
            walked += held
            stop_at = walked
            asks: list[Call] = []
            if need_stop:
                asks.append(
                    Call(AROUND, [prep.nodes[stop_at], prep.values], [t, self._scan, members[stop_at]])
                )
            if need_dead:
                k = s + dead - 1
                asks.append(Call(AROUND, [prep.nodes[k], prep.values], [t, self._scan, members[k]]))
            if asks:  # a second round trip, only when the walk stopped early in a long prompt
                answers = yield asks
                if need_stop:
                    stop = answers[0]
                if need_dead:
                    dead_live = answers[-1][2]
            if live is None and dead:
                live = (s + dead - 1) * bs + int(dead_live)
            if stop:
                break
        held_ext, best = 0, last
        if stop:
            held_ext = int(stop[0])
            if held_ext:
                best = stop[1]
            if live is None:
                live = walked * bs + int(stop[2])
        held = walked * bs + held_ext
        if held == 0 or best is None:
            return NO_MATCH
        record = _Record(best)
        return Match(
            common_prefix_tokens=held if live is None else live,
            held_prefix_tokens=held,
            entry_id=record.entry_id,
            entry_tokens=record.tokens,
            age_seconds=now - record.last_seen,
        )

    def insert(
        self,
        scope: str,
        tokens: Sequence[int],
        *,
        now: float,
        entry_id: str | None = None,
        ttl: float | None = None,
    ) -> str:
        """Store a prompt's blocks. ``ttl``: the scope's cache TTL, for Redis key expiry only
        (None or <= 0: keep up to ``max_age_seconds``). Ids are uuids when not given, so that
        replicas never mint the same one."""
        toks = as_tokens(tokens)
        eid = entry_id if entry_id is not None else uuid.uuid4().hex
        if not toks:
            return eid
        problem = _unwritable(eid, now)
        if problem is not None:
            raise ValueError(problem)
        self._send(self._writes_of(self._prepare(scope, toks), now, eid, ttl))
        return eid

    def _writes_of(self, prep: _Prepared, now: float, eid: str, ttl: float | None) -> list[Call]:
        """The WRITE calls that store ``prep`` (one per ``_CHUNK`` blocks)."""
        members, digests = prep.members, prep.digests
        px, keep, kept = self._retention_ms(ttl)
        at = repr(now)
        value = b"%s %d %s" % (at.encode(), len(prep.toks), eid.encode())
        head: list[bytes | str | int] = [value, at, px, keep, self._sweep]
        calls: list[Call] = []
        full = len(digests)
        # The bytes of a full block already in Redis are left out: a turn of a conversation then
        # sends (and Redis rewrites) a digest and a value per block, not 2 KiB.
        stored = self._stored
        if prep.keys and all(map(stored.__contains__, digests)):
            # The usual turn of a conversation: every full block is stored, only the partial one's
            # bytes go (a check in C, not a pass over the blocks in Python).
            mask = _stored_mask(full, len(members) > full)
            args: list[bytes | str | int | float] = [*head, prep.blob, mask, *members[full:]]
            resp = None
            if (packs := prep.packs) is not None:  # a one-call prompt on a channel
                tail = _tail(members) if packs.partial else []
                resp = b"".join(
                    [packs.write_head, bulk(value), bulk(at.encode()), kept, packs.write_mid, *tail]
                )
            keys = [*prep.nodes, prep.values]
            return [Call(WRITE, keys, args, members, resp)]
        sent = [m if k >= full or digests[k] not in stored else b"" for k, m in enumerate(members)]
        for s in range(0, len(members), _CHUNK):
            ks = range(s, min(s + _CHUNK, len(members)))
            blob = b"".join(digests[ks.start : min(ks.stop, full)])
            part = sent[ks.start : ks.stop]
            mask = bytes([_GIVEN_MASK if m else _LEFT_MASK for m in part])
            args = [*head, blob, mask, *filter(None, part)]
            resp = None
            if self._chan is not None:
                resp = _resp(WRITE, *prep.keys_of(ks), args)
            keys = [*prep.nodes[ks.start : ks.stop], prep.values]
            calls.append(Call(WRITE, keys, args, members[ks.start : ks.stop], resp))
        return calls

    def insert_during_lookup(self, scope: str, tokens: Sequence[int], local: Match, ins: Insert) -> bool:
        """Sends ``insert`` of the prompt whose lookup this thread has on its way, before that
        lookup's reply is read, where that is certain to change no answer; returns whether it did
        (else the caller inserts once the lookup is answered).

        Why: Redis is then still running the lookup, so this send wakes no idle Redis (a send that
        does costs several times more CPU, on a virtual machine most of a shared analysis' own), and
        Redis runs it after the lookup, whose reply it never delays once the lookup was read. Only
        on a channel (the order of one connection), and only when the walk cannot need a second
        round trip, which would see this insert: ``local`` (the replica's own index, whose prompts
        all went to Redis too) holds, live, every block but the last ``_GIVEN``, whose bytes the
        lookup carries. Should Redis hold less after all (lost, evicted, flushed), the walk leaves
        Redis' answer out (``early_retracted``) and the local one stands."""
        prep: _Prepared | None = getattr(self._last, "walking", None)
        if self._chan is None or prep is None or prep.scope != scope or len(prep.toks) != len(tokens):
            return False
        n = len(prep.members)
        settled = max(n - _GIVEN, 0) * self._bs
        if n > _CHUNK or local.held_prefix_tokens < settled or local.common_prefix_tokens < settled:
            return False
        if not (prep.toks is tokens or prep.toks == (tokens if is_frozen(tokens) else tuple(tokens))):
            return False
        if _unwritable(ins.entry_id, ins.now) is not None:
            return False  # ``insert`` raises it, after the lookup
        self._send(self._writes_of(prep, ins.now, ins.entry_id, ins.ttl))
        self._last.early = prep
        return True

    def mark(
        self,
        scope: str,
        tokens: Sequence[int],
        positions: Iterable[int],
        *,
        now: float,
        ttl: float | None = None,
    ) -> None:
        """Record a cache write at each position. Unlike ``MemoryIndex`` it does not check that the
        blocks are held (that would cost a round trip): marks expire on their own."""
        toks = as_tokens(tokens)
        groups = self._mark_fields(scope, toks, positions)
        if not groups:
            return
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite time (got {now!r})")
        px, _, _ = self._retention_ms(ttl)
        keys = [k for k, _, _ in groups]
        args: list[bytes | str | int | float] = [
            repr(now),
            repr(now),
            px,
            *(b"".join(f) for _, f, _ in groups),
        ]
        self._send([Call(MARK_WRITE, keys, args)])

    def flush(self) -> None:
        """Sends the writes still queued (``write_behind``) and waits for them."""
        if self._chan is not None:
            self._chan.drain()
        elif self._writes is not None and (pending := self._writes.take()):
            self._write(pending)

    def _send(self, calls: list[Call]) -> None:
        if self._chan is not None:
            self._chan.post(
                [_command(c) for c in calls], [functools.partial(self._on_reply, c) for c in calls]
            )
        elif self._writes is not None:
            self._writes.submit(calls)
        else:
            self._write(calls)

    def _on_reply(self, call: Call, reply: Any) -> None:
        """The reply of a write sent on the channel, read by a later call (of any of its users)."""
        if not _nothing_to_learn(call, reply):  # most replies of a conversation's turns
            self._written([call], [reply])

    def _write(self, calls: list[Call]) -> list[Any]:
        got = self._scripts(calls)
        self._written(calls, got)
        return got

    def _written(self, calls: list[Call], answers: list[Any]) -> None:
        """After write calls ran: the full blocks they stored are known to be stored; the blocks a
        WRITE left out and Redis lacks (expired, swept, flushed) are written again with their bytes."""
        known: list[bytes] = []
        again: list[Call] = []
        for call, answer in zip(calls, answers, strict=True):
            if _nothing_to_learn(call, answer):
                continue
            head, blob, given = call.args[:5], call.args[5], call.groups
            assert isinstance(blob, bytes) and given is not None
            digests = [blob[i : i + _FIELD] for i in range(0, len(blob), _FIELD)]
            missing = sorted(int(i) - 1 for i in answer or ())
            if missing:
                groups = [given[i] for i in missing]
                args = [*head, b"".join([digests[i] for i in missing]), b"g" * len(missing), *groups]
                keys = [*(call.keys[i] for i in missing), call.keys[-1]]  # the values hash last
                again.append(Call(WRITE, keys, args, groups))
            lost = set(missing)
            known.extend(d for i, d in enumerate(digests) if i not in lost)
        if known:
            self._known(known)
        if again:  # every block's bytes are in these: they miss nothing
            self._send(again)  # behind the rest on the channel, or queued for the thread

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]:
        return self.marks_many([Marks(self, scope, tokens, list(positions), ttl)], now=now)[0]

    def marks_many(self, queries: Sequence[Marks], *, now: float) -> list[dict[int, float]]:
        """Joint ``marks``: the queries of indexes with a channel go out together and are read after
        (one round trip); the others are their index's own pipeline, or their own ``marks``."""
        out: list[dict[int, float] | None] = [None] * len(queries)
        asked: list[tuple[int, RedisIndex, list[tuple[bytes, list[bytes], list[int]]], Any]] = []
        for i, q in enumerate(queries):
            index = q.index
            if not isinstance(index, RedisIndex):
                out[i] = index.marks(q.scope, q.tokens, q.positions, now=now, ttl=q.ttl)
                continue
            toks = as_tokens(q.tokens)
            groups = index._mark_fields(q.scope, toks, q.positions)
            if not groups:
                out[i] = {}
            elif index._chan is not None:  # behind this index's writes on its connection: no wait
                ticket = index._chan.ask([("HMGET", key, *fields) for key, fields, _ in groups])
                asked.append((i, index, groups, ticket))
            else:
                if index._own:
                    index.flush()
                pipe = index._r.pipeline(transaction=False)
                for key, fields, _ in groups:
                    pipe.hmget(key, fields)
                out[i] = _found(groups, pipe.execute(), now, q.ttl)
        for i, index, groups, ticket in asked:
            assert index._chan is not None
            out[i] = _found(groups, index._chan.wait(ticket), now, queries[i].ttl)
        return [found if found is not None else {} for found in out]

    def _mark_fields(
        self, scope: str, toks: Sequence[int], positions: Iterable[int]
    ) -> list[tuple[bytes, list[bytes], list[int]]]:
        """(key, fields, positions) per node that carries marks at the wanted positions."""
        wanted = sorted({p for p in positions if 0 < p <= len(toks)})
        if not wanted:
            return []
        bs = self._bs
        prep = self._prepare(scope, toks)
        root, chain = prep.root, prep.chain
        by_node: dict[int, list[int]] = {}
        for p in wanted:
            by_node.setdefault(p // bs, []).append(p)
        out = []
        for k, ps in by_node.items():
            data, offsets = _encode(prep.toks[k * bs : ps[-1]])
            # The empty partial (a mark on a block boundary) has the node's own digest as field.
            fields = self._fields(chain[k], data, offsets, 0, [p - k * bs for p in ps])
            out.append((self._key_of(root, b"m", chain[k]), fields, ps))
        return out

    def stats(self) -> IndexStats:
        """Scans the namespace: O(records), for diagnostics (``ResilientIndex`` reports its local
        index). ``tokens`` counts the tokens of the stored blocks, ``blocks`` the nodes that have
        children; ``entries`` is 0: entries live in record values and are not enumerable."""
        blocks = tokens = 0
        for key in self._r.scan_iter(match=self._ns + b":{*}:n:*", count=1000):
            blocks += 1
            for m in self._r.zrange(key, 0, -1):
                end = 0
                while m[end] >= 0x80:
                    end += _GROUP
                tokens += end // _GROUP
        return IndexStats(entries=0, tokens=tokens, blocks=blocks)

    def clear(self) -> None:
        if self._chan is not None:
            self._chan.drain()
        with self._blocks_lock:
            self._stored.clear()
        batch: list[bytes] = []
        for key in self._r.scan_iter(match=self._ns + b":{*}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                self._r.unlink(*batch)
                batch = []
        if batch:
            self._r.unlink(*batch)

    def ping(self) -> bool:
        return bool(self._r.ping())

    def close(self) -> None:
        """Closes the client's connections (the index is unusable afterwards)."""
        if self._chan is not None:
            self._chan.release()
            self._chan = None
        self._r.close()
