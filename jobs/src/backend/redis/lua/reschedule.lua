-- reschedule.lua: move a pending job to a new due time.
--
-- Mirrors core/state `Machine::reschedule` (pending jobs only).
--
-- KEYS[1] meta, KEYS[2] due (see schedule.lua: the job is in its own level's, kinds.lua,
-- prepended), KEYS[3] series (see series.lua, prepended), KEYS[4] gate_timers (see
-- gates.lua, prepended), KEYS[5] levels (see kinds.lua)
-- ARGV[1] id, ARGV[2] mode ("at" | "after"), ARGV[3] ns | us, ARGV[4] score, ARGV[5] wake channel,
-- ARGV[6] 'PUBLISH' | 'SPUBLISH' (see schedule.lua)
--
-- Returns the new run_at in ns (a string), or false if the job is not pending or is the
-- pending occurrence of a recurring series (its time is its id and the series' schedule).
-- Atomic, so a claim never sees the old due time after the move (the late-promotion bug of
-- bullmq#2648).
local state, attempt, _, old_ns, tail = job_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if state ~= 'p' then return false end
if series_is_head({series = KEYS[3]}, ARGV[1]) then return false end
local due = due_key(KEYS[2], job_level(tail))
local run_ns, score
if ARGV[2] == 'after' then
  local t = redis.call('TIME')
  score = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3])
  run_ns = string.format('%.0f', score) .. '000'
else
  run_ns = ARGV[3]
  score = tonumber(ARGV[4])
end
redis.call('HSET', KEYS[1], ARGV[1], 'p:' .. attempt .. ':0:' .. run_ns .. tail)
if job_gate(tail) then
  -- Out of its gate at its old place, in at its new one (its gate's limits kept): the
  -- rebalance admits it or not, and publishes what it admits.
  local G = gate_ctx(KEYS[4], KEYS[2], KEYS[5], nil, ARGV[5], ARGV[6])
  gate_leave(G, ARGV[1], old_ns, tail)
  gate_enter(G, ARGV[1], run_ns, tail, false)
  gate_flush(G)
  return run_ns
end
redis.call('ZADD', due, score, ARGV[1])
if is_head(due, score) then
  redis.call(ARGV[6], ARGV[5], string.format('%.0f', score))
end
return run_ns
