-- get.lua: one job's state and payload, read together, and its successor's run_at.
--
-- KEYS[1] meta, KEYS[2] payload (see schedule.lua), KEYS[3] errors (see claim.lua),
-- KEYS[4] next (see next.lua)
-- ARGV[1] id
--
-- Returns {meta, payload, last error or false, the successor's next value (its run_at_ns
-- then its spec tail) or false}, or false if there is no such job. A script so that the
-- reads see the same moment (an ack between them would pair a state with no payload, or a
-- successor with the job it became).
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return false end
return {meta, redis.call('HGET', KEYS[2], ARGV[1]), redis.call('HGET', KEYS[3], ARGV[1]),
        redis.call('HGET', KEYS[4], ARGV[1])}
