"""The Lua scripts of ``RedisIndex`` (layout: see ``redis.py``), run atomically inside Redis.

A node's children are the members of one sorted set, all of score 0 so that they sort by bytes:
``groups ‖ 0x00 ‖ tail``, one 4-byte group a token (its first byte has the high bit set, so the
0x00 terminator sorts a block before every block it is a prefix of). The member that shares the
most tokens with a query block is therefore one of the query's two neighbours in that order, and
the members sharing a given number of tokens with it are a contiguous run around it:
``ZRANGEBYLEX`` finds both in O(log n). A partial block's tail is its value ``"last_seen tokens
entry_id"``; a full block's is ``#`` and its chain digest in hex, and its value is the field of
that digest (8 bytes) in the scope's values hash (the last of a script's KEYS): finding the held
blocks needs 8 bytes of each query block, and a write through stored blocks reads and sets their
values with one HMGET and one HSET, not three calls a block (a script's cost is mostly its calls).
Every key a script touches is in its KEYS, all of one scope (one hash slot), so the scripts also
run on a Redis Cluster. Redis
runs Lua 5.1: no integer division, no ``goto``; every new string is work for its garbage
collector (most of a script's cost), so compares avoid making long substrings.

This module is long because the scripts share their helpers (the member encoding, the search
inside a node) and one layout: split, each part would only make sense with the others.
"""

from __future__ import annotations

import hashlib

__all__ = ["AROUND", "LOOKUP", "MARK_WRITE", "WRITE", "Script"]

_COMMON = r"""
local function terminator(m)
  -- A value holds no NUL, so the terminator is the last one: found by plain searches (memchr,
  -- in C) from near the end, as a value is short. A pattern over a whole 2 KiB member costs
  -- ~35 µs, stepping over the groups in Lua ~25 µs.
  local at = string.find(m, '\0', math.max(1, #m - 160), true) or string.find(m, '\0', 1, true)
  while true do
    local after = string.find(m, '\0', at + 1, true)
    if not after then return at end
    at = after
  end
end

local function value_of(m)
  return string.sub(m, terminator(m) + 1)
end

local function groups_shared(q, m)
  -- The largest g such that the first 4g bytes of the query's groups q and of member m agree.
  if string.byte(m, 1) < 128 then return 0 end  -- the sweep mark
  local hi = math.min(#q, terminator(m) - 1) / 4
  -- Most often one is a prefix of the other (a conversation's turns): one compare. Otherwise a
  -- binary search (string compares run in C) that only compares the bytes not known to agree:
  -- each substring is a new Lua string, and their bytes (the garbage collector's work) are most
  -- of the cost.
  if string.sub(q, 1, 4 * hi) == string.sub(m, 1, 4 * hi) then return hi end
  local lo = 0  -- the first lo groups agree
  hi = hi - 1
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    local from, to = 4 * lo + 1, 4 * mid
    if string.sub(q, from, to) == string.sub(m, from, to) then lo = mid else hi = mid - 1 end
  end
  return lo
end

local function when(v) return tonumber(string.match(v, '^%S+')) end

local function unhex(h)
  return (string.gsub(h, '..', function(x) return string.char(tonumber(x, 16)) end))
end

local function value_in(values, m)
  -- A partial block's member holds its value; a full block's holds '#' and its digest in hex, and
  -- the value is that digest's field in the values hash (one field to refresh per write, not the
  -- block's bytes).
  local v = value_of(m)
  if string.byte(v, 1) ~= 35 then return v end
  local got = redis.call('HGET', values, unhex(string.sub(v, 2)))
  if got then return got end
  return nil
end
"""

