-- gates.lua: fairness per key (a job's key with a limit or a rate: a "gated" job). Not a
-- script of its own: prepended after kinds.lua to every script that moves a job between
-- states (schedule, import, cancel, reschedule, claim, ack, retry, revive) and to list.lua,
-- which pass a table G (`gate_ctx`) built from their declared `gate_timers` key.
--
-- A job's key is in its meta tail (kinds.lua) right before the kind's 0x1f: the byte 0x1e,
-- then "limit:starts:per_ns:key" (limit 0: none; starts 0: no rate; the key last, it may
-- hold ':' but no control character). A tail without it has no key. A job is gated when its
-- key has a limit or a rate; a gate is one (kind, key), named gid = kind .. 0x1f .. key.
--
-- Keys, under the partition's hash tag, named after `gate_timers` ("{tag}:gate_timers",
-- declared) by its prefix "{tag}:gate_":
--   gate_h:<gid>   hash  run (leased jobs of the gate), ws + st (the rate window's start in
--                        µs and the starts in it), lim, rs, rp (limit, rate starts, rate
--                        period in µs: those of the job of the newest schedule, replace,
--                        import, revive or successor that entered the gate)
--   gate_a:<gid>   zset  the gate's admitted pending jobs: in their due set (kinds.lua),
--                        claimable as any
--   gate_w:<gid>   zset  the gate's waiting pending jobs: in no due set, not claimable
--   gate_l:<kind>  zset  the kind's waiting jobs scored by run_at µs, for lists; `levels`
--                        holds "w:<kind>" (scored 3000) while it has any
--   gate_timers    zset  gids scored by the end of their open rate window (µs), or by the
--                        time of a rebalance that left moves (GATE_MOVES_PER_REBALANCE): a
--                        claim rebalances those whose time has come (at most
--                        GATE_TIMERS_PER_CLAIM) and reports the first as due, so an idle
--                        consumer wakes then
-- gate_a and gate_w are in key order, (run_at, priority desc, id), exactly: every member
-- scored 0, the run_at in ns padded to 20 digits, then 127 - priority in 3 digits, then
-- the id, so the members sort bytewise in that order. run_at first: a job due later never
-- holds a slot before a due one, whatever their priorities (a higher-priority job due
-- tomorrow would stall a limit-1 key until then).
--
-- Invariant after every script: every admitted job is before every waiting one in key
-- order, and admitted = min(admitted + waiting, cap), cap = max(0, min(lim - run,
-- rs - st while the window is open, else rs)) (`gate_rebalance`); admitted never above the
-- cap, but a rebalance out of moves (GATE_MOVES_PER_REBALANCE) may leave fewer admitted,
-- or a swap undone, until a claim meets the gate's timer at now. A script marks the gates
-- it touches (`gate_dirty`) and rebalances them once at its end (`gate_flush`); a
-- promotion that becomes its level's first due is published on the wake channel, as a
-- schedule does. A gate with no job (run 0, none admitted or waiting) is deleted at its
-- rebalance, unless its rate window is still open: then it keeps its timer, and the claim
-- that meets that timer deletes it.

local GATE_TIMERS_PER_CLAIM = 64

-- The most promotions (a swap counts one) a rebalance makes: one script's work stays
-- bounded (a limit raised under 20k waiting jobs would otherwise promote them all in one
-- EVAL). A gate with moves left keeps a timer at now, so the next claim goes on (its
-- next_due is now). Demotions are not bounded: they keep the limit (admitted never above
-- the cap after a script), and come in bulk only when a schedule lowers a gate's limit or
-- rate.
local GATE_MOVES_PER_REBALANCE = 256

-- ceil(ns / 1000) of a decimal text of nanoseconds: the due score of a run_at.
local function ns_score(ns)
  local us = ns_us(ns)
  if #ns > 3 and string.sub(ns, -3) ~= '000' then us = us + 1 end
  if #ns <= 3 and ns ~= '0' then us = 1 end
  return us
end

