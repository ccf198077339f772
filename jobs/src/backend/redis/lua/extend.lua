-- extend.lua: move a held lease's end to now + a delay.
--
-- Mirrors core/state `Machine::extend` (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta (see schedule.lua), KEYS[2] running (see claim.lua)
-- ARGV[1] id, ARGV[2] token, ARGV[3] delay in microseconds
--
-- Returns 1 if the lease was held, else 0. Atomic with claim: a lease that expired but was
-- not yet reclaimed can still be extended; once reclaimed, the token is stale.
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return 0 end
local state, token = string.match(meta, '^(%a):%d+:(%d+):')
if state ~= 'r' or token ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local lease_end = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], lease_end, ARGV[1])
return 1
