"""A ``PrefixIndex`` in Redis, shared by several proxy replicas behind one load balancer.

Same semantics as ``MemoryIndex`` (tests/redis check it against the brute-force reference of
tests/test_index.py), stored as hashes only:

* A prompt's tokens are cut into blocks of ``block_size``. ``H0`` is a keyed blake2b digest of the
  scope (and the block size); ``H(k+1) = blake2b(H(k) + block k)``. Python's ``hash()`` is salted
  per process and would make replicas disagree; blake2b does not. The scope only enters the root,
  so two tenants never share a key: isolation rests on a 128-bit digest (with an optional secret
  key, a reader of Redis cannot even confirm a guessed prompt).
* Every prefix length ``L`` of a stored prompt has one *record*: field ``digest(H(q) + tokens[q*bs:L])``
  (8 bytes, ``q = ceil(L / bs) - 1``) in the Redis hash ``{ns}:n:{H(q)}``. Its value is
  ``"last_seen tokens entry_id"``: the newest insert through that prefix, as in ``MemoryIndex``'s
  nodes. A full block's field is its own chain digest, so block records and the in-block prefixes
  that the partial-block extension needs live side by side, one hash per parent node.
* Marks (cache writes at exact positions) live in ``{ns}:m:{H(p // bs)}``, field = digest of the
  partial block up to ``p``, value = ``last_seen``.

No prompt text and no token ids are stored: only digests, timestamps, lengths and entry ids. An
entry id may name a request another replica served; the engine keeps prompts in its own history,
so attribution then degrades to what the hashes tell (lengths and ages, no diff against the text).

Round trips: a lookup is one script call that walks the full blocks server-side and stops at the
first missing one, then at most one pipelined ``HMGET`` for the extension into the next block (and,
when the prefix is held longer than it is live, into the block where it stops being live). An
insert is one pipelined script call per ~2,000 tokens, so a call never holds Redis long enough to
trip a 50 ms client timeout on a large prompt.

Time. Correctness comes from the stored ``last_seen`` compared with the caller's ``now`` (a write
never moves ``last_seen`` back, so replicas with slightly skewed clocks cannot age a prefix).
Redis key expiry is garbage collection only: each write sets the key's expiry to the scope's TTL
plus ``expired_window_seconds`` (so that a request after the TTL is told ``expired`` rather than
``cold``), capped by ``max_age_seconds``, and never shortens a longer expiry. Because one hash
holds the records of all children of a node, a hot node (a shared system prompt) would keep dead
children forever: the write script sweeps a hash of records older than the retention whenever
its size doubles past ``sweep_fields`` (amortised O(1) a write).

This module is long because the storage layout, the two Lua scripts that read and write it
atomically, and the client that drives them only make sense together.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import sys
import threading
import uuid
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

import redis

from .base import NO_MATCH, IndexStats, Match

__all__ = ["RedisIndex"]

_VERSION = b"cachewarden-index-v1"
_DIGEST = 16  # chain digests (key names)
_FIELD = 8  # record fields: a collision needs two children of one node to meet in 64 bits
# Records per script call. A call costs ~1 µs a record in Redis; this keeps each one a few ms.
_CHUNK = 2048
# Full blocks whose per-position fields are remembered (~150 bytes each, bounded memory: ~10 MB).
_BLOCK_CACHE = 65536
_ESCAPE = -(2**63)  # int64 token values are 8 bytes; this one introduces a longer encoding

# KEYS: record hashes. ARGV: value, now, expiry ms, retention s, sweep threshold, then per key its
# fields concatenated (8 bytes each: one argument a key keeps the client's packing cheap).
# A record is replaced only by a write at least as recent.
_WRITE = """
local value, now, px = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest, limit = now - tonumber(ARGV[4]), tonumber(ARGV[5])
for k, key in ipairs(KEYS) do
  local blob, fields = ARGV[5 + k], {}
  for i = 1, #blob, 8 do fields[#fields + 1] = string.sub(blob, i, i + 7) end
  local old = redis.call('HMGET', key, unpack(fields))
  local args = {}
  -- The fields of a path were mostly written by one insert: parse each distinct old value once.
  local seen, ok = nil, true
  for i = 1, #fields do
    local o = old[i]
    if o and o ~= seen then
      seen, ok = o, tonumber(string.match(o, '^%S+')) <= now
    end
    if not o or ok then
      args[#args + 1] = fields[i]
      args[#args + 1] = value
    end
  end
  local added = 0
  if #args > 0 then added = redis.call('HSET', key, unpack(args)) end
  local pttl = redis.call('PTTL', key)
  if pttl >= -1 and pttl < px then redis.call('PEXPIRE', key, px) end
  if limit > 0 and added > 0 then
    local len = redis.call('HLEN', key)
    if len > limit and len > tonumber(redis.call('HGET', key, '~') or 0) then
      local all = redis.call('HGETALL', key)
      local dead = {}
      for i = 1, #all, 2 do
        if all[i] ~= '~' and tonumber(string.match(all[i + 1], '^%S+')) < oldest then
          dead[#dead + 1] = all[i]
        end
      end
      for i = 1, #dead, 1000 do
        redis.call('HDEL', key, unpack(dead, i, math.min(i + 999, #dead)))
      end
      redis.call('HSET', key, '~', 2 * (len - #dead))
    end
  end
end
return 0
"""

# KEYS[i]: hash of block i's parent, ARGV[i]: block i's field. The values of the leading run held.
_WALK = """
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('HGET', key, ARGV[i])
  if not v then break end
  out[i] = v
end
return out
"""


class _Script:
    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


_WRITE_SCRIPT = _Script(_WRITE)
_WALK_SCRIPT = _Script(_WALK)


def _encode(toks: Sequence[int]) -> tuple[bytes, Sequence[int]]:
    """Token bytes and the byte offset of every token (plus the end): prefix-free, platform-free."""
    try:
        packed = array("q", toks)
        if not packed or min(packed) != _ESCAPE:
            if sys.byteorder != "little":
                packed.byteswap()
            return packed.tobytes(), range(0, 8 * len(toks) + 1, 8)
    except OverflowError:
        pass
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


def _threshold(now: float, ttl: float) -> float:
    return -math.inf if ttl <= 0 else now - ttl


class _Record:
    __slots__ = ("entry_id", "last_seen", "tokens")

    def __init__(self, raw: bytes) -> None:
        ts, n, eid = raw.split(b" ", 2)
        self.last_seen = float(ts)
        self.tokens = int(n)
        self.entry_id = eid.decode()


class RedisIndex:
    """``PrefixIndex`` in Redis. Thread-safe (the client's pool is); every error is the caller's:
    wrap it in ``ResilientIndex`` to keep answering when Redis is away."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        block_size: int = 16,
        namespace: str = "cachewarden",
        secret: bytes = b"",
        expired_window_seconds: float = 3600.0,
        max_age_seconds: float = 24 * 3600,
        sweep_fields: int = 4096,
    ) -> None:
        if not 1 <= block_size <= 1024:
            # The write script unpacks one block's fields into one call (Lua's limit is ~8,000).
            raise ValueError("block_size must be between 1 and 1024")
        if not namespace or not all(c.isalnum() or c in "._-" for c in namespace):
            raise ValueError(f"namespace must be letters, digits, '.', '_' or '-' (got {namespace!r})")
        self._r = client
        self._bs = block_size
        self._ns = namespace.encode()
        # blake2b takes keys of up to 64 bytes; a longer secret is condensed first.
        self._key = secret if len(secret) <= 64 else hashlib.blake2b(secret).digest()
        self._window = max(expired_window_seconds, 0.0)
        self._max_age = max_age_seconds
        self._sweep = max(sweep_fields, 0)
        # Chain digest of a full block -> the fields of its prefixes (8 bytes each, the block's own
        # last). Digests only, as in Redis; bounded, oldest first out.
        self._blocks: dict[bytes, bytes] = {}
        self._blocks_lock = threading.Lock()

    # -- hashing ------------------------------------------------------------------------------------

    def _root(self, scope: str) -> bytes:
        head = b"%s\x00%d\x00" % (_VERSION, self._bs)
        return self._digest(head + scope.encode("utf-8", "surrogatepass"))

    def _digest(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, digest_size=_DIGEST, key=self._key).digest()

    def _chain(self, root: bytes, data: bytes, offsets: Sequence[int], blocks: int) -> list[bytes]:
        """``[H0, H1, …, H(blocks)]``."""
        bs, chain = self._bs, [root]
        for k in range(blocks):
            chain.append(self._digest(chain[-1] + data[offsets[k * bs] : offsets[(k + 1) * bs]]))
        return chain

    def _fields(
        self, parent: bytes, data: bytes, offsets: Sequence[int], start: int, ends: range
    ) -> list[bytes]:
        """Fields of the prefixes ``tokens[start:end]`` (one per end) under node ``parent``."""
        h = hashlib.blake2b(parent, digest_size=_DIGEST, key=self._key)
        out: list[bytes] = []
        at = offsets[start]
        for end in ends:
            h.update(data[at : offsets[end]])
            at = offsets[end]
            out.append(h.copy().digest()[:_FIELD])
        return out

    def _remember(self, fresh: list[tuple[bytes, bytes]]) -> None:
        with self._blocks_lock:
            cache = self._blocks
            cache.update(fresh)
            excess = len(cache) - _BLOCK_CACHE
            if excess > 0:
                for old in list(itertools.islice(cache, excess)):
                    del cache[old]

    def _nkey(self, node: bytes) -> bytes:
        return self._ns + b":n:" + node

    def _mkey(self, node: bytes) -> bytes:
        return self._ns + b":m:" + node

    def _retention_ms(self, ttl: float | None) -> tuple[int, float]:
        keep = self._max_age if ttl is None or ttl <= 0 else min(self._max_age, ttl + self._window)
        keep = max(keep, 0.001)
        return max(1, math.ceil(keep * 1000)), keep

    # -- Redis calls --------------------------------------------------------------------------------

    def _scripts(
        self, calls: list[tuple[_Script, list[bytes], list[bytes | str | int | float]]]
    ) -> list[Any]:
        """Run script calls in one round trip; load the scripts once if Redis does not know them
        (first use, or after a restart, which empties its script cache)."""
        for attempt in (0, 1):
            pipe = self._r.pipeline(transaction=False)
            for script, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            try:
                return pipe.execute()
            except redis.exceptions.NoScriptError:
                if attempt:
                    raise
                for script in {c[0] for c in calls}:
                    self._r.script_load(script.source)
        raise AssertionError("unreachable")

    def _write(self, groups: list[tuple[bytes, bytes]], value: bytes, now: float, ttl: float | None) -> None:
        """``groups``: (key, its fields concatenated)."""
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite time (got {now!r})")
        px, keep = self._retention_ms(ttl)
        head: list[bytes | str | int | float] = [value, repr(now), px, repr(keep), self._sweep]
        calls: list[tuple[_Script, list[bytes], list[bytes | str | int | float]]] = []
        keys: list[bytes] = []
        args = list(head)
        records = 0
        for key, blob in groups:
            keys.append(key)
            args.append(blob)
            records += len(blob) // _FIELD
            if records >= _CHUNK:
                calls.append((_WRITE_SCRIPT, keys, args))
                keys, args, records = [], list(head), 0
        if keys:
            calls.append((_WRITE_SCRIPT, keys, args))
        self._scripts(calls)

    # -- PrefixIndex --------------------------------------------------------------------------------

    def lookup(self, scope: str, tokens: Sequence[int], *, now: float, ttl: float) -> Match:
        toks = tokens if isinstance(tokens, list | tuple) else list(tokens)
        n, bs = len(toks), self._bs
        if not n:
            return NO_MATCH
        data, offsets = _encode(toks)
        full = n // bs
        chain = self._chain(self._root(scope), data, offsets, full)
        t = _threshold(now, ttl)

        # Round trip 1: the leading run of held full blocks, walked server-side.
        blocks: list[_Record] = []
        if full:
            calls: list[tuple[_Script, list[bytes], list[bytes | str | int | float]]] = []
            for s in range(0, full, _CHUNK):
                ks = range(s, min(s + _CHUNK, full))
                calls.append(
                    (_WALK_SCRIPT, [self._nkey(chain[k]) for k in ks], [chain[k + 1][:_FIELD] for k in ks])
                )
            for s, got in zip(range(0, full, _CHUNK), self._scripts(calls), strict=True):
                blocks.extend(_Record(v) for v in got)
                if len(got) < min(_CHUNK, full - s):
                    break
        held_depth = len(blocks)
        live_depth = 0
        # A write refreshes its whole path, so last_seen never grows with depth: live blocks lead.
        while live_depth < held_depth and blocks[live_depth].last_seen >= t:
            live_depth += 1

        # Round trip 2 (at most): the prefixes inside the next block, where the held (and live) run stops.
        probes: list[tuple[int, int]] = []  # (block, how many of its prefixes)
        start = held_depth * bs
        rest = min(bs, n - start)
        if rest > 0:
            probes.append((held_depth, rest if rest < bs else bs - 1))  # a full one is known missing
        if live_depth < held_depth:
            probes.append((live_depth, bs - 1))
        ext: dict[int, list[_Record | None]] = {}
        probes = [(k, m) for k, m in probes if m > 0]
        if probes:
            pipe = self._r.pipeline(transaction=False)
            for k, m in probes:
                fields = self._fields(chain[k], data, offsets, k * bs, range(k * bs + 1, k * bs + m + 1))
                pipe.hmget(self._nkey(chain[k]), fields)
            for (k, _), got in zip(probes, pipe.execute(), strict=True):
                ext[k] = [_Record(v) if v is not None else None for v in got]

        held_ext, best = 0, blocks[-1] if blocks else None
        for j, rec in enumerate(ext.get(held_depth, []) if rest > 0 else [], 1):
            if rec is not None:
                held_ext, best = j, rec
        held = start + held_ext
        if held == 0 or best is None:
            return NO_MATCH
        live_ext = 0
        for j, rec in enumerate(ext.get(live_depth, []), 1):
            if rec is not None and rec.last_seen >= t:
                live_ext = j
        return Match(
            common_prefix_tokens=live_depth * bs + live_ext,
            held_prefix_tokens=held,
            entry_id=best.entry_id,
            entry_tokens=best.tokens,
            age_seconds=now - best.last_seen,
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
        """Store a prompt's prefixes. ``ttl``: the scope's cache TTL, for Redis key expiry only
        (None or <= 0: keep up to ``max_age_seconds``). Ids are uuids when not given, so that
        replicas never mint the same one."""
        toks = tokens if isinstance(tokens, list | tuple) else list(tokens)
        eid = entry_id if entry_id is not None else uuid.uuid4().hex
        n, bs = len(toks), self._bs
        if not n:
            return eid
        data, offsets = _encode(toks)
        parent = self._root(scope)
        groups: list[tuple[bytes, bytes]] = []
        cache, fresh = self._blocks, []
        full = n // bs
        for k in range(full):
            s = k * bs
            child = self._digest(parent + data[offsets[s] : offsets[s + bs]])
            blob = cache.get(child)
            if blob is None:
                # The block's fields, ending with the child's own: a conversation's next turn
                # re-inserts the same blocks, so each is hashed position by position only once.
                blob = b"".join(self._fields(parent, data, offsets, s, range(s + 1, s + bs)))
                blob += child[:_FIELD]
                fresh.append((child, blob))
            groups.append((self._nkey(parent), blob))
            parent = child
        if n > full * bs:
            s = full * bs
            groups.append(
                (self._nkey(parent), b"".join(self._fields(parent, data, offsets, s, range(s + 1, n + 1))))
            )
        if fresh:
            self._remember(fresh)
        self._write(groups, b"%s %d %s" % (repr(now).encode(), n, eid.encode()), now, ttl)
        return eid

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
        toks = tokens if isinstance(tokens, list | tuple) else list(tokens)
        groups = self._mark_fields(scope, toks, positions)
        if groups:
            self._write([(k, b"".join(f)) for k, f, _ in groups], repr(now).encode(), now, ttl)

    def marks(
        self, scope: str, tokens: Sequence[int], positions: Iterable[int], *, now: float, ttl: float
    ) -> dict[int, float]:
        toks = tokens if isinstance(tokens, list | tuple) else list(tokens)
        groups = self._mark_fields(scope, toks, positions)
        if not groups:
            return {}
        pipe = self._r.pipeline(transaction=False)
        for key, fields, _ in groups:
            pipe.hmget(key, fields)
        t = _threshold(now, ttl)
        found: dict[int, float] = {}
        for (_, _, where), got in zip(groups, pipe.execute(), strict=True):
            for p, raw in zip(where, got, strict=True):
                if raw is not None and (when := float(raw)) >= t:
                    found[p] = now - when
        return found

    def _mark_fields(
        self, scope: str, toks: Sequence[int], positions: Iterable[int]
    ) -> list[tuple[bytes, list[bytes], list[int]]]:
        """(key, fields, positions) per node that carries marks at the wanted positions."""
        wanted = sorted({p for p in positions if 0 < p <= len(toks)})
        if not wanted:
            return []
        bs = self._bs
        data, offsets = _encode(toks)
        chain = self._chain(self._root(scope), data, offsets, wanted[-1] // bs)
        by_node: dict[int, list[int]] = {}
        for p in wanted:
            by_node.setdefault(p // bs, []).append(p)
        out = []
        for k, ps in by_node.items():
            # The empty partial (a mark on a block boundary) has the node's own digest as field.
            fields = [self._fields(chain[k], data, offsets, k * bs, range(p, p + 1))[0] for p in ps]
            out.append((self._mkey(chain[k]), fields, ps))
        return out

    def stats(self) -> IndexStats:
        """Scans the namespace: O(keys), for diagnostics (``ResilientIndex`` reports its local index).
        ``tokens`` counts prefix records (one a held token), ``blocks`` the nodes that have children;
        ``entries`` is 0: entries live in record values and are not enumerable."""
        blocks = tokens = 0
        for batch in self._scan(self._ns + b":n:*"):
            pipe = self._r.pipeline(transaction=False)
            for key in batch:
                pipe.hlen(key)
                pipe.hexists(key, "~")
            got = pipe.execute()
            blocks += len(batch)
            tokens += sum(int(got[i]) - int(bool(got[i + 1])) for i in range(0, len(got), 2))
        return IndexStats(entries=0, tokens=tokens, blocks=blocks)

    def clear(self) -> None:
        for batch in self._scan(self._ns + b":*"):
            self._r.unlink(*batch)

    def _scan(self, pattern: bytes) -> Iterable[list[bytes]]:
        cursor: int = 0
        while True:
            cursor, keys = self._r.scan(cursor, match=pattern, count=1000)
            if keys:
                yield [k if isinstance(k, bytes) else k.encode() for k in keys]
            if cursor == 0:
                return

    def ping(self) -> bool:
        return bool(self._r.ping())
