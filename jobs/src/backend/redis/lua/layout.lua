-- layout.lua: the queue's partition count and keyspace format, recorded by the first
-- process that opens it; an older format this version reads as it is is upgraded in place.
--
-- KEYS[1] the queue's layout hash (`{name}:layout`, keys.rs)
-- ARGV[1] the partition count this process opens the queue with
-- ARGV[2] the keyspace format this process reads and writes (keys.rs `FORMAT`)
-- ARGV[3] the one older format this process reads as it is (keys.rs `UPGRADES`), or ""
--
-- Returns {recorded count, recorded format}: ARGV[1] and ARGV[2] if none was recorded yet,
-- or if ARGV[3] was recorded with ARGV[1] partitions (then ARGV[2] is recorded instead: a one-way upgrade, which
-- processes of the older version refuse at their next open); a format of 0 for a queue
-- recorded before formats were (its keys may be laid out otherwise). Atomic: of processes
-- opening a new queue at once, one records its count and format and the others read them.
local n, format = unpack(redis.call('HMGET', KEYS[1], 'partitions', 'format'))
if n then
  if format and format == ARGV[3] and n == ARGV[1] then
    redis.call('HSET', KEYS[1], 'format', ARGV[2])
    format = ARGV[2]
  end
  return {tonumber(n), tonumber(format) or 0}
end
redis.call('HSET', KEYS[1], 'partitions', ARGV[1], 'format', ARGV[2])
return {tonumber(ARGV[1]), tonumber(ARGV[2])}
