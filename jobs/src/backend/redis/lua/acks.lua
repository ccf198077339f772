-- acks.lua: `apply_acks`, prepended to ack.lua and claim.lua (which applies the acks a
-- consumer folded into its claim first), so the two cannot drift. kinds.lua, gates.lua,
-- held.lua and next.lua are prepended before it. A done gated job gives its gate's slot
-- back (gates.lua, N.G its context), and its gate rebalances before the script goes on.
--
-- Mirrors core/state `Machine::ack` (a lease is checked by its token only) (checked on the same cases by backend/redis/agreement.rs).
--
-- apply_acks(meta, payload, counts, errors, running, levels, H, args, from, N): args[from],
-- args[from + 1], ... are pairs id, lease token (at most 512 pairs). kinds.lua, prepended
-- first, names each job's running set and counters by its kind. Deletes each job whose lease is
-- held with its token; returns one 1|0 per pair: 1 if the lease was held (the job is
-- gone), 0 if the token is stale (redelivered to someone else, or gone, or acked earlier
-- in this batch): then nothing changes for that job. Atomic with claim, so a late ack can
-- never delete a job another consumer now holds (the duplicate-run bug of bullmq#3183).
-- One HMGET reads every job, then one HDEL, HDEL, HDEL and ZREM (per kind) delete the done
-- ones together, and the counters are written once (kinds.lua `tally_flush`). A done job
-- whose spec holds a hold-off leaves its tombstone (held.lua, H its keys), until = the
-- server's time now + its hold-off: in the same script as the ack, so an ack is never seen
-- without its tombstone nor one without its ack. A done job with a successor (next.lua, N
-- its keys) is followed by it in the same script: the successor becomes the pending job,
-- due at its run_at or, if the done job had a hold-off, not before the hold-off ends, and
-- no tombstone is left; the earliest such job that became its level's first due is
-- published on N.wake, as a schedule does. Whether
-- any successor waits is one HEXISTS per batch (next.lua); the acked ids are looked up only if so.
--
-- `later`, if given (claim.lua), takes two chores the caller then does once for the whole
-- script: later.counted gets the counter deltas (kinds.lua `tally`, flushed by the caller
-- with its own: one HMGET and one HSET for the script rather than an HINCRBY per field
-- here and another there), and later.tidy[kind] = true names each kind whose running set
-- may have lost its last job (the caller's running_tidy, after its own leases: a kind it
-- leases again keeps its set, and the set is not deleted and made again in one script).
-- Without it (ack.lua), apply_acks does both itself.
local function apply_acks(meta, payload, counts, errors, running, levels, H, args, from, N, later)
  local ids = {}
  local tokens = {}
  for i = from, #args, 2 do
    ids[#ids + 1] = args[i]
    tokens[#tokens + 1] = args[i + 1]
  end
  local out = {}
  if #ids == 0 then return out end
  local metas = redis.call('HMGET', meta, unpack(ids))
  local done = {}
  local seen = {}
  -- Per kind met but "": its running set's acks (most batches have none).
  local by_kind = {}
  local kinds = {}
  local plain = {}
  -- id -> hold-off of the done jobs with one.
  local hold_of = {}
  local held = false
  for i, id in ipairs(ids) do
    local ok = 0
    local m = metas[i]
    if m and not seen[id] then
      local state, token = string.match(m, '^(%a):%d+:(%d+):')
      -- The kind: "" for a meta ending in the kind's separator or without a spec (kinds.lua),
      -- else what follows the separator.
      local kind = ''
      if string.byte(m, -1) ~= 31 then
        local sep = string.find(m, '\31', 1, true)
        if sep then kind = string.sub(m, sep + 1) end
      end
      if state == 'r' and token == tokens[i] then
        seen[id] = true
        done[#done + 1] = id
        if kind == '' then
          plain[#plain + 1] = id
        else
          local list = by_kind[kind]
          if not list then
            list = {}
            by_kind[kind] = list
            kinds[#kinds + 1] = kind
          end
          list[#list + 1] = id
        end
        local tail = string.match(m, '^%a:%d+:%d+:%d+(.*)$')
        local hold = job_hold(tail)
        -- A gated job (gates.lua) gives its gate's slot back.
        if string.find(tail, '\30', 1, true) then
          local gid = job_gate(tail)
          if gid then gate_stop(N.G, gid) end
        end
        if hold and hold ~= '0' then
          hold_of[id] = hold
          held = true
        end
        ok = 1
      end
    end
    out[i] = ok
  end
  if #done > 0 then
    -- The successors of the done jobs, if any waits in the partition (next.lua).
    local succs = nil
    if next_any(N) then succs = redis.call('HMGET', N.next, unpack(done)) end
    redis.call('HDEL', meta, unpack(done))
    redis.call('HDEL', payload, unpack(done))
    redis.call('HDEL', errors, unpack(done))
    local counted = (later and later.counted) or {}
    counted.running = (counted.running or 0) - #plain
    if #plain > 0 then redis.call('ZREM', running, unpack(plain)) end
    for _, kind in ipairs(kinds) do
      local list = by_kind[kind]
      redis.call('ZREM', running_key(running, kind), unpack(list))
      tally(counted, 'running', kind, -#list)
      if later then later.tidy[kind] = true else running_tidy(levels, running, kind) end
    end
    -- Only a batch with a hold-off or a successor in it walks its done jobs again.
    local now = nil
    if held or succs then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    local due = {}
    for i, id in ipairs(now and done or {}) do
      local succ = succs and succs[i]
      local hold = hold_of[id]
      if succ then
        local not_before = nil
        if hold then not_before = held_until_ns(now, hold) end
        local key, score = next_handover(N, id, succ, not_before, counted)
        if key and (not due[key] or score < due[key]) then due[key] = score end
      elseif hold then
        held_put(H, id, now, hold)
      end
    end
    if not later then tally_flush(counts, counted) end
    if succs then next_wake(N, due) end
    -- The gates of the done jobs (and of gated successors) rebalance: the next of each key
    -- may go, and wakes idle consumers.
    gate_flush(N.G)
  end
  return out
end
