-- import.lua: write jobs exactly as a copy from another queue gives them (pending at their
-- run_at, or dead since their death time, with their attempts, last error and payload),
-- each unless its id exists.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts, KEYS[5] dead, KEYS[6] errors
-- (see schedule.lua, claim.lua)
-- ARGV[1] wake channel, ARGV[2] 'PUBLISH' | 'SPUBLISH' (see schedule.lua)
-- ARGV[3..] groups of 8: id, 'p' (pending) | 'd' (dead), attempt, run_at_ns, score
--           (pending: ceil(run_at_ns / 1000), its due score; dead: its death time in
--           microseconds, its dead index score), '1' if a last error follows else '0', the
--           last error (at most 4 KiB), payload
--
-- Returns one 1 (written) | 0 (the id exists: left as it is) per job, in order.
-- Atomic because a script runs alone: as in schedule.lua, the existence check and the writes
-- cannot interleave with another client's schedule of the same id, and all jobs land or
-- none. The counters move by what was written; a pending job that becomes the first due
-- wakes idle consumers as a schedule does. At most 512 jobs; an id twice in one batch is
-- written once.
local out = {}
local written = {}
local pending, dead = 0, 0
local earliest = nil
for i = 3, #ARGV, 8 do
  local id, state, attempt, run_ns, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if written[id] or redis.call('HEXISTS', KEYS[1], id) == 1 then
    out[#out + 1] = 0
  else
    written[id] = true
    redis.call('HSET', KEYS[1], id, state .. ':' .. attempt .. ':0:' .. run_ns)
    redis.call('HSET', KEYS[2], id, ARGV[i + 7])
    if ARGV[i + 5] == '1' then redis.call('HSET', KEYS[6], id, ARGV[i + 6]) end
    if state == 'd' then
      redis.call('ZADD', KEYS[5], score, id)
      dead = dead + 1
    else
      redis.call('ZADD', KEYS[3], score, id)
      pending = pending + 1
      local s = tonumber(score)
      if not earliest or s < earliest then earliest = s end
    end
    out[#out + 1] = 1
  end
end
if dead > 0 then redis.call('HINCRBY', KEYS[4], 'dead', dead) end
if pending > 0 then
  redis.call('HINCRBY', KEYS[4], 'pending', pending)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if tonumber(head[2]) >= earliest then
    redis.call(ARGV[2], ARGV[1], string.format('%.0f', earliest))
  end
end
return out
