-- import.lua: write jobs exactly as a copy from another queue gives them (pending at their
-- run_at, or dead since their death time, with their attempts, last error and payload),
-- each unless its id exists or is held off (held.lua, prepended: tombstones are not copied,
-- but a job's hold-off, in its spec tail, is).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts, KEYS[5] dead, KEYS[6] errors
-- (see schedule.lua, claim.lua), KEYS[7] levels (see kinds.lua, prepended), KEYS[8] held,
-- KEYS[9] held_until (see held.lua), KEYS[10] gate_timers (see gates.lua, prepended: a
-- gated pending job enters its gate, waiting, and the gate takes its limits)
-- ARGV[1] wake channel, ARGV[2] 'PUBLISH' | 'SPUBLISH' (see schedule.lua)
-- ARGV[3..] groups of 9: id, 'p' (pending) | 'd' (dead), attempt, run_at_ns, score
--           (pending: ceil(run_at_ns / 1000), its due score; dead: its death time in
--           microseconds, its dead index score), '1' if a last error follows else '0', the
--           last error (at most 4 KiB), payload, the job's spec tail (kinds.lua)
--
-- Returns one 1 (written) | 0 (the id exists, or a tombstone holds it off at the server's
-- time now: left as it is) per job, in order. A tombstone whose until has passed is deleted
-- and the job written, as a schedule does.
-- Atomic because a script runs alone: as in schedule.lua, the existence check and the writes
-- cannot interleave with another client's schedule of the same id, and all jobs land or
-- none. The counters move by what was written; a pending job that becomes the first due
-- wakes idle consumers as a schedule does. At most 512 jobs; an id twice in one batch is
-- written once.
local t = redis.call('TIME')
local now_ns = now_ns_text(tonumber(t[1]) * 1000000 + tonumber(t[2]))
local H = {held = KEYS[8], held_until = KEYS[9]}
local G = gate_ctx(KEYS[10], KEYS[3], KEYS[7], nil, ARGV[1], ARGV[2])
-- Whether a tombstone holds `id` off now (deleting a stale one).
local function held_now(id)
  local until_ns = redis.call('HGET', H.held, id)
  if not until_ns then return false end
  if ns_less(now_ns, until_ns) then return true end
  held_drop(H, id)
  return false
end
local out = {}
local written = {}
local counted = {}
local earliest = {}
for i = 3, #ARGV, 9 do
  local id, state, attempt, run_ns, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if written[id] or redis.call('HEXISTS', KEYS[1], id) == 1 or held_now(id) then
    out[#out + 1] = 0
  else
    local tail = ARGV[i + 8]
    local p, kind = job_level(tail)
    written[id] = true
    redis.call('HSET', KEYS[1], id, state .. ':' .. attempt .. ':0:' .. run_ns .. tail)
    redis.call('HSET', KEYS[2], id, ARGV[i + 7])
    if ARGV[i + 5] == '1' then redis.call('HSET', KEYS[6], id, ARGV[i + 6]) end
    if state == 'd' then
      redis.call('ZADD', dead_key(KEYS[5], kind), score, id)
      dead_note(KEYS[7], kind)
      tally(counted, 'dead', kind, 1)
    elseif job_gate(tail) then
      -- A gated job enters its gate, waiting; the gate takes its limits (gates.lua).
      gate_enter(G, id, run_ns, tail, true)
      tally(counted, 'pending', kind, 1)
    else
      local due = due_key(KEYS[3], p, kind)
      redis.call('ZADD', due, score, id)
      level_note(KEYS[7], p, kind)
      tally(counted, 'pending', kind, 1)
      local s = tonumber(score)
      if not earliest[due] or s < earliest[due] then earliest[due] = s end
    end
    out[#out + 1] = 1
  end
end
tally_flush(KEYS[4], counted)
local first = nil
for due, s in pairs(earliest) do
  if is_head(due, s) and (not first or s < first) then first = s end
end
if first then redis.call(ARGV[2], ARGV[1], string.format('%.0f', first)) end
gate_flush(G)
return out
