"""The Lua scripts of ``RedisIndex`` (layout: see ``redis.py``), run atomically inside Redis.

A node's children are the members of one sorted set, all of score 0 so that they sort by bytes:
``groups ‖ 0x00 ‖ "last_seen tokens entry_id"``, one 4-byte group a token (its first byte has the
high bit set, so the 0x00 terminator sorts a block before every block it is a prefix of). The
member that shares the most tokens with a query block is therefore one of the query's two
neighbours in that order, and the members sharing a given number of tokens with it are a
contiguous run around it: ``ZRANGEBYLEX`` finds both in O(log n). A full block also has a small
member ``0x01 ‖ its chain digest (8 bytes) ‖ 0x00 ‖ value``, so that walking the held blocks needs
8 bytes of each query block, not all of its bytes (it sorts before every block and shares
nothing with a query). Every key a script touches is
in its KEYS, all of one scope (one hash slot), so the scripts also run on a Redis Cluster.
Redis runs Lua 5.1: no integer division, no ``goto``.
"""

from __future__ import annotations

import hashlib

__all__ = ["AROUND", "LOOKUP", "MARK_WRITE", "WRITE", "Script"]

_COMMON = r"""
local function groups_shared(q, m)
  -- The largest g such that the first 4g bytes agree (binary search: string compares run in C).
  local lo, hi = 0, math.floor(math.min(#q, #m) / 4)
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if string.sub(q, 1, 4 * mid) == string.sub(m, 1, 4 * mid) then lo = mid else hi = mid - 1 end
  end
  return lo
end

local function value_of(m)
  -- The value after the terminator: a value holds no NUL, so the terminator is the last one
  -- (a pattern runs in C; stepping over the groups in Lua would cost ~25 µs a member).
  return string.match(m, '%z([^%z]*)$')
end

local function when(v) return tonumber(string.match(v, '^%S+')) end
"""

_AROUND = r"""
local function fetch(key, q, side, offset, count)
  if side == 1 then return redis.call('ZRANGEBYLEX', key, '[' .. q, '+', 'LIMIT', offset, count) end
  return redis.call('ZREVRANGEBYLEX', key, '(' .. q, '-', 'LIMIT', offset, count)
end

-- {groups shared with q, value of the newest member sharing them, groups of the best live one}
local function around(key, q, t, cap)
  -- The nearest members on both sides first (most lookups need no more than those).
  local first = {fetch(key, q, 1, 0, 2), fetch(key, q, 2, 0, 2)}
  local held, best, newest, live = 0, false, -math.huge, 0
  for side = 1, 2 do
    if first[side][1] then held = math.max(held, groups_shared(q, first[side][1])) end
  end
  if held == 0 then return {0, false, 0} end
  for side = 1, 2 do
    local got, offset, batch, seen, done = first[side], 0, 2, 0, false
    while not done do
      for i = 1, #got do
        local m = got[i]
        local shared = groups_shared(q, m)
        -- Shared groups only shrink away from the query: past this, nothing can improve.
        if shared < held and shared <= live then done = true; break end
        local v = value_of(m)
        local w = when(v)
        if shared == held and w > newest then best, newest = v, w end
        if w >= t and shared > live then live = shared end
        seen = seen + 1
      end
      if done or #got < batch or seen >= cap then break end
      offset, batch = offset + #got, math.min(batch * 4, cap)
      got = fetch(key, q, side, offset, batch)
    end
  end
  return {held, best, live}
end
"""

# KEYS: the nodes of the query's blocks, in order. ARGV: live threshold, how many members to look
# at on each side, m, the chain digest (8 bytes) of each full block ("" for a partial one), then
# the member bytes of the last m blocks. Walks the full blocks held, then looks around the query
# inside the block where the walk stops (and inside the first walked block no longer live), when
# it was given that block's bytes. Returns {values of the walked blocks, the stop's {shared
# groups, value of the newest member sharing them, shared groups of the best live one} or false,
# index of the first dead walked block (0: none), its live groups, whether the stop's and the
# dead block's bytes are still needed (then the caller asks AROUND)}.
LOOKUP_SOURCE = (
    _COMMON
    + _AROUND
    + r"""
local t, cap, given = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = #KEYS
local function member(k)
  if k > n - given then return ARGV[3 + n + k - (n - given)] end
  return nil
end
local walked, dead, stop, need_stop, need_dead = {}, 0, false, 0, 0
for k = 1, n do
  local d = ARGV[3 + k]
  local got = false
  if d ~= '' then
    got = redis.call('ZRANGEBYLEX', KEYS[k], '[\1' .. d .. '\0', '(\1' .. d .. '\1', 'LIMIT', 0, 1)[1]
  end
  if not got then
    local q = member(k)
    if q then stop = around(KEYS[k], q, t, cap) else need_stop = 1 end
    break
  end
  local v = string.sub(got, 11)
  walked[#walked + 1] = v
  if dead == 0 and when(v) < t then dead = k end
end
local dead_live = 0
if dead > 0 then
  local q = member(dead)
  if q then dead_live = around(KEYS[dead], q, t, cap)[3] else need_dead = 1 end
end
return {walked, stop, dead, dead_live, need_stop, need_dead}
"""
)

