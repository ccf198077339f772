-- claim.lua: lease up to ARGV[1] due jobs and expired leases of the kinds ARGV[3] names
-- (redelivering them, killing jobs out of their own attempts) and report the server's time
-- and the next due time among those kinds.
--
-- Mirrors core/state `Machine::claim` (attempts counted at claim; a job whose attempts reached
-- max_attempts dies instead) and `Machine::claim_error` ("lease expired" for a job taken from
-- an ended lease), checked on the same cases by backend/redis/agreement.rs; a series head's first
-- claim mirrors series.rs `on_due` (series.lua).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua; its field
-- `paused`, set by pause.lua, stops every claim: nothing claimed, nothing reported due)
-- KEYS[5] seq     string  lease token counter (INCRBY: a token is never handed out twice)
-- KEYS[6] dead    zset    dead ids of kind "" scored by the death time in microseconds
--                         (server TIME; 0 for jobs that died before this score was kept:
--                         the oldest); each other kind has its own (kinds.lua)
-- KEYS[7] series, KEYS[8] series_payload, KEYS[9] series_next (see series.lua, prepended)
-- KEYS[10] errors hash    id -> the job's last error (a failure's message, or "lease
--                         expired", which a claim records for a job whose lease ended)
-- KEYS[11] running zset   running ids of kind "" scored by their lease end in
--                         microseconds (each other kind has its own, kinds.lua); a running
--                         job is here only, not in due (one index per state, so a claim
--                         moves each job from due to running and an ack removes it from
--                         running: one sorted-set write each, as when due held both); and
--                         RUNNING_PIN (kinds.lua), scored +inf
-- KEYS[12] levels (see kinds.lua, prepended)
-- KEYS[13] held, KEYS[14] held_until (see held.lua, prepended): a folded ack of a job with a
-- hold-off leaves its tombstone, and each claim (not paused) deletes at most HELD_PER_CLAIM
-- expired ones, earliest first
-- KEYS[15] next, KEYS[16] next_payload (see next.lua, prepended): a job this claim kills
-- (out of attempts: its lease ended at its last attempt) with a successor is followed by it
-- instead of dying (no dead job is kept, the death is still counted in the reply), and a
-- folded ack's job by its successor as in ack.lua
-- KEYS[17] gate_timers (see gates.lua, prepended): a claim first rebalances at most
-- GATE_TIMERS_PER_CLAIM gates whose rate window ended; leasing an admitted gated job counts
-- a start and a running job of its gate (an expired lease's redelivery counts neither), a
-- kill frees what the job held; the gates touched rebalance at the end, and next_due is at
-- most the first gate timer (so an idle consumer wakes at a window's end by itself)
-- ARGV[1] max jobs (at most 512), ARGV[2] the queue's plain spec tail (kinds.lua: the lease
-- and max attempts of a job stored without its spec), ARGV[3] '*' for every kind or the
-- number n of kinds to claim, ARGV[4] wake channel, ARGV[5] 'PUBLISH' | 'SPUBLISH' (see
-- schedule.lua: a successor that becomes its level's first due is published), then (for a
-- number) n pairs kind, most: the kinds, each with the most jobs of it this claim takes (a
-- worker's free cap of that kind), then pairs id, lease token: the consumer's acks folded
-- into this claim (at most 512 pairs), applied
-- first exactly as ack.lua applies them (acks.lua, prepended), so a steady consumer pays
-- one request per job instead of a claim and an ack
--
-- Order: expired leases of the claimed kinds first, then due jobs by priority (highest
-- first), then run_at, then id (bytewise). The levels index says which (priority, kind)
-- due sets exist: per priority, the claimed kinds' sets are merged a chunk of each at a
-- time (kinds.lua `merge`: O(sets + jobs taken) entries read, never each set's whole
-- backlog); nothing of another kind, and no job not yet due, is read. Each kind's reads
-- stop at its most (one set per kind at a priority, so a set's cap is its kind's room). Each job is
-- leased for its own lease and dies at its own max attempts (its spec, kinds.lua).
--
-- Returns {now_us, next_due_us ("" if none), notes, how many jobs it killed, the folded
-- acks' answers (one 1|0 per pair, see acks.lua), then per delivered job: id, payload,
-- attempt, run_at_ns, token, spec tail (the plain one for a job stored without; "" for the
-- same as the job before's in this reply, and the integer i for the ith distinct tail this
-- reply sent, so a batch sends each spec once: the jobs of several kinds, in claim order,
-- change spec from one job to the next)};
-- next_due_us is the first of the claimed kinds' due heads and running heads (a lease end
-- wakes consumers too), or, when one of them is at or before now, that one (the heads
-- after it are not read: every caller takes a past due time as now); notes are series.lua's {name,
-- 'low' | 'dry', version, head_ns, runs, rule}. The first claim of a recurring series' head
-- creates its next occurrence here (series_due), so claiming one and creating the next are
-- one step; a head superseded by a later occurrence that is due too is deleted and that
-- one leased instead. The range reads
-- have a LIMIT, so a claim's cost is bounded whatever the backlog. Atomic: two consumers
-- never lease the same job, and "now" is the server's TIME, so clients with skewed clocks
-- neither deliver early nor late. One HMGET each for the states and payloads, one INCRBY
-- for a block of tokens, then one write per structure (per index of a level or kind); the
-- counters of the folded acks and of the claim are written together at the end (one HMGET
-- and one HSET of the counts hash for a batch of several kinds, kinds.lua `tally_flush`),
-- and a level is tidied (ZCARD) only if its read did not show jobs left in it.
--
-- An index entry whose job is gone or in another state is dropped when read: the scripts
-- never leave one, but a key edited by hand must not fail every claim.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- The same as a decimal text, for the range reads: a number argument is formatted by the
-- server (`%.17g`) at each call, which costs more than a small read.
local now_text = t[1] .. string.sub('00000' .. t[2], -6)
local plain = ARGV[2]
-- left[kind]: how many more jobs of the kind this claim may take; nil for every kind.
local left = nil
local acks_from = 6
if ARGV[3] ~= '*' then
  left = {}
  local n = tonumber(ARGV[3])
  for i = 0, n - 1 do left[ARGV[6 + 2 * i]] = tonumber(ARGV[7 + 2 * i]) end
  acks_from = 6 + 2 * n