-- gid, limit, rate starts, rate period µs of a tail whose key is gated; nil otherwise.
local GATES = {}
local function job_gate(tail)
  if tail == nil or tail == '' then return nil end
  local g = GATES[tail]
  if g == nil then
    g = false
    local lim, rs, rp, key, kind = string.match(tail, '\30(%d+):(%d+):(%d+):([^\31]*)\31(.*)$')
    if lim and (lim ~= '0' or rs ~= '0') then
      g = {kind .. '\31' .. key, tonumber(lim), tonumber(rs), ns_us(rp)}
    end
    GATES[tail] = g
  end
  if not g then return nil end
  return g[1], g[2], g[3], g[4]
end

local function gate_ctx(timers, due, levels, now, wake, publish)
  return {pre = string.sub(timers, 1, -7), timers = timers, due = due, levels = levels,
          now = now, wake = wake, publish = publish, dirty = {}, order = {}, woke = {},
          pend = {}, hc = {}}
end

local function gate_dirty(G, gid)
  if not G.dirty[gid] then
    G.dirty[gid] = true
    G.order[#G.order + 1] = gid
  end
end

local function gate_member(run_ns, p, id)
  return string.rep('0', 20 - #run_ns) .. run_ns .. string.format('%03d', 127 - p) .. id
end

-- id, run_ns, priority of a member.
local function gate_split(m)
  local run_ns = string.match(string.sub(m, 1, 20), '^0*(%d-)$')
  if run_ns == '' then run_ns = '0' end
  return string.sub(m, 24), run_ns, 127 - tonumber(string.sub(m, 21, 23))
end

local function gate_list_drop(G, kind, id)
  local l = G.pre .. 'l:' .. kind
  redis.call('ZREM', l, id)
  if redis.call('ZCARD', l) == 0 then redis.call('ZREM', G.levels, 'w:' .. kind) end
end

-- The pending job `id` (run_at `run_ns`, spec `tail`, gated) enters its gate, waiting; with
-- `limits` (or into a gate without any) the gate takes the job's limit and rate.
local function gate_enter(G, id, run_ns, tail, limits)
  local gid, lim, rs, rp = job_gate(tail)
  local p, kind = job_level(tail)
  local h = G.pre .. 'h:' .. gid
  G.hc[gid] = nil
  if limits or redis.call('HEXISTS', h, 'lim') == 0 then
    redis.call('HSET', h, 'lim', lim, 'rs', rs, 'rp', rp)
  end
  -- Waiting, but kept in G until the rebalance: one it admits at once never touches the
  -- waiting sets (`gate_rebalance` writes the rest there).
  local pend = G.pend[gid]
  if not pend then
    pend = {}
    G.pend[gid] = pend
  end
  pend[#pend + 1] = gate_member(run_ns, p, id)
  gate_dirty(G, gid)
end

-- The pending gated job `id` leaves its gate (cancel, replace, reschedule): out of its due
-- set if admitted, out of the waiting sets if not.
local function gate_leave(G, id, run_ns, tail)
  local gid = job_gate(tail)
  local p, kind = job_level(tail)
  local m = gate_member(run_ns, p, id)
  local pend = G.pend[gid]
  if pend then
    for i, e in ipairs(pend) do
      if e == m then
        -- Entered in this script, not written anywhere yet.
        table.remove(pend, i)
        gate_dirty(G, gid)
        return
      end
    end
  end
  if redis.call('ZREM', G.pre .. 'a:' .. gid, m) == 1 then
    redis.call('ZREM', due_key(G.due, p, kind), id)
    level_tidy(G.levels, G.due, p, kind)
  else
    redis.call('ZREM', G.pre .. 'w:' .. gid, m)
    gate_list_drop(G, kind, id)
  end
  gate_dirty(G, gid)
end

-- A claim leases the admitted job `id` (priority `p`) of gate `gid` (pending to running;
-- the claim takes it out of its due set): one more running, one more start in the rate
-- window (a new window if the last one ended).
local function gate_start(G, gid, id, run_ns, p)
  local h = G.pre .. 'h:' .. gid
  redis.call('ZREM', G.pre .. 'a:' .. gid, gate_member(run_ns, p, id))
  local run = redis.call('HINCRBY', h, 'run', 1)
  local f = redis.call('HMGET', h, 'ws', 'rs', 'rp', 'st', 'lim')
  local ws, st = tonumber(f[1]), tonumber(f[4]) or 0
  if (tonumber(f[2]) or 0) > 0 then
    if not ws or G.now >= ws + tonumber(f[3]) then
      redis.call('HSET', h, 'ws', G.now, 'st', 1)
      ws, st = G.now, 1
    else
      st = redis.call('HINCRBY', h, 'st', 1)
    end
  end
  -- The hash as it is now, for the rebalance (`gate_rebalance`: run, ws, st, lim, rs, rp
  -- as HMGET returns them); any other write to it drops this.
  G.hc[gid] = {run, ws, st, f[5], f[2], f[3]}
  gate_dirty(G, gid)
end

-- A claim kills the admitted pending job `id` (priority `p`; out of attempts; the claim
-- takes it out of its due set).
local function gate_drop(G, gid, id, run_ns, p)
  redis.call('ZREM', G.pre .. 'a:' .. gid, gate_member(run_ns, p, id))
  gate_dirty(G, gid)
end

-- A running job of gate `gid` stops running (ack, retry, failure, death).
local function gate_stop(G, gid)
  G.hc[gid] = nil
  redis.call('HINCRBY', G.pre .. 'h:' .. gid, 'run', -1)
  gate_dirty(G, gid)
end

-- Restores the gate's invariant (see the header) at G.now: demotes admitted's last while
-- over the cap, promotes waiting's first while under it, swaps while waiting's first is
-- before admitted's last; then sets or clears its timer, or deletes it if it has no job.
local function gate_rebalance(G, gid)
  local kind = string.sub(gid, 1, string.find(gid, '\31', 1, true) - 1)
  local h, a, w = G.pre .. 'h:' .. gid, G.pre .. 'a:' .. gid, G.pre .. 'w:' .. gid
  local list = G.pre .. 'l:' .. kind
  local f = G.hc[gid] or redis.call('HMGET', h, 'run', 'ws', 'st', 'lim', 'rs', 'rp')
  G.hc[gid] = nil
  local run, ws, st = tonumber(f[1]) or 0, tonumber(f[2]), tonumber(f[3]) or 0
  local lim, rs, rp = tonumber(f[4]) or 0, tonumber(f[5]) or 0, tonumber(f[6]) or 0
  local open = rs > 0 and ws ~= nil and G.now < ws + rp
  local cap = math.huge
  if lim > 0 then cap = math.max(0, lim - run) end
  if rs > 0 then
    local left = rs
    if open then left = rs - st end
    cap = math.min(cap, math.max(0, left))
  end
  -- Waiting jobs: nws in the set w, and pend (entered in this script, not written yet),
  -- sorted here; the first waiting one is the lesser of both heads.
  local pend = G.pend[gid] or {}
  G.pend[gid] = nil
  table.sort(pend, less)
  local na, nws = redis.call('ZCARD', a), redis.call('ZCARD', w)
  local nw = nws + #pend
  local from_w = false
  local function wfirst()
    local m = nws > 0 and redis.call('ZRANGE', w, 0, 0)[1]
    if pend[1] and (not m or less(pend[1], m)) then return pend[1], false end
    return m, true
  end
  local function demote()
    local m = redis.call('ZRANGE', a, -1, -1)[1]
    local id, run_ns, p = gate_split(m)
    redis.call('ZREM', a, m)
    redis.call('ZREM', due_key(G.due, p, kind), id)
    level_tidy(G.levels, G.due, p, kind)
    redis.call('ZADD', w, 0, m)
    redis.call('ZADD', list, ns_score(run_ns), id)
    redis.call('ZADD', G.levels, 3000, 'w:' .. kind)
    na, nw, nws = na - 1, nw + 1, nws + 1
  end
  local function promote()
    local m, stored = wfirst()
    local id, run_ns, p = gate_split(m)
    if stored then
      redis.call('ZREM', w, m)
      redis.call('ZREM', list, id)
      nws = nws - 1
      from_w = true
    else
      table.remove(pend, 1)
    end
    redis.call('ZADD', a, 0, m)
    local key, score = due_key(G.due, p, kind), ns_score(run_ns)
    redis.call('ZADD', key, score, id)
    level_note(G.levels, p, kind)
    if not G.woke[key] or score < G.woke[key] then G.woke[key] = score end
    na, nw = na + 1, nw - 1
  end
  while na > cap do demote() end
  local moves = GATE_MOVES_PER_REBALANCE
  while na < cap and nw > 0 and moves > 0 do
    promote()
    moves = moves - 1
  end
  -- Moves left: promotions, or a swap (the loop ends on the first that is none).
  local more = na < cap and nw > 0
  while not more and na > 0 and nw > 0 do
    local first = wfirst()
    local last = redis.call('ZRANGE', a, -1, -1)[1]
    if not less(first, last) then break end
    if moves == 0 then
      more = true
    else
      demote()
      promote()
      moves = moves - 1
    end
  end
  if #pend > 0 then
    for _, m in ipairs(pend) do
      local id, run_ns = gate_split(m)
      redis.call('ZADD', w, 0, m)
      redis.call('ZADD', list, ns_score(run_ns), id)
    end
    redis.call('ZADD', G.levels, 3000, 'w:' .. kind)
  end
  -- Only a promotion out of w can empty the kind's list without tidying `levels`.
  if from_w and nws == 0 and redis.call('ZCARD', list) == 0 then
    redis.call('ZREM', G.levels, 'w:' .. kind)
  end
  local idle = na == 0 and nw == 0 and run <= 0
  if more or (open and (nw > 0 or idle)) then
    local at = ws and ws + rp
    if more then at = G.now end
    local old = tonumber(redis.call('ZSCORE', G.timers, gid))
    G.no_timers = false
    if old ~= at then
      redis.call('ZADD', G.timers, at, gid)
      G.timers_moved = true
    end
    -- A new or earlier timer with jobs to admit at it: published by gate_flush, since a
    -- consumer that went idle before it exists (its claim's next_due did not see it) would
    -- sleep past the window's end. A claim's own next_due reports it too.
    if nw > 0 and (not old or at < old) and (not G.timed or at < G.timed) then G.timed = at end
  else
    -- Whether any timer exists, read once per script (most queues have none).
    if G.no_timers == nil then G.no_timers = redis.call('EXISTS', G.timers) == 0 end
    if not G.no_timers and redis.call('ZREM', G.timers, gid) == 1 then G.timers_moved = true end
    if idle then redis.call('HDEL', h, 'run', 'ws', 'st', 'lim', 'rs', 'rp') end
  end
end

-- Rebalances the gates marked since the last flush, then publishes the earliest of the
-- promotions that became their level's first due and of the timers set or moved earlier
-- (one message: a consumer woken early claims and learns the rest as its next_due).
-- Returns the earliest promotion's due score, or nil.
local function gate_flush(G)
  if #G.order == 0 then return nil end
  if not G.now then
    local t = redis.call('TIME')
    G.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  for _, gid in ipairs(G.order) do gate_rebalance(G, gid) end
  G.dirty, G.order = {}, {}
  local first, any = nil, nil
  for key, score in pairs(G.woke) do
    if not any or score < any then any = score end
    if is_head(key, score) and (not first or score < first) then first = score end
  end
  G.woke = {}
  if G.timed and (not first or G.timed < first) then first = G.timed end
  G.timed = nil
  if first and G.wake then redis.call(G.publish, G.wake, string.format('%.0f', first)) end
  return any
end

-- A claim's first step: rebalances the gates whose timers' time has come (at or before
-- G.now), at most GATE_TIMERS_PER_CLAIM. Reads the first timer once, kept as
-- G.timer_head (false: none) for the claim's next_due (`gate_timers_head`): a queue
-- without timers, most, pays this one read per claim.
local function gate_timers_due(G)
  local first = redis.call('ZRANGE', G.timers, 0, 0, 'WITHSCORES')
  G.timer_head = first[2] or false
  G.no_timers = not first[2]
  if first[2] and tonumber(first[2]) <= G.now then
    local gids = redis.call('ZRANGEBYSCORE', G.timers, '-inf', G.now, 'LIMIT', 0, GATE_TIMERS_PER_CLAIM)
    for _, gid in ipairs(gids) do gate_dirty(G, gid) end
  end
  gate_flush(G)
end

-- The first gate timer's score at the claim's end, or nil: the one gate_timers_due read,
-- unless a rebalance since set or removed one (then read again).
local function gate_timers_head(G)
  if G.timers_moved then
    local first = redis.call('ZRANGE', G.timers, 0, 0, 'WITHSCORES')
    return first[2]
  end
  return G.timer_head or nil
end