_AROUND = r"""
local function fetch(key, from, side, offset, count)
  if side == 1 then return redis.call('ZRANGEBYLEX', key, from, '+', 'LIMIT', offset, count) end
  return redis.call('ZREVRANGEBYLEX', key, from, '-', 'LIMIT', offset, count)
end

-- {groups shared with q, value of the newest member sharing them, groups of the best live one}
local function around(key, values, q, t, cap)
  local memo = {}
  local function shared_of(m)
    local got = memo[m]
    if not got then
      got = groups_shared(q, m)
      memo[m] = got
    end
    return got
  end
  local function at_least(m, k)
    -- Whether m shares the first k groups with q: one compare, where groups_shared searches (its
    -- substrings are most of a lookup's cost).
    if string.byte(m, 1) < 128 or terminator(m) - 1 < 4 * k then return false end
    return string.sub(m, 1, 4 * k) == string.sub(q, 1, 4 * k)
  end
  -- The nearest members on both sides first (most lookups need no more than those).
  local from = {'[' .. q, '(' .. q}
  local first = {fetch(key, from[1], 1, 0, 2), fetch(key, from[2], 2, 0, 2)}
  local held, best, newest, live = 0, false, -math.huge, 0
  for side = 1, 2 do
    if first[side][1] then held = math.max(held, shared_of(first[side][1])) end
  end
  if held == 0 then return {0, false, 0} end
  for side = 1, 2 do
    local got, offset, batch, seen, done = first[side], 0, 2, 0, false
    while not done do
      for i = 1, #got do
        local m = got[i]
        local shared = memo[m]
        if not shared then
          if live == held then
            -- The best member is live (most often): whether m shares all held groups decides.
            if at_least(m, held) then shared = held else done = true; break end
          else
            shared = shared_of(m)
          end
        end
        -- Shared groups only shrink away from the query: past this, nothing can improve.
        if shared < held and shared <= live then done = true; break end
        local v = value_in(values, m)
        if v then
          local w = when(v)
          if shared == held and w > newest then best, newest = v, w end
          if w >= t and shared > live then live = shared end
        end
        seen = seen + 1
      end
      if done or #got < batch or seen >= cap then break end
      offset, batch = offset + #got, math.min(batch * 4, cap)
      got = fetch(key, from[side], side, offset, batch)
    end
  end
  if not best then return {0, false, 0} end  -- a full block whose value is gone from the values hash
  return {held, best, live}
end
"""

# KEYS: the nodes of the query's blocks, in order, then the values hash. ARGV: live threshold, how
# many members to look
# at on each side, m, the chain digests (8 bytes each) of the full blocks concatenated (the full
# blocks come first; a last key beyond them is the partial block), then the member bytes of the
# last m blocks. Finds the full blocks held, then looks around the query
# inside the block where they end (and inside the first held block no longer live), when it was
# given that block's bytes. Held blocks are a prefix of the query's (every write stores a prompt's
# whole path) and their last writes only get older along it (a write stores one time on its whole
# path, and never moves a block back in time): so both ends are found by probing a few blocks,
# not by walking all of them, and a lookup costs the same at 500 tokens or at 50,000. Returns
# {blocks held, the value of the last one (false: none), the stop's {shared groups, value of the
# newest member sharing them, shared groups of the best live one} or false, index of the first
# held block no longer live (0: none), its live groups, whether the stop's and that block's
# bytes are still needed (then the caller asks AROUND)}.
LOOKUP_SOURCE = (
    _COMMON
    + _AROUND
    + r"""
local t, cap, given, digests = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local n, full = #KEYS - 1, #ARGV[4] / 8
local vals = KEYS[#KEYS]
local function member(k)
  if k > n - given then return ARGV[4 + k - (n - given)] end
  return nil
end
local values = {}
local function value(k)
  -- The value of full block k, or false when it is not held.
  local v = values[k]
  if v == nil then
    v = false
    if k <= full then
      v = redis.call('HGET', vals, string.sub(digests, 8 * k - 7, 8 * k))
      -- A value outlives its block when the hash is kept by the scope's other writes: the block
      -- is held while its node is there (expiry is garbage collection, and it only shrinks along
      -- a path: a write through a block passes its parents).
      if v and redis.call('EXISTS', KEYS[k]) == 0 then v = false end
    end
    values[k] = v
  end
  return v
end
-- Blocks held: most often all of them, or all but the last (a turn that filled a block).
local held = 0
if value(n) then held = n elseif n > 1 and value(n - 1) then held = n - 1 elseif n > 2 then
  local lo, hi = 0, n - 2  -- the last one held is in lo..hi
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if value(mid) then lo = mid else hi = mid - 1 end
  end
  held = lo
end
local stop, need_stop, need_dead, dead = false, 0, 0, 0
if held < n then
  local q = member(held + 1)
  if q then stop = around(KEYS[held + 1], vals, q, t, cap) else need_stop = 1 end
end
local function dead_at(k)
  local v = value(k)
  return not v or when(v) < t
end
if held > 0 and dead_at(held) then
  local lo, hi = 1, held  -- the first one no longer live is in lo..hi
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if dead_at(mid) then hi = mid else lo = mid + 1 end
  end
  dead = lo
end
local dead_live = 0
if dead > 0 then
  local q = member(dead)
  if q then dead_live = around(KEYS[dead], vals, q, t, cap)[3] else need_dead = 1 end
end
return {held, held > 0 and value(held), stop, dead, dead_live, need_stop, need_dead}
"""
)

