-- remove_dead.lua: delete dead jobs, one by id or up to a limit.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] dead, KEYS[4] counts (see schedule.lua, claim.lua)
-- KEYS[5] errors (see claim.lua), KEYS[6] levels (kinds.lua, prepended, names the kind's
-- dead set and counters)
-- ARGV[1] "id" then ARGV[2] the id, or "limit" then ARGV[2] how many at most
--
-- Returns how many jobs were deleted, oldest deaths first. The purge reads a bounded range
-- of each kind's dead set (merged: kinds.lua).
-- Atomic: a job is deleted only while it is dead.
local ids = {}
if ARGV[1] == 'id' then
  ids = {ARGV[2]}
else
  -- The oldest deaths of every kind: the kinds' dead sets merged (kinds.lua).
  local keys = {KEYS[3]}
  for _, kind in ipairs(dead_kinds(KEYS[6])) do keys[#keys + 1] = dead_key(KEYS[3], kind) end
  local function read(key, off, count)
    return redis.call('ZRANGE', key, off, off + count - 1, 'WITHSCORES')
  end
  local merged, got = merge(keys, tonumber(ARGV[2]), read)
  for i = 1, got do ids[#ids + 1] = merged[2 * i - 1] end
end
local removed = 0
local counted = {}
local kinds = {}
for _, id in ipairs(ids) do
  local state, _, _, _, tail = job_parse(redis.call('HGET', KEYS[1], id))
  if state == 'd' then
    local _, kind = job_level(tail)
    redis.call('HDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', dead_key(KEYS[3], kind), id)
    kinds[kind] = true
    redis.call('HDEL', KEYS[5], id)
    tally(counted, 'dead', kind, -1)
    removed = removed + 1
  end
end
tally_flush(KEYS[4], counted)
for kind in pairs(kinds) do dead_tidy(KEYS[6], KEYS[3], kind) end
return removed
