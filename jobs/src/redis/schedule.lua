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
-- The delay is added to the server's TIME, never a client's clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local earliest = nil
for i = 3, #ARGV, 5 do
  local id = ARGV[i]
  local meta = redis.call('HGET', KEYS[1], id)
  if meta then
    out[#out + 1] = {0, string.match(meta, '^%a:%d+:%d+:(%d+)$')}
  else
    local run_ns, score
    if ARGV[i + 1] == 'after' then
      score = now + tonumber(ARGV[i + 2])
      run_ns = string.format('%.0f', score) .. '000'
    else
      run_ns = ARGV[i + 2]
      score = tonumber(ARGV[i + 3])
    end
    redis.call('HSET', KEYS[1], id, 'p:0:0:' .. run_ns)
    redis.call('HSET', KEYS[2], id, ARGV[i + 4])
    redis.call('ZADD', KEYS[3], score, id)
    redis.call('HINCRBY', KEYS[4], 'pending', 1)
    if not earliest or score < earliest then earliest = score end
    out[#out + 1] = {1, run_ns}
  end
end
if earliest then
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then
    redis.call(ARGV[2], ARGV[1], string.format('%.0f', earliest))
  end
end
return out
