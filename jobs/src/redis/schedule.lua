-- schedule.lua: create jobs unless their id exists (idempotent), due at a time or after a delay.
--
-- KEYS[1] meta    hash  id -> "state:attempt:token:run_at_ns" (state p|l|d)
-- KEYS[2] payload hash  id -> payload bytes
-- KEYS[3] due     zset  id scored by due time in microseconds (run_at, or lease end)
-- KEYS[4] counts  hash  pending | leased | dead
-- ARGV[1] wake channel (sent the new head's score when a job becomes the first due)
-- ARGV[2] 'PUBLISH', or 'SPUBLISH' on a cluster (the channel shares the keys' hash tag)
-- ARGV[3..] groups of 5: id, mode ("at" | "after"), ns (at: run_at in ns, exact) or
--           us (after: delay in microseconds), score (at: ceil(ns / 1000)), payload
--
-- Returns one {created (1|0), run_at_ns} per job, in order.
-- Atomic because a script runs alone: the existence check and the three writes cannot
-- interleave with another client's schedule of the same id, and all jobs land or none.
-- The delay is added to the server's TIME, never a client's clock. One HSETNX per job
-- (the check and the write at once), then one HSET, ZADD and HINCRBY for the whole batch
-- (at most 512 jobs, so the unpacked argument lists stay small).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local earliest = nil
local payloads = {}
local scores = {}
local created = 0
for i = 3, #ARGV, 5 do
  local id = ARGV[i]
  local run_ns, score
  if ARGV[i + 1] == 'after' then
    score = now + tonumber(ARGV[i + 2])
    run_ns = string.format('%.0f', score) .. '000'
  else
    run_ns = ARGV[i + 2]
    score = tonumber(ARGV[i + 3])
  end
  if redis.call('HSETNX', KEYS[1], id, 'p:0:0:' .. run_ns) == 1 then
    payloads[#payloads + 1] = id
    payloads[#payloads + 1] = ARGV[i + 4]
    scores[#scores + 1] = score
    scores[#scores + 1] = id
    created = created + 1
    if not earliest or score < earliest then earliest = score end
    out[#out + 1] = {1, run_ns}
  else
    local meta = redis.call('HGET', KEYS[1], id)
    out[#out + 1] = {0, string.match(meta, '^%a:%d+:%d+:(%d+)$')}
  end
end
if earliest then
  redis.call('HSET', KEYS[2], unpack(payloads))
  redis.call('ZADD', KEYS[3], unpack(scores))
  redis.call('HINCRBY', KEYS[4], 'pending', created)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then
    redis.call(ARGV[2], ARGV[1], string.format('%.0f', earliest))
  end
end
return out
