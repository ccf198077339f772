-- ack.lua: a leased job is done: delete it.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- ARGV[1] id, ARGV[2] lease token
--
-- Returns 1 if the lease was held (the job is gone), 0 if the token is stale (redelivered
-- to someone else, or gone): then nothing changes. Atomic with claim, so a late ack can
-- never delete a job another consumer now holds (the duplicate-run bug of bullmq#3183).
local meta = redis.call('HGET', KEYS[1], ARGV[1])
if not meta then return 0 end
local state, token = string.match(meta, '^(%a):%d+:(%d+):')
if state ~= 'l' or token ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'leased', -1)
return 1
