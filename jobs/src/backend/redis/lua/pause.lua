-- pause.lua: stop (or let again) every claim of one partition; a queue is paused by this
-- script on each of its partitions.
--
-- KEYS[1] counts (see schedule.lua): its field `paused` is the flag, which claim.lua reads
-- first (not a field of `meta`, where a job id could be "paused")
-- ARGV[1] "1" to pause, "0" to resume, ARGV[2] wake channel, ARGV[3] 'PUBLISH' | 'SPUBLISH'
-- (see schedule.lua)
--
-- Returns 1 if the flag changed, else 0. A resume publishes "0" (maybe anything is due) so
-- that idle consumers in every process look again at once; a pause needs no message (a
-- consumer's next claim sees it). Atomic with claim: once this returns, no claim of this
-- partition leases anything until a resume.
if ARGV[1] == '1' then
  return redis.call('HSET', KEYS[1], 'paused', 1)
end
local changed = redis.call('HDEL', KEYS[1], 'paused')
redis.call(ARGV[3], ARGV[2], '0')
return changed
