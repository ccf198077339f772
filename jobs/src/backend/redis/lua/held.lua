-- held.lua: the tombstones of `Dedup::HoldOff`. Not a script of its own: prepended (after
-- kinds.lua) to schedule.lua, ack.lua, claim.lua and import.lua, which pass their keys in a
-- table H {held = ..., held_until = ...}, both declared in their KEYS, under the partition's
-- tag (and to retry.lua and cancel.lua, for next.lua's use of its functions only):
--
--   held        hash  id -> until_ns (decimal text, exact): the id was acked with a
--                     hold-off, and a schedule of it before until_ns stores nothing
--   held_until  zset  the same ids scored by ceil(until_ns / 1000), so that a claim deletes
--                     the expired ones, earliest first, a bounded number per call
--
-- An ack of a job whose tail holds a hold-off (kinds.lua) writes its tombstone in the same
-- script as the ack (acks.lua), so neither is ever seen without the other. A tombstone is
-- no job: `get`, counts and lists never see it. One whose until has passed is dead weight
-- only: a schedule or import meeting it deletes it, and claims delete up to HELD_PER_CLAIM.

local HELD_PER_CLAIM = 64

-- A hold-off longer than this (100 years, in microseconds) is this long: the sum with the
-- server's time stays exact in a double.
local HELD_MAX_US = 3153600000000000

-- The hold-off in nanoseconds (decimal text) a tail stores, or nil for none.
local function job_hold(tail)
  return string.match(tail or '', '^:%-?%d+:%d+:%d+:%d+:%d+:(%d+)[\30\31]')
end

-- a < b for decimal texts of non-negative integers without leading zeros (nanoseconds,
-- past a double's exact range: compared as texts, bytewise).
local function ns_less(a, b)
  if #a ~= #b then return #a < #b end
  return less(a, b)
end

-- The server's time `now_us` (microseconds) as nanoseconds, a decimal text.
local function now_ns_text(now_us)
  return string.format('%.0f', now_us) .. '000'
end

-- The end of the hold-off `hold` (ns text) of a job acked at `now_us`: until_ns (a decimal
-- text) and its score, ceil(until_ns / 1000).
local function held_until_ns(now_us, hold)
  local us = ns_us(hold)
  local rest = string.sub('000' .. hold, -3)
  if us > HELD_MAX_US then
    us = HELD_MAX_US
    rest = '000'
  end
  local floor = now_us + us
  local until_ns = string.format('%.0f', floor) .. rest
  local score = floor
  if rest ~= '000' then score = floor + 1 end
  return until_ns, score
end

-- Writes the tombstone of `id`, acked at `now_us` with the hold-off `hold` (ns text); its
-- until_ns.
local function held_put(H, id, now_us, hold)
  local until_ns, score = held_until_ns(now_us, hold)
  redis.call('HSET', H.held, id, until_ns)
  redis.call('ZADD', H.held_until, score, id)
  return until_ns
end

-- Deletes the tombstone of `id`.
local function held_drop(H, id)
  redis.call('HDEL', H.held, id)
  redis.call('ZREM', H.held_until, id)
end

-- Deletes at most HELD_PER_CLAIM tombstones whose until is at or before now_us, earliest
-- first; how many.
local function held_expire(H, now_us)
  local ids = redis.call('ZRANGEBYSCORE', H.held_until, '-inf', now_us, 'LIMIT', 0, HELD_PER_CLAIM)
  if #ids > 0 then
    redis.call('HDEL', H.held, unpack(ids))
    redis.call('ZREM', H.held_until, unpack(ids))
  end
  return #ids
end