# KEYS: a node, the values hash. ARGV: live threshold, members to look at on each side, the query
# block's bytes.
AROUND_SOURCE = (
    _COMMON
    + _AROUND
    + r"""
return around(KEYS[1], KEYS[2], ARGV[3], tonumber(ARGV[1]), tonumber(ARGV[2]))
"""
)

# KEYS: nodes, then the values hash. ARGV: value, now, expiry ms, retention s, sweep threshold, the
# 8-byte chain digests of the full blocks concatenated (they come first; a last node beyond them is
# the partial block), one byte a node ('g': its member groups follow, '-': left out), then the
# groups given, in order. A full block is its groups member (with '#' and the digest in hex) in its
# node and its value in the values hash; the caller may leave out the groups of a full block it
# knows is stored (it wrote or walked it): while its node and its value are there, so is its
# groups member (a sweep drops both). Returns the 1-based indexes of the full blocks whose groups
# were left out and are not stored (the caller writes those again, with their groups).
# A value is replaced only by a write at least as recent (skewed replica clocks cannot age a
# prefix). Key expiry is garbage collection: set to the retention, never shortened. A node or the
# values hash that keeps getting new entries (a shared system prompt, a busy scope) is swept of
# those older than the retention whenever it doubles past the threshold (amortised O(1) a write);
# the size after the last sweep is kept in the member 0x00 "~" of a node (it sorts before every
# block and shares nothing) and in the field "~" of the hash (a digest field is 8 bytes).
WRITE_SOURCE = (
    _COMMON
    + r"""
local value, now, px = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local oldest, limit = now - tonumber(ARGV[4]), tonumber(ARGV[5])
local n = #KEYS - 1
local vals = KEYS[#KEYS]
-- PEXPIRE … GT (Redis 7) extends an expiry in one call; a key this script made has one.
local gt = (redis.REDIS_VERSION_NUM or 0) >= 0x070000
local function extend(key)
  -- Never shortens the key's expiry; returns whether the key exists. GT fails on an expiry as long
  -- already (a write in the same millisecond) and on a key without one (made by this script).
  if gt and redis.call('PEXPIRE', key, px, 'GT') == 1 then return true end
  local pttl = redis.call('PTTL', key)
  if pttl == -2 then return false end
  if pttl == -1 or (not gt and pttl < px) then redis.call('PEXPIRE', key, px) end
  return true
end
local function hex(d)
  return (string.gsub(d, '.', function(c) return string.format('%02x', string.byte(c)) end))
end
local function drop(key, cmd, items)
  for i = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
  end
end
local function sweep(key)
  local size = redis.call('ZCARD', key)
  local mark = redis.call('ZRANGEBYLEX', key, '[\0~', '(\0\127', 'LIMIT', 0, 1)[1]
  local last = 0
  if mark then last = tonumber(string.sub(mark, 3)) end
  if size <= limit or size <= 2 * last then return end
  local dead, fulls, fields = {}, {}, {}
  for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if string.byte(m, 1) >= 128 then
      local v = value_of(m)
      if string.byte(v, 1) == 35 then
        fulls[#fulls + 1] = m
        fields[#fields + 1] = unhex(string.sub(v, 2))
      elseif when(v) < oldest then
        dead[#dead + 1] = m
      end
    end
  end
  local gone = {}
  for i = 1, #fields, 1000 do
    local got = redis.call('HMGET', vals, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #got do
      local v = got[j]
      if not v or when(v) < oldest then
        dead[#dead + 1] = fulls[i + j - 1]
        if v then gone[#gone + 1] = fields[i + j - 1] end
      end
    end
  end
  drop(vals, 'HDEL', gone)
  drop(key, 'ZREM', dead)
  if mark then redis.call('ZREM', key, mark) end
  redis.call('ZADD', key, 0, '\0~' .. (size - #dead))
end
local function sweep_values()
  local size = redis.call('HLEN', vals)
  local last = tonumber(redis.call('HGET', vals, '~') or '0')
  if size <= limit or size <= 2 * last then return end
  local all, gone = redis.call('HGETALL', vals), {}
  for i = 1, #all, 2 do
    if #all[i] == 8 and when(all[i + 1]) < oldest then gone[#gone + 1] = all[i] end
  end
  drop(vals, 'HDEL', gone)
  redis.call('HSET', vals, '~', size - #gone)
end
local missing, digests, mask, at = {}, ARGV[6], ARGV[7], 7
local full = #digests / 8
-- Nodes with a new member are swept last, once this write's values are set (a sweep drops a
-- block whose value is missing or old).
local sets, swept = {}, {}
if full > 0 then
  local fields = {}
  for k = 1, full do fields[k] = string.sub(digests, 8 * k - 7, 8 * k) end
  local olds = redis.call('HMGET', vals, unpack(fields))
  for k = 1, full do
    local key, old, stored = KEYS[k], olds[k], true
    if string.byte(mask, k) == 103 then  -- 'g': the groups are given
      at = at + 1
      if redis.call('ZADD', key, 0, ARGV[at] .. '\0#' .. hex(fields[k])) == 1 then
        swept[#swept + 1] = key
      end
      extend(key)
    elseif not (extend(key) and old) then
      missing[#missing + 1] = k
      stored = false
    end
    if stored and (not old or when(old) <= now) then
      sets[#sets + 1] = fields[k]
      sets[#sets + 1] = value
    end
  end
end
if n > full and string.byte(mask, n) == 103 then  -- a partial block's groups are always given
  local key = KEYS[n]
  at = at + 1
  local g = ARGV[at]
  local old = redis.call('ZRANGEBYLEX', key, '[' .. g .. '\0', '(' .. g .. '\1', 'LIMIT', 0, 1)[1]
  if not (old and when(string.sub(old, #g + 2)) > now) then
    -- Add before removing: a set emptied for a moment would lose its key's longer expiry.
    redis.call('ZADD', key, 0, g .. '\0' .. value)
    if old and old ~= g .. '\0' .. value then redis.call('ZREM', key, old) end
    if not old then swept[#swept + 1] = key end
  end
  extend(key)
end
local new_values = 0
if #sets > 0 then
  new_values = redis.call('HSET', vals, unpack(sets))
  extend(vals)
end
if limit > 0 then
  for _, key in ipairs(swept) do sweep(key) end
  if new_values > 0 then sweep_values() end
end
return missing
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
