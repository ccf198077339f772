-- schedule.lua: create jobs unless their id exists (idempotent), due at a time or after a delay.
--
-- KEYS[1] meta    hash  id -> "state:attempt:token:run_at_ns" then the job's spec (state
--                       p|r|d: pending, running, dead; kinds.lua, prepended, has the layout)
-- KEYS[2] payload hash  id -> payload bytes
-- KEYS[3] due     zset  pending ids of the plain level scored by run_at in microseconds;
--                       each other (priority, kind) has its own (kinds.lua). A running job
--                       is in claim.lua's running set instead, scored by its lease end
-- KEYS[4] counts  hash  pending | running | dead, and per kind (kinds.lua)
-- KEYS[5] levels  zset  the levels in use (kinds.lua)
-- ARGV[1] wake channel (sent the new head's score when a job becomes the first due)
-- ARGV[2] 'PUBLISH', or 'SPUBLISH' on a cluster (the channel shares the keys' hash tag)
-- ARGV[3..] groups of 6: id, mode ("at" | "after"), ns (at: run_at in ns, exact) or
--           us (after: delay in microseconds), score (at: ceil(ns / 1000)), payload, the
--           job's spec tail (kinds.lua), or "" for the same as the job before's (a batch's
--           jobs mostly share one: it is sent once)
--
-- Returns one {created (1|0), run_at_ns} per job, in order.
-- Atomic because a script runs alone: the existence check and the three writes cannot
-- interleave with another client's schedule of the same id, and all jobs land or none.
-- The delay is added to the server's TIME, never a client's clock. One HMGET reads every
-- id's state, then one HSET, HSET, ZADD per level and HINCRBY per counter write the whole
-- batch (at most 512 jobs, so the unpacked argument lists stay small); an id twice in one
-- batch is created once, as two calls in a row would.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ids = {}
for i = 3, #ARGV, 6 do ids[#ids + 1] = ARGV[i] end
local metas = redis.call('HMGET', KEYS[1], unpack(ids))
local out = {}
local created = {}
local meta_writes = {}
local payloads = {}
local scores = {}
local earliest = {}
local counted = {}
local any = false
local tail = ''
for j, id in ipairs(ids) do
  local i = 3 + (j - 1) * 6
  if ARGV[i + 5] ~= '' then tail = ARGV[i + 5] end
  local run_ns = created[id] or (metas[j] and string.match(metas[j], '^%a:%d+:%d+:(%d+)'))
  if run_ns then
    out[j] = {0, run_ns}
  else
    local score
    if ARGV[i + 1] == 'after' then
      score = now + tonumber(ARGV[i + 2])
      run_ns = string.format('%.0f', score) .. '000'
    else
      run_ns = ARGV[i + 2]
      score = tonumber(ARGV[i + 3])
    end
    local p, kind = job_level(tail)
    local key = due_key(KEYS[3], p, kind)
    created[id] = run_ns
    meta_writes[#meta_writes + 1] = id
    meta_writes[#meta_writes + 1] = 'p:0:0:' .. run_ns .. tail
    payloads[#payloads + 1] = id
    payloads[#payloads + 1] = ARGV[i + 4]
    if not scores[key] then level_note(KEYS[5], p, kind) end
    g_push(scores, key, score, id)
    if not earliest[key] or score < earliest[key] then earliest[key] = score end
    tally(counted, 'pending', kind, 1)
    any = true
    out[j] = {1, run_ns}
  end
end
if any then
  redis.call('HSET', KEYS[1], unpack(meta_writes))
  redis.call('HSET', KEYS[2], unpack(payloads))
  g_run(scores, 'ZADD')
  tally_flush(KEYS[4], counted)
  local first = nil
  for key, score in pairs(earliest) do
    if is_head(key, score) and (not first or score < first) then first = score end
  end
  if first then redis.call(ARGV[2], ARGV[1], string.format('%.0f', first)) end
end
return out
