-- revive.lua: make dead jobs pending again (attempts from 0, last error kept), one by id or
-- up to a limit, oldest deaths first.
--
-- Mirrors core/state `Machine::revive` (dead jobs only, attempts from 0) (checked on the same cases by backend/redis/agreement.rs).
--
-- KEYS[1] meta, KEYS[2] due, KEYS[3] counts, KEYS[4] dead (see schedule.lua, claim.lua),
-- KEYS[5] levels (see kinds.lua, prepended: each job goes back to its own level, its spec
-- kept, and leaves its kind's dead set), KEYS[6] gate_timers (see gates.lua, prepended: a
-- gated job enters its gate, waiting, and the gate takes its limits)
-- ARGV[1] "id" then ARGV[2] the id, or "limit" then ARGV[2] how many at most (at most 512)
-- ARGV[3] mode ("at" | "after"), ARGV[4] ns | us, ARGV[5] score (see schedule.lua),
-- ARGV[6] wake channel, ARGV[7] 'PUBLISH' | 'SPUBLISH' (see schedule.lua)
--
-- Returns {revived, run_at_ns ("" if none)}. Atomic: a job is revived only while it is dead,
-- and all of a call's jobs get one due time, so the wake message (sent when they become the
-- first due) is one too.
local ids = {}
if ARGV[1] == 'id' then
  ids = {ARGV[2]}
else
  -- The oldest deaths of every kind: the kinds' dead sets merged (kinds.lua).
  local keys = {KEYS[4]}
  for _, kind in ipairs(dead_kinds(KEYS[5])) do keys[#keys + 1] = dead_key(KEYS[4], kind) end
  local function read(key, off, count)
    return redis.call('ZRANGE', key, off, off + count - 1, 'WITHSCORES')
  end
  local merged, got = merge(keys, tonumber(ARGV[2]), read)
  for i = 1, got do ids[#ids + 1] = merged[2 * i - 1] end
end
if #ids == 0 then return {0, ''} end
local run_ns, score
if ARGV[3] == 'after' then
  local t = redis.call('TIME')
  score = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[4])
  run_ns = string.format('%.0f', score) .. '000'
else
  run_ns = ARGV[4]
  score = tonumber(ARGV[5])
end
local metas = redis.call('HMGET', KEYS[1], unpack(ids))
local meta_writes, scores, revived, counted, gone, gated = {}, {}, {}, {}, {}, {}
for i, id in ipairs(ids) do
  local state, _, _, _, tail = job_parse(metas[i])
  if state == 'd' then
    local p, kind = job_level(tail)
    local due = due_key(KEYS[2], p, kind)
    meta_writes[#meta_writes + 1] = id
    meta_writes[#meta_writes + 1] = 'p:0:0:' .. run_ns .. tail
    if job_gate(tail) then
      gated[#gated + 1] = {id, tail}
    else
      if not scores[due] then level_note(KEYS[5], p, kind) end
      g_push(scores, due, score, id)
    end
    revived[#revived + 1] = id
    g_push(gone, dead_key(KEYS[4], kind), id)
    tally(counted, 'dead', kind, -1)
    tally(counted, 'pending', kind, 1)
  end
end
if #revived == 0 then return {0, ''} end
redis.call('HSET', KEYS[1], unpack(meta_writes))
g_run(gone, 'ZREM')
for key in pairs(gone) do
  if key ~= KEYS[4] then dead_tidy(KEYS[5], KEYS[4], string.sub(key, #KEYS[4] + 2)) end
end
g_run(scores, 'ZADD')
tally_flush(KEYS[3], counted)
local wake = false
for due in pairs(scores) do wake = wake or is_head(due, score) end
if wake then
  redis.call(ARGV[7], ARGV[6], string.format('%.0f', score))
end
if #gated > 0 then
  -- Gated jobs enter their gates, which take their limits (gates.lua).
  local G = gate_ctx(KEYS[6], KEYS[2], KEYS[5], nil, ARGV[6], ARGV[7])
  for _, job in ipairs(gated) do gate_enter(G, job[1], run_ns, job[2], true) end
  gate_flush(G)
end
return {#revived, run_ns}
