-- cancel.lua: remove a pending job (and its successor), or the successor of a running one.
--
-- Mirrors core/state `Machine::cancel` (pending jobs only) (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- KEYS[5] series (see series.lua), KEYS[6] errors (see claim.lua), KEYS[7] levels (see
-- kinds.lua, prepended: the job is in its own level's due set), KEYS[8] next,
-- KEYS[9] next_payload (see next.lua, prepended)
-- ARGV[1] id
--
-- Returns 1 if the job was pending and is gone (with its successor, if one waited after a
-- retry), or if it is running and its successor is gone (the job runs on), else 0.
-- O(log n): the due index holds ids, not payloads. Atomic: a claim cannot take the job
-- between the state check and the removal, nor an ack hand it over to its successor.
-- The pending occurrence of a recurring series is not cancelled (0): the series would have
-- none; cancel_recurring removes both (series.lua, prepended, tells it).
local N = {counts = KEYS[4], next = KEYS[8], next_payload = KEYS[9]}
local state, _, _, _, tail = job_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if state == 'r' then
  if next_drop(N, ARGV[1]) then return 1 end
  return 0
end
if state ~= 'p' then return 0 end
if series_is_head({series = KEYS[5]}, ARGV[1]) then return 0 end
local p, kind = job_level(tail)
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', due_key(KEYS[3], p, kind), ARGV[1])
redis.call('HDEL', KEYS[6], ARGV[1])
next_drop(N, ARGV[1])
local counted = {}
tally(counted, 'pending', kind, -1)
tally_flush(KEYS[4], counted)
level_tidy(KEYS[7], KEYS[3], p, kind)
return 1
