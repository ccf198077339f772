-- retry.lua: give a running job back to run again after a delay, or kill it if that was its
-- last attempt.
--
-- Mirrors core/state `Machine::retry` (stale token: nothing; last attempt: dead; else pending
-- again) (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta, KEYS[2] due, KEYS[3] counts, KEYS[4] dead, KEYS[5] errors, KEYS[6] running
-- (see schedule.lua, claim.lua)
-- ARGV[1] id, ARGV[2] token, ARGV[3] delay in microseconds, ARGV[4] max attempts,
-- ARGV[5] wake channel, ARGV[6] 'PUBLISH' | 'SPUBLISH' (see schedule.lua), ARGV[7] (a
-- failure only) the job's new last error, at most 4 KiB; without it the last error stays
--
-- Returns {0, ""} for a stale token, {1, run_at_ns} when pending again, {2, ""} when dead.
-- Atomic with claim and ack (token checked and state changed in one step). The job moves
-- from running to due (pending) or dead.
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return {0, ''} end
local state, attempt, token, run_ns = string.match(meta, '^(%a):(%d+):(%d+):(%d+)$')
if state ~= 'r' or token ~= ARGV[2] then return {0, ''} end
if ARGV[7] then redis.call('HSET', KEYS[5], ARGV[1], ARGV[7]) end
redis.call('HINCRBY', KEYS[3], 'running', -1)
redis.call('ZREM', KEYS[6], ARGV[1])
local t = redis.call('TIME')
if tonumber(attempt) >= tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], ARGV[1], 'd:' .. attempt .. ':0:' .. run_ns)
  redis.call('ZADD', KEYS[4], tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[1])
  redis.call('HINCRBY', KEYS[3], 'dead', 1)
  return {2, ''}
end
local score = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3])
run_ns = string.format('%.0f', score) .. '000'
redis.call('HSET', KEYS[1], ARGV[1], 'p:' .. attempt .. ':0:' .. run_ns)
redis.call('ZADD', KEYS[2], score, ARGV[1])
redis.call('HINCRBY', KEYS[3], 'pending', 1)
local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if tonumber(head[2]) >= score then
  redis.call(ARGV[6], ARGV[5], string.format('%.0f', score))
end
return {1, run_ns}