end
-- Before the pause check: a paused queue still takes acks.
local H = {held = KEYS[13], held_until = KEYS[14]}
local G = gate_ctx(KEYS[17], KEYS[3], KEYS[12], now, ARGV[4], ARGV[5])
local N = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], levels = KEYS[12], counts = KEYS[4],
           next = KEYS[15],
           next_payload = KEYS[16], wake = ARGV[4], publish = ARGV[5], G = G}
-- The folded acks' counter deltas and the kinds whose running sets they may have emptied:
-- written and tidied with the claim's own, once, at its end (finish).
local acks_counted = {}
local later = {counted = acks_counted, tidy = {}}
local acked = apply_acks(KEYS[1], KEYS[2], KEYS[4], KEYS[10], KEYS[11], KEYS[12], H, ARGV,
  acks_from, N, later)
-- The claim's counter deltas.
local counted = {}
local finished = false
-- The chores the acks left, done with the claim's: `pinned` names the running sets this
-- claim leased jobs into.
local function finish(pinned)
  finished = true
  for f, d in pairs(acks_counted) do counted[f] = (counted[f] or 0) + d end
  tally_flush(KEYS[4], counted)
  for kind in pairs(later.tidy) do
    if not pinned[running_key(KEYS[11], kind)] then running_tidy(KEYS[12], KEYS[11], kind) end
  end
