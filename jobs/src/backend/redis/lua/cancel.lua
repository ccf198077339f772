-- cancel.lua: remove a pending job (and its successor), or the successor of a running one.
--
-- Mirrors core/state `Machine::cancel` (pending jobs only) (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- KEYS[5] series (see series.lua), KEYS[6] errors (see claim.lua), KEYS[7] levels (see
-- kinds.lua, prepended: the job is in its own level's due set), KEYS[8] next,
-- KEYS[9] next_payload (see next.lua, prepended), KEYS[10] gate_timers (see gates.lua,
-- prepended: a gated job leaves its gate, which rebalances and may admit the next)
-- ARGV[1] id, ARGV[2] wake channel, ARGV[3] 'PUBLISH' | 'SPUBLISH' (see schedule.lua)
--
-- Returns 1 if the job was pending and is gone (with its successor, if one waited after a
-- retry), or if it is running and its successor is gone (the job runs on), else 0.
-- O(log n): the due index holds ids, not payloads. Atomic: a claim cannot take the job
-- between the state check and the removal, nor an ack hand it over to its successor.
-- The pending occurrence of a recurring series is not cancelled (0): the series would have
-- none; cancel_recurring removes both (series.lua, prepended, tells it).
local N = {counts = KEYS[4], next = KEYS[8], next_payload = KEYS[9]}
local state, _, _, run_ns, tail = job_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if state == 'r' then
  if next_drop(N, ARGV[1]) then return 1 end
  return 0
end
if state ~= 'p' then return 0 end
if series_is_head({series = KEYS[5]}, ARGV[1]) then return 0 end
local p, kind = job_level(tail)
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local G = nil
if job_gate(tail) then
  G = gate_ctx(KEYS[10], KEYS[3], KEYS[7], nil, ARGV[2], ARGV[3])
  gate_leave(G, ARGV[1], run_ns, tail)
else
  redis.call('ZREM', due_key(KEYS[3], p, kind), ARGV[1])
end
redis.call('HDEL', KEYS[6], ARGV[1])
next_drop(N, ARGV[1])
local counted = {}
tally(counted, 'pending', kind, -1)
tally_flush(KEYS[4], counted)
level_tidy(KEYS[7], KEYS[3], p, kind)
if G then gate_flush(G) end
return 1
