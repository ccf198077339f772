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
--                        import, revive or successor that entered the gate), na + nw (how
--                        many jobs gate_a and gate_w hold), tm (its score in gate_timers,
--                        0: none). A script reads it once (`gate_state`) and writes
--                        what changed once per rebalance, so a rebalance reads no set's size and no
--                        timer.
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
-- or a swap undone, until the next rebalance after the gate's timer (at now): that of the
-- claim that meets it, or of any script that touches the gate (its `tm` come). A script marks the gates
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
          pend = {}, gs = {}, full = {}, adds = {}, drops = {}, tmr = {}}
end

local function gate_dirty(G, gid)
  if not G.dirty[gid] then
    G.dirty[gid] = true
    G.order[#G.order + 1] = gid
  end
end

-- The gate's hash as this script sees it, read once per script (one HMGET) and written
-- back by its rebalance (one HSET of the fields that changed, or HDEL when the gate goes):
-- run, ws (nil: no window), st, lim (nil: the gate has no hash yet), rs, rp, na, nw (how
-- many jobs its sets gate_a and gate_w hold, kept in step with every write to them, so a
-- rebalance reads no ZCARD), tm (nil: no timer); h the hash's key.
local function gate_state(G, gid)
  local s = G.gs[gid]
  if not s then
    local h = G.pre .. 'h:' .. gid
    local f = redis.call('HMGET', h, 'run', 'ws', 'st', 'lim', 'rs', 'rp', 'na', 'nw', 'tm')
    local run, st, rs, rp = tonumber(f[1]), tonumber(f[3]), tonumber(f[5]), tonumber(f[6])
    s = {run = run or 0, ws = tonumber(f[2]), st = st or 0,
         lim = tonumber(f[4]), rs = rs or 0, rp = rp or 0,
         na = tonumber(f[7]), nw = tonumber(f[8]), tm = tonumber(f[9]), h = h}
    -- What the hash holds, so its write sends the fields that changed only: by position,
    -- in GATE_FIELDS' order (an array: a claim or ack reads one gate per job).
    s.w = {run, s.ws, st, s.lim, rs, rp, s.na, s.nw, s.tm}
    if s.tm == 0 then s.tm = nil end
    if not s.na then
      -- A gate without counters: none (no hash: no job) or one written before they were kept.
      if s.lim then
        s.na = redis.call('ZCARD', G.pre .. 'a:' .. gid)
        s.nw = redis.call('ZCARD', G.pre .. 'w:' .. gid)
      else
        s.na, s.nw = 0, 0
      end
    end
    G.gs[gid] = s
  end
  return s
end

-- The hash's fields, in the order a write sends them (and `s.w` holds them).
local GATE_FIELDS = {'run', 'ws', 'st', 'lim', 'rs', 'rp', 'na', 'nw', 'tm'}
local GATE_TM = 9
local GATE_LIM = 4

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

-- gate_list_drop for the promoted ids `ids` of `kind` (gate_flush): one ZREM per
-- ARGS_PER_CALL ids (a flush may hold 256 promotions of each of many gates).
local function gate_list_drop_many(G, kind, ids)
  local l = G.pre .. 'l:' .. kind
  call_many('ZREM', l, ids)
  if redis.call('ZCARD', l) == 0 then redis.call('ZREM', G.levels, 'w:' .. kind) end
end

-- The pending job `id` (run_at `run_ns`, spec `tail`, gated) enters its gate, waiting; with
-- `limits` (or into a gate without any) the gate takes the job's limit and rate.
local function gate_enter(G, id, run_ns, tail, limits)
  local gid, lim, rs, rp = job_gate(tail)
  local p = job_level(tail)
  local s = gate_state(G, gid)
  if limits or not s.lim then s.lim, s.rs, s.rp = lim, rs, rp end
  -- Waiting, but kept in G until the rebalance: one it admits at once never touches the
  -- waiting sets (`gate_rebalance` writes the rest there). An entering job may go before
  -- an admitted one: the rebalance checks the order (a swap).
  local pend = G.pend[gid]
  if not pend then
    pend = {}
    G.pend[gid] = pend
  end
  pend[#pend + 1] = gate_member(run_ns, p, id)
  G.full[gid] = true
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
  local s = gate_state(G, gid)
  if redis.call('ZREM', G.pre .. 'a:' .. gid, m) == 1 then
    s.na = s.na - 1
    redis.call('ZREM', due_key(G.due, p, kind), id)
    level_tidy(G.levels, G.due, p, kind)
  else
    if redis.call('ZREM', G.pre .. 'w:' .. gid, m) == 1 then s.nw = s.nw - 1 end
    gate_list_drop(G, kind, id)
  end
  gate_dirty(G, gid)
end

-- A claim leases the admitted job `id` (priority `p`) of gate `gid` (pending to running;
-- the claim takes it out of its due set): one more running, one more start in the rate
-- window (a new window if the last one ended).
local function gate_start(G, gid, id, run_ns, p)
  local s = gate_state(G, gid)
  if redis.call('ZREM', G.pre .. 'a:' .. gid, gate_member(run_ns, p, id)) == 1 then s.na = s.na - 1 end
  s.run = s.run + 1
  if s.rs > 0 then
    if not s.ws or G.now >= s.ws + s.rp then
      s.ws, s.st = G.now, 1
    else
      s.st = s.st + 1
    end
  end
  gate_dirty(G, gid)
end

-- A claim kills the admitted pending job `id` (priority `p`; out of attempts; the claim
-- takes it out of its due set).
local function gate_drop(G, gid, id, run_ns, p)
  local s = gate_state(G, gid)
  if redis.call('ZREM', G.pre .. 'a:' .. gid, gate_member(run_ns, p, id)) == 1 then s.na = s.na - 1 end
  gate_dirty(G, gid)
end

-- A running job of gate `gid` stops running (ack, retry, failure, death).
local function gate_stop(G, gid)
  local s = gate_state(G, gid)
  s.run = s.run - 1
  gate_dirty(G, gid)
end

-- Restores the gate's invariant (see the header) at G.now: demotes admitted's last while
-- over the cap, promotes waiting's first while under it, swaps while waiting's first is
-- before admitted's last (only after a job entered or once its timer has come: promotions
-- and demotions keep the order); then sets or clears its timer, writes its hash, or deletes it
-- if it has no job. A promotion's due entry and its removal from the kind's waiting list
-- are written by gate_flush, one command per set for every gate it rebalanced.
local function gate_rebalance(G, gid)
  local s = gate_state(G, gid)
  -- A timer come (at or before now) may be a swap left undone: any touch goes on with it,
  -- not only the claim that meets the timer (an ack or cancel before it would otherwise
  -- drop the timer with a later-due job admitted before an earlier waiting one).
  local full = G.full[gid] or (s.tm ~= nil and s.tm <= G.now)
  G.full[gid] = nil
  local run, ws, st, lim, rs, rp = s.run, s.ws, s.st, s.lim or 0, s.rs, s.rp
  local open = rs > 0 and ws ~= nil and G.now < ws + rp
  local cap = math.huge
  if lim > 0 then cap = math.max(0, lim - run) end
  if rs > 0 then
    local left = rs
    if open then left = rs - st end
    cap = math.min(cap, math.max(0, left))
  end
  -- Waiting jobs: nws in the set w, and pend (entered in this script, not written yet);
  -- the first waiting one is the lesser of both heads.
  local pend = G.pend[gid]
  G.pend[gid] = nil
  local na, nws = s.na, s.nw
  local nw = nws
  if pend then nw = nw + #pend end
  -- Moves left: promotions, or a swap.
  local more = false
  -- Most rebalances (a start or a stop in a gate with room, nothing waiting) move nothing:
  -- they skip the sets' names and the moves' closures (one claim or ack rebalances a gate
  -- per job).
  if pend or na > cap or (na < cap and nw > 0) or (full and na > 0 and nw > 0) then
    local kind = string.sub(gid, 1, string.find(gid, '\31', 1, true) - 1)
    local a, w = G.pre .. 'a:' .. gid, G.pre .. 'w:' .. gid
    local list = G.pre .. 'l:' .. kind
    pend = pend or {}
    table.sort(pend, less)
    -- Members promoted into a, written before a is read again and at the end.
    local into_a = {}
    local function flush_a()
      if #into_a > 0 then
        call_many('ZADD', a, into_a)
        into_a = {}
      end
    end
    local function wfirst()
      local m = nws > 0 and redis.call('ZRANGE', w, 0, 0)[1]
      if pend[1] and (not m or less(pend[1], m)) then return pend[1], false end
      return m, true
    end
    local function demote()
      flush_a()
      local m = redis.call('ZRANGE', a, -1, -1)[1]
      local id, run_ns, p = gate_split(m)
      redis.call('ZREM', a, m)
      redis.call('ZREM', due_key(G.due, p, kind), id)
      level_tidy(G.levels, G.due, p, kind)
      redis.call('ZADD', w, 0, m)
      redis.call('ZADD', list, ns_score(run_ns), id)
      redis.call('ZADD', G.levels, 3000, 'w:' .. kind)
      -- A promotion of it later in this script must not be undone by a batched list removal.
      if G.drops[kind] then G.drops[kind][id] = nil end
      na, nw, nws = na - 1, nw + 1, nws + 1
    end
    local function admit(m, id, run_ns, p, stored)
      if stored then
        nws = nws - 1
        local d = G.drops[kind]
        if not d then
          d = {}
          G.drops[kind] = d
        end
        d[id] = true
      end
      into_a[#into_a + 1] = 0
      into_a[#into_a + 1] = m
      local key, score = due_key(G.due, p, kind), ns_score(run_ns)
      g_push(G.adds, key, score, id)
      if not G.woke[key] or score < G.woke[key] then G.woke[key] = score end
      na, nw = na + 1, nw - 1
    end
    local function promote_one()
      local m, stored = wfirst()
      if stored then
        redis.call('ZREM', w, m)
      else
        table.remove(pend, 1)
      end
      local id, run_ns, p = gate_split(m)
      admit(m, id, run_ns, p, stored)
    end
    while na > cap do demote() end
    local moves = GATE_MOVES_PER_REBALANCE
    while na < cap and nw > 0 and moves > 0 do
      promote_one()
      moves = moves - 1
    end
    -- The loop ends on the first move that is none.
    more = na < cap and nw > 0
    while full and not more and na > 0 and nw > 0 do
      local first = wfirst()
      flush_a()
      local last = redis.call('ZRANGE', a, -1, -1)[1]
      if not less(first, last) then break end
      if moves == 0 then
        more = true
      else
        demote()
        promote_one()
        moves = moves - 1
      end
    end
    flush_a()
    if #pend > 0 then
      local ws_args, list_args = {}, {}
      for _, m in ipairs(pend) do
        local id, run_ns = gate_split(m)
        ws_args[#ws_args + 1] = 0
        ws_args[#ws_args + 1] = m
        list_args[#list_args + 1] = ns_score(run_ns)
        list_args[#list_args + 1] = id
      end
      call_many('ZADD', w, ws_args)
      call_many('ZADD', list, list_args)
      redis.call('ZADD', G.levels, 3000, 'w:' .. kind)
      nws = nws + #pend
    end
  end
  local idle = na == 0 and nw == 0 and run <= 0
  local keep = more or (open and (nw > 0 or idle))
  -- Its timer: the score a claim read it at (gate_timers_due), else the hash's copy.
  local old = G.tmr[gid] or s.tm
  G.tmr[gid] = nil
  local held = s.w
  if keep then
    local at = ws and ws + rp
    if more then at = G.now end
    if old ~= at then
      redis.call('ZADD', G.timers, at, gid)
      G.timers_moved = true
    end
    s.tm = at
    -- A new or earlier timer with jobs to admit at it: published by gate_flush, since a
    -- consumer that went idle before it exists (its claim's next_due did not see it) would
    -- sleep past the window's end. A claim's own next_due reports it too.
    if nw > 0 and (not old or at < old) and (not G.timed or at < G.timed) then G.timed = at end
  else
    -- A hash without `tm` (written before it was kept) may have a timer all the same.
    if old or (held[GATE_TM] == nil and held[GATE_LIM] ~= nil) then
      redis.call('ZREM', G.timers, gid)
      G.timers_moved = true
    end
    s.tm = nil
  end
  s.na, s.nw = na, nws
  if idle and not keep then
    redis.call('HDEL', s.h, 'run', 'ws', 'st', 'lim', 'rs', 'rp', 'na', 'nw', 'tm')
    G.gs[gid] = nil
  else
    local cur = {run, ws, st, lim, rs, rp, na, nws, s.tm or 0}
    local f, n = {}, 0
    for i = 1, #GATE_FIELDS do
      local v = cur[i]
      if v ~= nil and v ~= held[i] then
        f[n + 1] = GATE_FIELDS[i]
        f[n + 2] = v
        n = n + 2
      end
    end
    if n > 0 then redis.call('HSET', s.h, unpack(f, 1, n)) end
    s.w = cur
  end
end

-- Rebalances the gates marked since the last flush, writes their promotions (one ZADD per
-- due set, one ZREM per kind's waiting list; each in slices of ARGS_PER_CALL values, since
-- up to 256 promotions of each of 64 gates at a claim, or of 512 at a schedule, would pass
-- Lua's unpack limit), then publishes the earliest of the
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
  for key, args in pairs(G.adds) do
    call_many('ZADD', key, args)
    local p, kind = string.match(string.sub(key, #G.due + 1), '^:(%-?%d+):(.*)$')
    if p then level_note(G.levels, tonumber(p), kind) end
  end
  G.adds = {}
  for kind, ids in pairs(G.drops) do
    local rems = {}
    for id in pairs(ids) do rems[#rems + 1] = id end
    if #rems > 0 then gate_list_drop_many(G, kind, rems) end
  end
  G.drops = {}
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
  if first[2] and tonumber(first[2]) <= G.now then
    local due = redis.call('ZRANGEBYSCORE', G.timers, '-inf', G.now, 'WITHSCORES', 'LIMIT', 0,
      GATE_TIMERS_PER_CLAIM)
    for i = 1, #due, 2 do
      local gid = due[i]
      G.tmr[gid] = tonumber(due[i + 1])
      -- Its last rebalance may have left a swap undone (out of moves).
      G.full[gid] = true
      gate_dirty(G, gid)
    end
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
