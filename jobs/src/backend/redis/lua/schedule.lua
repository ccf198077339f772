-- schedule.lua: create jobs unless their id exists (idempotent), or replace a pending one
-- (`Dedup::Replace`), or store one as the successor of a running one
-- (`Dedup::AllowWhileRunning`, next.lua), unless their id is held off (held.lua); due at a
-- time or after a delay.
--
-- KEYS[1] meta    hash  id -> "state:attempt:token:run_at_ns" then the job's spec (state
--                       p|r|d: pending, running, dead; kinds.lua, prepended, has the layout)
-- KEYS[2] payload hash  id -> payload bytes
-- KEYS[3] due     zset  pending ids of the plain level scored by run_at in microseconds;
--                       each other (priority, kind) has its own (kinds.lua). A running job
--                       is in claim.lua's running set instead, scored by its lease end
-- KEYS[4] counts  hash  pending | running | dead, and per kind (kinds.lua)
-- KEYS[5] levels  zset  the levels in use (kinds.lua)
-- KEYS[6] held, KEYS[7] held_until: the hold-off tombstones (held.lua, prepended)
-- KEYS[8] series  (series.lua, prepended: a series' pending occurrence is never replaced,
--                 nor a running one followed)
-- KEYS[9] next, KEYS[10] next_payload: the successors (next.lua, prepended)
-- KEYS[11] gate_timers (gates.lua, prepended: a gated job enters its gate waiting, the
--          gate takes its limits, and rebalances once at the end, publishing what it admits)
-- ARGV[1] wake channel (sent the new head's score when a job becomes the first due)
-- ARGV[2] 'PUBLISH', or 'SPUBLISH' on a cluster (the channel shares the keys' hash tag)
-- ARGV[3..] groups of 7: id, mode ("at" | "after"), ns (at: run_at in ns, exact) or
--           us (after: delay in microseconds), score (at: ceil(ns / 1000)), payload, the
--           job's spec tail (kinds.lua), or "" for the same as the job before's (a batch's
--           jobs mostly share one: it is sent once), 'r' to replace a pending job (Replace),
--           'w' to store a successor of a running job (AllowWhileRunning) or 'k' to keep any
--           (Keep, HoldOff)
--
-- Returns one {outcome, ns} per job, in order: {1 (created), run_at_ns}, {0 (exists),
-- its run_at_ns}, {2 (replaced), the new run_at_ns}, {3 (held off), until_ns},
-- {4 (successor stored), its run_at_ns}. A running job gets a successor unless it has one
-- already or is a series' occurrence (its id name@... of a series that exists); the
-- successor keeps its run_at, payload and spec as resolved here. A replace of a job pending
-- again after a retry drops its successor, if one waits (next.lua keeps `successors` in
-- step): the newest schedule wins.
-- Mirrors the embedded store's `schedule` (store/jobs.rs): a tombstone whose until is at
-- or before now is deleted and the schedule proceeds; a replaced job keeps its attempts and
-- last error and takes the new run_at, payload and whole spec, moving between due sets,
-- levels and per-kind counters.
-- Atomic because a script runs alone: the tombstone and existence checks and the writes
-- cannot interleave with another client's schedule or ack of the same id, and all jobs land
-- or none. The delay is added to the server's TIME, never a client's clock. One HMGET reads
-- every id's state and one its tombstone, then one HSET, HSET, ZADD per level and HINCRBY
-- per counter write the created jobs (at most 512, so the unpacked argument lists stay
-- small); a replace, rare, first writes the jobs created before it, then its own. Each job
-- meets what the jobs before it in the batch left, as calls in a row would: an id twice is
-- created once, or created then replaced.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ns = now_ns_text(now)
local H = {held = KEYS[6], held_until = KEYS[7]}
local S = {series = KEYS[8]}
local N = {counts = KEYS[4], next = KEYS[9], next_payload = KEYS[10]}
local G = gate_ctx(KEYS[11], KEYS[3], KEYS[5], now, ARGV[1], ARGV[2])
local ids = {}
for i = 3, #ARGV, 7 do ids[#ids + 1] = ARGV[i] end
local metas = redis.call('HMGET', KEYS[1], unpack(ids))
local helds = redis.call('HMGET', KEYS[6], unpack(ids))
local out = {}
-- The batch's view of each id it met: its meta (false: none), its tombstone (false: none).
local cur = {}
local cur_held = {}
-- Whether the id has a successor, once met (nil: not looked up yet).
local cur_next = {}
-- Created jobs not written yet (flush).
local meta_writes = {}
local payloads = {}
local scores = {}
local earliest = {}
local counted = {}
local any = false
local function flush()
  if #meta_writes == 0 then return end
  redis.call('HSET', KEYS[1], unpack(meta_writes))
  redis.call('HSET', KEYS[2], unpack(payloads))
  g_run(scores, 'ZADD')
  meta_writes, payloads, scores = {}, {}, {}
end
local function note_due(key, score)
  if not earliest[key] or score < earliest[key] then earliest[key] = score end
  any = true
end
local tail = ''
for j, id in ipairs(ids) do
  local i = 3 + (j - 1) * 7
  if ARGV[i + 5] ~= '' then tail = ARGV[i + 5] end
  local held_ns = cur_held[id]
  if held_ns == nil then held_ns = helds[j] or false end
  if held_ns and not ns_less(now_ns, held_ns) then
    held_drop(H, id)
    held_ns = false
  end
  cur_held[id] = held_ns
  local m = cur[id]
  if m == nil then m = metas[j] or false end
  local state, attempt, _, old_ns, old_tail = job_parse(m)
  local follow = false
  if state == 'r' and ARGV[i + 6] == 'w' and not held_ns then
    -- A series' occurrence is sent as 'k' (the client knows an occurrence's id by its shape).
    if cur_next[id] == nil then
      cur_next[id] = redis.call('HEXISTS', N.next, id) == 1
    end
    follow = not cur_next[id]
  end
  if held_ns then
    out[j] = {3, held_ns}
  elseif follow then
    local run_ns
    if ARGV[i + 1] == 'after' then
      run_ns = string.format('%.0f', now + tonumber(ARGV[i + 2])) .. '000'
    else
      run_ns = ARGV[i + 2]
    end
    next_put(N, id, run_ns, tail, ARGV[i + 4])
    cur_next[id] = true
    out[j] = {4, run_ns}
  elseif state and not (ARGV[i + 6] == 'r' and state == 'p' and not series_is_head(S, id)) then
    out[j] = {0, old_ns}
  else
    local score, run_ns
    if ARGV[i + 1] == 'after' then
      score = now + tonumber(ARGV[i + 2])
      run_ns = string.format('%.0f', score) .. '000'
    else
      run_ns = ARGV[i + 2]
      score = tonumber(ARGV[i + 3])
    end
    local p, kind = job_level(tail)
    local key = due_key(KEYS[3], p, kind)
    local gated = job_gate(tail)
    if not state then
      local meta = 'p:0:0:' .. run_ns .. tail
      cur[id] = meta
      meta_writes[#meta_writes + 1] = id
      meta_writes[#meta_writes + 1] = meta
      payloads[#payloads + 1] = id
      payloads[#payloads + 1] = ARGV[i + 4]
      if gated then
        -- Into its gate, waiting: the rebalance at the end admits it or not (gates.lua).
        gate_enter(G, id, run_ns, tail, true)
      else
        if not scores[key] then level_note(KEYS[5], p, kind) end
        g_push(scores, key, score, id)
      end
      tally(counted, 'pending', kind, 1)
      out[j] = {1, run_ns}
    else
      -- Replace a pending job: written now, after the jobs created before it (it may be one
      -- of them): its old level's tidy below must see them in their due sets, or it would
      -- forget a level a created job is about to be written to.
      flush()
      local old_p, old_kind = job_level(old_tail)
      local meta = 'p:' .. attempt .. ':0:' .. run_ns .. tail
      cur[id] = meta
      redis.call('HSET', KEYS[1], id, meta)
      redis.call('HSET', KEYS[2], id, ARGV[i + 4])
      -- Out of its old gate (if gated), into its new one (gates.lua).
      if job_gate(old_tail) then
        gate_leave(G, id, old_ns, old_tail)
      else
        redis.call('ZREM', due_key(KEYS[3], old_p, old_kind), id)
      end
      if gated then
        gate_enter(G, id, run_ns, tail, true)
      else
        redis.call('ZADD', key, score, id)
        level_note(KEYS[5], p, kind)
      end
      level_tidy(KEYS[5], KEYS[3], old_p, old_kind)
      tally(counted, 'pending', old_kind, -1)
      tally(counted, 'pending', kind, 1)
      -- A pending job has a successor only after a retry: the newest schedule wins, so it
      -- is dropped (nothing older runs after these values). Replaces are rare; the flag
      -- spares the HDELs when no successor waits in the partition.
      if cur_next[id] ~= false and next_any(N) then next_drop(N, id) end
      cur_next[id] = false
      out[j] = {2, run_ns}
    end
    if not gated then note_due(key, score) end
  end
end
flush()
tally_flush(KEYS[4], counted)
gate_flush(G)
if any then
  local first = nil
  for key, score in pairs(earliest) do
    if is_head(key, score) and (not first or score < first) then first = score end
  end
  if first then redis.call(ARGV[2], ARGV[1], string.format('%.0f', first)) end
end
return out
