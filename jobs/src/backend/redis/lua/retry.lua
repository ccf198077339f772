-- retry.lua: give a running job back to run again after a delay, or kill it if that was its
-- last attempt.
--
-- Mirrors core/state `Machine::retry` (stale token: nothing; last attempt: dead; else pending
-- again) (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta, KEYS[2] due, KEYS[3] counts, KEYS[4] dead, KEYS[5] errors, KEYS[6] running
-- (see schedule.lua, claim.lua), KEYS[7] levels (see kinds.lua, prepended), KEYS[8] payload,
-- KEYS[9] next, KEYS[10] next_payload (see next.lua, prepended after held.lua: a job that
-- dies with a successor is followed by it, which keeps the job's last error; with attempts
-- left the successor waits on), KEYS[11] gate_timers (see gates.lua, prepended: a gated
-- job gives its key's slot back, and one pending again waits in its gate)
-- ARGV[1] id, ARGV[2] token, ARGV[3] delay in microseconds, ARGV[4] the queue's max
-- attempts (for a job stored without its spec; any other dies at its own),
-- ARGV[5] wake channel, ARGV[6] 'PUBLISH' | 'SPUBLISH' (see schedule.lua), ARGV[7] (a
-- failure only) the job's new last error, at most 4 KiB; without it the last error stays
--
-- Returns {0, ""} for a stale token, {1, run_at_ns} when pending again, {2, ""} when dead
-- (also when its successor took over: the job died, no dead job is kept).
-- Atomic with claim and ack (token checked and state changed in one step). The job moves
-- from its kind's running set to its level's due set (pending) or its kind's dead set.
local state, attempt, token, run_ns, tail = job_parse(redis.call('HGET', KEYS[1], ARGV[1]))
if state ~= 'r' or token ~= ARGV[2] then return {0, ''} end
local p, kind = job_level(tail)
local _, _, max_attempts = job_spec(tail, ':0:' .. ARGV[4] .. ':0:0:0\31')
if ARGV[7] then redis.call('HSET', KEYS[5], ARGV[1], ARGV[7]) end
local counted = {}
tally(counted, 'running', kind, -1)
redis.call('ZREM', running_key(KEYS[6], kind), ARGV[1])
running_tidy(KEYS[7], KEYS[6], kind)
local t = redis.call('TIME')
local G = gate_ctx(KEYS[11], KEYS[2], KEYS[7], tonumber(t[1]) * 1000000 + tonumber(t[2]),
                   ARGV[5], ARGV[6])
-- A gated job gives its key's slot back, whatever follows.
local gid = job_gate(tail)
if gid then gate_stop(G, gid) end
if tonumber(attempt) >= max_attempts then
  local succ = redis.call('HGET', KEYS[9], ARGV[1])
  if succ then
    local N = {meta = KEYS[1], payload = KEYS[8], due = KEYS[2], levels = KEYS[7], counts = KEYS[3],
               next = KEYS[9], next_payload = KEYS[10], wake = ARGV[5], publish = ARGV[6], G = G}
    local key, score = next_handover(N, ARGV[1], succ, nil, counted)
    tally_flush(KEYS[3], counted)
    if key then next_wake(N, {[key] = score}) end
    gate_flush(G)
    return {2, ''}
  end
  redis.call('HSET', KEYS[1], ARGV[1], 'd:' .. attempt .. ':0:' .. run_ns .. tail)
  redis.call('ZADD', dead_key(KEYS[4], kind), tonumber(t[1]) * 1000000 + tonumber(t[2]), ARGV[1])
  dead_note(KEYS[7], kind)
  tally(counted, 'dead', kind, 1)
  tally_flush(KEYS[3], counted)
  gate_flush(G)
  return {2, ''}
end
local score = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[3])
run_ns = string.format('%.0f', score) .. '000'
redis.call('HSET', KEYS[1], ARGV[1], 'p:' .. attempt .. ':0:' .. run_ns .. tail)
tally(counted, 'pending', kind, 1)
tally_flush(KEYS[3], counted)
if gid then
  -- Back into its gate, waiting, the gate's limits kept; the rebalance admits it or not.
  gate_enter(G, ARGV[1], run_ns, tail, false)
  gate_flush(G)
  return {1, run_ns}
end
local due = due_key(KEYS[2], p, kind)
redis.call('ZADD', due, score, ARGV[1])
level_note(KEYS[7], p, kind)
if is_head(due, score) then
  redis.call(ARGV[6], ARGV[5], string.format('%.0f', score))
end
return {1, run_ns}