end
-- The claim proper. The acks' deletions are applied already and a script is not rolled
-- back: if the claim fails before finish (a key edited by hand, of the wrong type), its
-- error is raised only after the acks' counters and running sets are made right, so the
-- acks stay consistent on their own as they were when each wrote its own counters. (The
-- function costs some 20k instructions a claim, under callgrind: its upvalues, not the
-- pcall; 7 % of a claim that finds nothing, 1 % per job of a drain 27 at a time.)
local ok, res = pcall(function()
  if redis.call('HEXISTS', KEYS[4], 'paused') == 1 then
    finish({})
    return {now, '', {}, 0, acked}
  end
  held_expire(H, now)
  -- Gates whose rate window ended admit their next jobs before the due sets are read.
  gate_timers_due(G)
  local max = tonumber(ARGV[1])
  -- How many jobs of `kind` may still be taken, at most `want`.
  local function room(kind, want)
    if left == nil then return want end
    return math.min(want, left[kind] or 0)
  end
  local function took(kind, n)
    if left ~= nil then left[kind] = left[kind] - n end
  end
  -- The claimed kinds' due sets by priority (and each set's kind), and their running sets.
  local groups, prios, runs, run_kinds, listed, kind_of = {}, {}, {}, {}, {}, {}
  if left == nil or left[''] ~= nil then
    groups[0] = {KEYS[3]}
    kind_of[KEYS[3]] = ''
    prios[1] = 0
    runs[1] = KEYS[11]
    run_kinds[1] = ''
    listed[KEYS[11]] = true
  end
  -- By score: the due levels and running sets, not the dead sets (kinds.lua).
  -- (Split with plain finds, not a pattern: a claim reads every level's name.)
  -- A name of no such form (a hand edit: "d:x:k", "rx") is skipped, as a pattern would.
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[12], '-inf', '1000')) do
    local tag, sep = string.byte(m, 1, 2)
    local colon = tag == 100 and sep == 58 and string.find(m, ':', 3, true)
    -- "d:<p>:<kind>", whose set is due:<p>:<kind> (due_key): p an integer (not nil, NaN,
    -- an infinity or a fraction, which tonumber also reads).
    local p = colon and tonumber(string.sub(m, 3, colon - 1))
    if p and p % 1 == 0 then
      local kind = string.sub(m, colon + 1)
      if left == nil or left[kind] ~= nil then
        if not groups[p] then
          groups[p] = {}
          prios[#prios + 1] = p
        end
        local g = groups[p]
        local key = KEYS[3] .. ':' .. string.sub(m, 3)
        g[#g + 1] = key
        kind_of[key] = kind
      end
    elseif tag == 114 and sep == 58 then
      -- "r:<kind>"
      local kind = string.sub(m, 3)
      local key = running_key(KEYS[11], kind)
      -- (Not "r:", the plain running set's, listed already: it would be read twice.)
      if (left == nil or left[kind] ~= nil) and not listed[key] then
        runs[#runs + 1] = key
        run_kinds[#runs] = kind
        listed[key] = true
      end
    end
  end
  table.sort(prios, function(a, b) return a > b end)
  local ids, from = {}, {}
  -- Due sets a read showed to hold more than this claim takes from them: not empty after it,
  -- so their level needs no tidy (ZCARD).
  local kept = {}
  -- Expired leases are few: each running set's range read is mostly empty.
  for i, key in ipairs(runs) do
    if #ids >= max then break end
    local want = room(run_kinds[i], max - #ids)
    if want > 0 then
      local got = redis.call('ZRANGEBYSCORE', key, '-inf', now_text, 'LIMIT', 0, want)
      for _, id in ipairs(got) do
        ids[#ids + 1] = id
        from[#ids] = key
      end
      took(run_kinds[i], #got)
    end
  end
  for _, p in ipairs(prios) do
    local want = max - #ids
    if want <= 0 then break end
    -- The level's sets of kinds with room left, each read at most its kind's room.
    local keys, caps = {}, {}
    for _, key in ipairs(groups[p]) do
      local r = room(kind_of[key], want)
      if r > 0 then
        keys[#keys + 1] = key
        caps[key] = r
      end
    end
    if #keys == 1 then
      local key = keys[1]
      -- One more than taken, but for the plain level (never tidied): whether any is left.
      local cap = caps[key]
      local extra = 1
      if key == KEYS[3] then extra = 0 end
      local got = redis.call('ZRANGEBYSCORE', key, '-inf', now_text, 'LIMIT', 0, cap + extra)
      if #got > cap then
        got[#got] = nil
        kept[key] = true
      end
      for _, id in ipairs(got) do
        ids[#ids + 1] = id
        from[#ids] = key
      end
      took(kind_of[key], #got)
    elseif #keys > 1 then
      -- Kinds of one priority, merged by (run_at, id) a chunk of each at a time (kinds.lua).
      local function read(key, off, count)
        return redis.call('ZRANGEBYSCORE', key, '-inf', now_text, 'WITHSCORES', 'LIMIT', off, count)
      end
      local merged, n = merge(keys, want, read, caps, kept)
      for i = 1, n do
        local key = merged[2 * i]
        ids[#ids + 1] = merged[2 * i - 1]
        from[#ids] = key
        took(kind_of[key], 1)
      end
    end
  end
  -- The ids this claim leased so far: a series head superseded by a hand-made job of a later
  -- occurrence adopts it, which the same batch may hold under its own entry too (either
  -- first); its meta is written at the end, so without this it would be leased twice.
  local taken = {}
  local pinned = {}
  local S = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], counts = KEYS[4], levels = KEYS[12],
             series = KEYS[7], series_payload = KEYS[8], series_next = KEYS[9], taken = taken}
  local notes = {}
  local out = {now, '', notes, 0, acked}
  if #ids > 0 then
    local metas = redis.call('HMGET', KEYS[1], unpack(ids))
    -- One record per spec met (a batch's jobs mostly share one): its level's and kind's
    -- sets, its attempts and lease, and what this claim does to them. Jobs of one spec but
    -- for their keys (a tail each) share it, so their sets are written once.
    local recs = {}
    local by_spec = {}
    local order = {}
    local function rec_of(tail)
      local r = recs[tail]
      if not r then
        local p, kind, max_attempts, lease = job_spec(tail, plain)
        local spec = p .. ':' .. max_attempts .. ':' .. lease .. ':' .. kind
        r = by_spec[spec]
        if not r then
          r = {p = p, kind = kind, max = max_attempts, lease = lease,
               due = due_key(KEYS[3], p, kind), running = running_key(KEYS[11], kind),
               due_rems = {}, run_rems = {}, leases = {}, leased = 0, died_p = 0, died_r = 0,
               handed_p = 0, handed_r = 0}
          by_spec[spec] = r
          order[#order + 1] = r
        end
        recs[tail] = r
      end
      return r
    end
    -- Per job, in parallel arrays (no table per job): state, attempt, run_ns, tail, record.
    local states, attempts, runs_ns, tails, rs = {}, {}, {}, {}, {}
    local leasing = 0
    for i = 1, #ids do
      local state, attempt, _, run_ns, tail = job_parse(metas[i])
      if state == 'p' or state == 'r' then
        attempt = tonumber(attempt)
        local r = recs[tail] or rec_of(tail)
        states[i], attempts[i], runs_ns[i], tails[i], rs[i] = state, attempt, run_ns, tail, r
        if attempt < r.max then leasing = leasing + 1 end
      end
    end
    local token = 0
    if leasing > 0 then token = redis.call('INCRBY', KEYS[5], leasing) - leasing end
    local payloads = redis.call('HMGET', KEYS[2], unpack(ids))
    local meta_writes = {}
    local died = {}
    -- Killed jobs followed by their successors (next.lua): id, successor pairs, handed over
    -- once the killed jobs are out of their indexes. Whether any successor waits is looked
    -- up at the first kill only (kills are rare).
    local handed = {}
    local waits = nil
    local died_scores = {}
    local expired = {}
    -- The spec tail last sent, and the position (1, 2, ...) of each sent among the distinct
    -- tails of this reply.
    local sent = nil
    local sent_at, tails_sent = {}, 0
    for i, due_id in ipairs(ids) do
      local id = due_id
      local state, attempt, run_ns, tail, r = states[i], attempts[i], runs_ns[i], tails[i], rs[i]
      local payload = payloads[i]
      if taken[due_id] then
        -- Leased already by this claim, as the occurrence that superseded a series' head.
        id = nil
      elseif state and attempt == 0 and string.find(id, '@', 1, true) then
        -- Maybe a series' head, of any kind and priority (its series' spec): read here by
        -- the claims of its kind only.
        id = series_due(S, id, now, notes)
        if id and id ~= due_id and taken[id] then
          id = nil
        elseif id and id ~= due_id then
          -- A later occurrence superseded this series head and runs instead: made pending
          -- just now (or adopted), it is leased like the head would have been; but only
          -- within the claim's kinds (it is of its series' kind, as the head, which
          -- series.lua adopts no job of another kind as; a check all the same).
          local _
          _, _, _, run_ns, tail = job_parse(redis.call('HGET', KEYS[1], id))
          r = rec_of(tail)
          payload = redis.call('HGET', KEYS[2], id)
          if left ~= nil and left[r.kind] == nil then id = nil end
        end
      end
      if not state then
        -- An index entry of no pending or running job (see the header): dropped.
        redis.call('ZREM', from[i], due_id)
      elseif not id then
        -- A series' head that was superseded (deleted) or awaits its list: not delivered.
      else
        if state == 'r' then
          expired[#expired + 1] = id
          expired[#expired + 1] = 'lease expired'
        end
        if attempt >= r.max then
          -- A gated job's death frees what it held of its gate: a slot (running) or its
          -- admission (pending).
          local gid = job_gate(tail)
          if gid then
            if state == 'p' then gate_drop(G, gid, id, run_ns, r.p) else gate_stop(G, gid) end
          end
          if waits == nil then waits = next_any(N) end
          local succ = waits and redis.call('HGET', N.next, id)
          died[#died + 1] = id
          if state == 'p' then
            r.due_rems[#r.due_rems + 1] = id
          else
            r.run_rems[#r.run_rems + 1] = id
          end
          if succ then
            handed[#handed + 1] = id
            handed[#handed + 1] = succ
            if state == 'p' then
              r.handed_p = r.handed_p + 1
            else
              r.handed_r = r.handed_r + 1
            end
          else
            meta_writes[#meta_writes + 1] = id
            meta_writes[#meta_writes + 1] = 'd:' .. attempt .. ':0:' .. run_ns .. tail
            g_push(died_scores, dead_key(KEYS[6], r.kind), now, id)
            if state == 'p' then
              r.died_p = r.died_p + 1
            else
              r.died_r = r.died_r + 1
            end
          end
        else
          attempt = attempt + 1
          token = token + 1
          meta_writes[#meta_writes + 1] = id
          meta_writes[#meta_writes + 1] = 'r:' .. attempt .. ':' .. token .. ':' .. run_ns .. tail
          local leases = r.leases
          leases[#leases + 1] = now + r.lease
          leases[#leases + 1] = id
          taken[id] = true
          if state == 'p' then
            r.due_rems[#r.due_rems + 1] = id
            r.leased = r.leased + 1
            -- A start of its gate (an expired lease's redelivery is none).
            local gid = job_gate(tail)
            if gid then gate_start(G, gid, id, run_ns, r.p) end
          end
          if tail == '' then tail = plain end
          out[#out + 1] = id
          out[#out + 1] = payload
          out[#out + 1] = attempt
          out[#out + 1] = run_ns
          out[#out + 1] = token
          if tail == sent then
            out[#out + 1] = ''
          elseif sent_at[tail] then
            out[#out + 1] = sent_at[tail]
            sent = tail
          else
            tails_sent = tails_sent + 1
            sent_at[tail] = tails_sent
            out[#out + 1] = tail
            sent = tail
          end
        end
      end
    end
    if #meta_writes > 0 then redis.call('HSET', KEYS[1], unpack(meta_writes)) end
    if #expired > 0 then redis.call('HSET', KEYS[10], unpack(expired)) end
    for _, r in ipairs(order) do
      if #r.due_rems > 0 then redis.call('ZREM', r.due, unpack(r.due_rems)) end
      if #r.run_rems > 0 then redis.call('ZREM', r.running, unpack(r.run_rems)) end
      if #r.leases > 0 then
        if not pinned[r.running] then
          pinned[r.running] = true
          redis.call('ZADD', r.running, '+inf', RUNNING_PIN, unpack(r.leases))
          -- A running set not listed in levels (this claim created it, or a hand edit
          -- dropped its name): noted there, and its lease ends count in the next due time.
          -- (One listed was read from levels after the acks: its name is there.)
          if not listed[r.running] then
            running_note(KEYS[12], r.kind)
            listed[r.running] = true
            runs[#runs + 1] = r.running
          end
        else
          redis.call('ZADD', r.running, unpack(r.leases))
        end
      end
      tally(counted, 'pending', r.kind, -(r.leased + r.died_p + r.handed_p))
      tally(counted, 'running', r.kind, r.leased - r.died_r - r.handed_r)
      tally(counted, 'dead', r.kind, r.died_p + r.died_r)
    end
    out[4] = #died
    g_run(died_scores, 'ZADD')
    -- After the killed jobs left their due and running sets: a successor may go to the due
    -- set its job was in. The job's last error (errors) stays, the successor's.
    local handed_due = {}
    for i = 1, #handed, 2 do
      local key, score = next_handover(N, handed[i], handed[i + 1], nil, counted)
      if key and (not handed_due[key] or score < handed_due[key]) then handed_due[key] = score end
    end
    for _, r in ipairs(order) do
      if r.died_p + r.died_r > 0 then dead_note(KEYS[12], r.kind) end
    end
    for _, r in ipairs(order) do
      if #r.due_rems > 0 and not kept[r.due] then level_tidy(KEYS[12], KEYS[3], r.p, r.kind) end
      if #r.run_rems > 0 then running_tidy(KEYS[12], KEYS[11], r.kind) end
    end
    if #handed > 0 then next_wake(N, handed_due) end
  end
  finish(pinned)
  -- The gates this claim touched rebalance: jobs admitted now are due at the earliest of
  -- their run_ats (maybe in a level this claim did not read).
  local promoted = gate_flush(G)
  -- The next due time among the claimed kinds: the first of their due heads and lease ends,
  -- and of the gates' timers (a rate window's end admits jobs: gates.lua).
  local head = nil
  if promoted then head = string.format('%.0f', promoted) end
  local function sooner(key)
    -- A head at or before now is as good as the first: every caller takes a past due time
    -- as now (a job due at once), so the rest are not read.
    if head and tonumber(head) <= now then return end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[1] and first[1] ~= RUNNING_PIN
      and (not head or tonumber(first[2]) < tonumber(head)) then
      head = first[2]
    end
  end
  for _, p in ipairs(prios) do
    for _, key in ipairs(groups[p]) do sooner(key) end
  end
  for _, key in ipairs(runs) do sooner(key) end
  -- The gates' first timer, read once at the claim's start unless a rebalance moved one.
  local timer = gate_timers_head(G)
  if timer and (not head or tonumber(timer) < tonumber(head)) then head = timer end
  if head then out[2] = head end
  return out
end)
if ok then return res end
if not finished then
  tally_flush(KEYS[4], acks_counted)
  for kind in pairs(later.tidy) do running_tidy(KEYS[12], KEYS[11], kind) end
end
-- The server's pcall gives a command's error as its text ("NOPERM ...", "WRONGTYPE ..."):
-- raised as a table again, so the reply keeps its code (a text would be an ERR); a Lua
-- error ("user_script:9: ...") is raised as it was.
if type(res) == 'string' and string.find(res, '^%u[%u%d_]* ') then error({err = res}, 0) end
error(res, 0)
