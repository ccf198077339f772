-- schedule.lua: create jobs unless their id exists (idempotent), due at a time or after a delay.
--
-- KEYS[1] meta    hash  id -> "state:attempt:token:run_at_ns" (state p|r|d: pending, running, dead)
-- KEYS[2] payload hash  id -> payload bytes
-- KEYS[3] due     zset  pending ids scored by run_at in microseconds (a running job is in
--                       claim.lua's running set instead, scored by its lease end)
-- KEYS[4] counts  hash  pending | running | dead
-- ARGV[1] wake channel (sent the new head's score when a job becomes the first due)
-- ARGV[2] 'PUBLISH', or 'SPUBLISH' on a cluster (the channel shares the keys' hash tag)
-- ARGV[3..] groups of 5: id, mode ("at" | "after"), ns (at: run_at in ns, exact) or
--           us (after: delay in microseconds), score (at: ceil(ns / 1000)), payload
--
-- Returns one {created (1|0), run_at_ns} per job, in order.
-- Atomic because a script runs alone: the existence check and the three writes cannot
-- interleave with another client's schedule of the same id, and all jobs land or none.
-- The delay is added to the server's TIME, never a client's clock. One HMGET reads every
-- id's state, then one HSET, HSET, ZADD and HINCRBY write the whole batch (at most 512
-- jobs, so the unpacked argument lists stay small); an id twice in one batch is created
-- once, as two calls in a row would.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ids = {}
for i = 3, #ARGV, 5 do ids[#ids + 1] = ARGV[i] end
local metas = redis.call('HMGET', KEYS[1], unpack(ids))
local out = {}
local earliest = nil
local created = {}
local meta_writes = {}
local payloads = {}
local scores = {}
local n = 0
for j, id in ipairs(ids) do
  local i = 3 + (j - 1) * 5
  local run_ns = created[id] or (metas[j] and string.match(metas[j], '^%a:%d+:%d+:(%d+)$'))
  if run_ns then
    out[j] = {0, run_ns}
  else
    local score
    if ARGV[i + 1] == 'after' then
      score = now + tonumber(ARGV[i + 2])
      run_ns = string.format('%.0f', score) .. '000'
    else
      run_ns = ARGV[i + 2]
      score = tonumber(ARGV[i + 3])
    end
    created[id] = run_ns
    meta_writes[#meta_writes + 1] = id
    meta_writes[#meta_writes + 1] = 'p:0:0:' .. run_ns
    payloads[#payloads + 1] = id
    payloads[#payloads + 1] = ARGV[i + 4]
    scores[#scores + 1] = score
    scores[#scores + 1] = id
    if not earliest or score < earliest then earliest = score end
    n = n + 1
    out[j] = {1, run_ns}
  end
end
if earliest then
  redis.call('HSET', KEYS[1], unpack(meta_writes))
  redis.call('HSET', KEYS[2], unpack(payloads))
  redis.call('ZADD', KEYS[3], unpack(scores))
  redis.call('HINCRBY', KEYS[4], 'pending', n)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then
    redis.call(ARGV[2], ARGV[1], string.format('%.0f', earliest))
  end
end
return out
