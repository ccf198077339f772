-- layout.lua: the queue's partition count, recorded by the first process that opens it.
--
-- KEYS[1] the queue's layout hash (`{name}:layout`, keys.rs)
-- ARGV[1] the partition count this process opens the queue with
--
-- Returns the recorded count (ARGV[1] if none was recorded yet). Atomic: of processes
-- opening a new queue at once, one records its count and the others read it.
local n = redis.call('HGET', KEYS[1], 'partitions')
if n then return tonumber(n) end
redis.call('HSET', KEYS[1], 'partitions', ARGV[1])
return tonumber(ARGV[1])
