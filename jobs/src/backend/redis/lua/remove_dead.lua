-- remove_dead.lua: delete dead jobs, one by id or up to a limit.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] dead, KEYS[4] counts (see schedule.lua, claim.lua)
-- KEYS[5] errors (see claim.lua); kinds.lua, prepended, names the kind's counters
-- ARGV[1] "id" then ARGV[2] the id, or "limit" then ARGV[2] how many at most
--
-- Returns how many jobs were deleted. The purge reads a bounded range of the dead set.
-- Atomic: a job is deleted only while it is dead.
local ids
if ARGV[1] == 'id' then
  ids = {ARGV[2]}
else
  ids = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[2]) - 1)
end
local removed = 0
local counted = {}
for _, id in ipairs(ids) do
  local state, _, _, _, tail = job_parse(redis.call('HGET', KEYS[1], id))
  if state == 'd' then
    local _, kind = job_level(tail)
    redis.call('HDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[5], id)
    tally(counted, 'dead', kind, -1)
    removed = removed + 1
  end
end
tally_flush(KEYS[4], counted)
return removed
