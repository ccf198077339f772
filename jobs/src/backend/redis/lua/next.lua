-- next.lua: the successors of `Dedup::AllowWhileRunning`. Not a script of its own:
-- prepended (after kinds.lua, gates.lua and held.lua) to schedule.lua, ack.lua, claim.lua, retry.lua
-- and cancel.lua, which pass their keys in a table N (declared in their KEYS, under the
-- partition's tag; get.lua reads `next` itself):
--
--   next          hash  id -> the successor's run_at_ns (decimal text) then its spec tail
--                       (kinds.lua), as the schedule resolved them
--   next_payload  hash  id -> the successor's payload
--
-- and N.meta, N.payload, N.due, N.levels (see schedule.lua) where a successor becomes the
-- job, N.wake and N.publish (schedule.lua's ARGV[1], ARGV[2]) for its wake message, and
-- N.counts, whose field `successors` (no ':', so counts.lua reports no kind of it) counts
-- them, and is gone when none waits: the O(1) flag the acks read (`next_any`). A successor waits beside a running job of its id (or a pending one, after a retry)
-- and is no job: in no index, not counted, not listed; `get` shows its run_at. It becomes
-- the pending job of its id (`next_handover`) in the script that acks the job, or kills it
-- at its last attempt (retry.lua, claim.lua), so the id is never seen without a job while
-- its successor waits; `cancel` of a running job removes only it, of a pending job both.
-- A series' occurrence never gets one (schedule.lua), so a dead job never has one.
--
-- Cost for jobs without one: an ack batch reads the flag once (HEXISTS, not EXISTS: the
-- ACL of a queue's user allows the commands the scripts already sent, guide/redis.md), then
-- one HMGET of the acked ids only if some successor waits in the partition; a death (rare)
-- the flag and one HGET; a retry with attempts left nothing.

-- Whether any successor waits in the partition.
local function next_any(N)
  return redis.call('HEXISTS', N.counts, 'successors') == 1
end

-- Stores the successor of `id` (it has none): due at `run_ns` (decimal text), of the spec
-- `tail`.
local function next_put(N, id, run_ns, tail, payload)
  redis.call('HSET', N.next, id, run_ns .. tail)
  redis.call('HSET', N.next_payload, id, payload)
  redis.call('HINCRBY', N.counts, 'successors', 1)
end

-- Deletes the successor of `id`; whether one waited.
local function next_drop(N, id)
  redis.call('HDEL', N.next_payload, id)
  if redis.call('HDEL', N.next, id) == 0 then return false end
  if redis.call('HINCRBY', N.counts, 'successors', -1) <= 0 then
    redis.call('HDEL', N.counts, 'successors')
  end
  return true
end

-- The successor `succ` (its `next` value) of `id` becomes its pending job: attempt 0, its
-- own spec and payload, due at its run_at or at `not_before_ns` (a decimal text, or nil)
-- if that is later; in its level's due set and `levels`, tallied pending in `counted`
-- (kinds.lua). The job it follows must be out of its index and counters already (or be
-- taken out by the caller from an index that is not this due set). Returns the due key
-- and score, for the caller's wake message; nil for a gated successor, which enters its
-- gate (gates.lua, N.G) instead.
local function next_handover(N, id, succ, not_before_ns, counted)
  local run_ns, tail = string.match(succ, '^(%d+)(.*)$')
  if not_before_ns and ns_less(run_ns, not_before_ns) then run_ns = not_before_ns end
  local p, kind = job_level(tail)
  redis.call('HSET', N.meta, id, 'p:0:0:' .. run_ns .. tail)
  redis.call('HSET', N.payload, id, redis.call('HGET', N.next_payload, id))
  next_drop(N, id)
  tally(counted, 'pending', kind, 1)
  if job_gate(tail) then
    -- A gated successor enters its gate as a new job (gates.lua): the caller's gate_flush
    -- admits it, or not, and publishes it.
    gate_enter(N.G, id, run_ns, tail, true)
    return nil, nil
  end
  local key = due_key(N.due, p, kind)
  local score = ns_score(run_ns)
  redis.call('ZADD', key, score, id)
  level_note(N.levels, p, kind)
  return key, score
end

-- Publishes the earliest of the handed-over successors (`due`: key -> score) that became
-- its level's first due on N.wake (N.publish: 'PUBLISH' | 'SPUBLISH'), as a schedule does.
local function next_wake(N, due)
  local first = nil
  for key, score in pairs(due) do
    if is_head(key, score) and (not first or score < first) then first = score end
  end
  if first then redis.call(N.publish, N.wake, string.format('%.0f', first)) end
end