# KEYS[1]: a node. ARGV: live threshold, members to look at on each side, the query block's bytes.
AROUND_SOURCE = (
    _COMMON
    + _AROUND
    + r"""
return around(KEYS[1], ARGV[3], tonumber(ARGV[1]), tonumber(ARGV[2]))
"""
)

# KEYS: nodes. ARGV: value, now, expiry ms, retention s, sweep threshold, then per key the member
# groups and the block's 8-byte chain digest ("" for a partial block). A member is replaced only
# by a write at least as recent (skewed replica clocks cannot age a prefix). Key expiry is garbage
# collection: set to the retention, never shortened. A node that keeps getting new children (a
# shared system prompt) is swept of children older than the retention whenever it doubles past
# the threshold (amortised O(1) a write); the size after the last sweep is kept in the member
# 0x00 "~" (it sorts before every block and shares nothing).
WRITE_SOURCE = (
    _COMMON
    + r"""
local value, now, px = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest, limit = now - tonumber(ARGV[4]), tonumber(ARGV[5])
local function upsert(key, g)
  -- Returns whether the member is new. A write at least as recent replaces the old value.
  local old = redis.call('ZRANGEBYLEX', key, '[' .. g .. '\0', '(' .. g .. '\1', 'LIMIT', 0, 1)[1]
  if old and when(string.sub(old, #g + 2)) > now then return false end
  -- Add before removing: a set emptied for a moment would lose its key's longer expiry.
  redis.call('ZADD', key, 0, g .. '\0' .. value)
  if old and old ~= g .. '\0' .. value then redis.call('ZREM', key, old) end
  return not old
end
for k, key in ipairs(KEYS) do
  local g, d = ARGV[4 + 2 * k], ARGV[5 + 2 * k]
  if d ~= '' then upsert(key, '\1' .. d) end
  local fresh = upsert(key, g)
  if fresh then
    if limit > 0 then
      local size = redis.call('ZCARD', key)
      local mark = redis.call('ZRANGEBYLEX', key, '[\0~', '(\0\127', 'LIMIT', 0, 1)[1]
      local last = 0
      if mark then last = tonumber(string.sub(mark, 3)) end
      if size > limit and size > 2 * last then
        local dead = {}
        for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
          if string.byte(m, 1) >= 1 and when(value_of(m)) < oldest then dead[#dead + 1] = m end
        end
        for i = 1, #dead, 1000 do
          redis.call('ZREM', key, unpack(dead, i, math.min(i + 999, #dead)))
        end
        if mark then redis.call('ZREM', key, mark) end
        redis.call('ZADD', key, 0, '\0~' .. (size - #dead))
      end
    end
  end
  local pttl = redis.call('PTTL', key)
  if pttl >= -1 and pttl < px then redis.call('PEXPIRE', key, px) end
end
return 0
"""
)

# Marks (cache writes at exact positions): KEYS: mark hashes; ARGV: value (a timestamp), now,
# expiry ms, then per key its 8-byte fields concatenated. Never moves a mark back in time.
MARK_WRITE_SOURCE = r"""
local value, now, px = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for k, key in ipairs(KEYS) do
  local blob, fields = ARGV[3 + k], {}
  for i = 1, #blob, 8 do fields[#fields + 1] = string.sub(blob, i, i + 7) end
  local old = redis.call('HMGET', key, unpack(fields))
  local args = {}
  for i = 1, #fields do
    if not old[i] or tonumber(old[i]) <= now then
      args[#args + 1] = fields[i]
      args[#args + 1] = value
    end
  end
  if #args > 0 then redis.call('HSET', key, unpack(args)) end
  local pttl = redis.call('PTTL', key)
  if pttl >= -1 and pttl < px then redis.call('PEXPIRE', key, px) end
end
return 0
"""


class Script:
    """A script's source and SHA-1 (what EVALSHA names it by)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


LOOKUP = Script(LOOKUP_SOURCE)
AROUND = Script(AROUND_SOURCE)
WRITE = Script(WRITE_SOURCE)
MARK_WRITE = Script(MARK_WRITE_SOURCE)
