-- extend.lua: move a held lease's end to now + a delay.
--
-- Mirrors core/state `Machine::extend` (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta (see schedule.lua), KEYS[2] running (see claim.lua: the job is in its
-- kind's, kinds.lua, prepended)
-- ARGV[1] id, ARGV[2] token, ARGV[3] delay in microseconds
--
-- Returns 1 if the lease was held, else 0. Atomic with claim: a lease that expired but was
-- not yet reclaimed can still be extended; once reclaimed, the token is stale.
local state, _, token, _, tail = job_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if state ~= 'r' or token ~= ARGV[2] then return 0 end
local _, kind = job_level(tail)
local t = redis.call('TIME')
local lease_end = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3])
redis.call('ZADD', running_key(KEYS[2], kind), lease_end, ARGV[1])
return 1
