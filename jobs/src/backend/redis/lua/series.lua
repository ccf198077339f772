-- series.lua: recurring series, the rules of jobs/src/series.rs written out in Lua. Not a
-- script of its own: its functions are prepended to claim.lua, recurring_set.lua,
-- recurring_fill.lua, recurring_cancel.lua, cancel.lua and reschedule.lua, which pass their
-- keys in a table S (meta, payload, due, counts, levels: see schedule.lua; series,
-- series_payload, series_next below; cancel.lua and reschedule.lua only read S.series).
-- kinds.lua is prepended before it. An occurrence is stored with the series' spec tail
-- (kinds.lua's layout: no key, no hold-off), so it lives in the due set of the series'
-- priority and kind and counts as a pending job of its kind; one of a series stored
-- without a spec (a record written before series had one) is stored without a tail (the
-- queue's plain spec), in the plain due set.
--
-- Mirrors jobs/src/series.rs: `series_due` is `on_due` (the catch-up at a head's first
-- claim), recurring_set.lua's kept head is `keeps_due_head`. The recurring suite
-- (jobs/tests/it/recurring.rs) runs the same cases on the embedded store, which calls the
-- Rust, and on Redis, which runs this.
--
-- S.series         hash  name -> "version|runs|head_ns|head_text|last_ns|tail\31|rule"
--                        (head empty when the recurrence has no occurrence left, last_ns
--                        empty before the first delivery; version from the seq counter, new
--                        at every set, so a fill computed for an older series never
--                        applies; tail the spec tail of its occurrences, which starts with
--                        ':' and ends with the byte 0x1f and the kind, closed by another
--                        0x1f, which no kind holds: the kind may hold '|'). A record
--                        without "tail\31|" (written before series had a spec; no rule
--                        text starts with ':') is of the queue's plain spec, and keeps that
--                        layout until set again.
-- S.series_payload hash  name -> payload of every occurrence
-- S.series_next    hash  name -> "ns=text,ns=text,..." the occurrences after the head, in
--                        order, computed in Rust (Lua knows no cron nor zones) by set and
--                        fill; the claim of the head pops from it. At most about 64 (Rust's
--                        `upcoming`). After a dry note it starts "!go;": the head and the
--                        go - 1 occurrences after it are due and run without counting (the
--                        fill decided their catch-up; the list alone cannot tell).
--
-- The head is an ordinary pending job, id name .. '@' .. head_text, run_at head_ns.

local SERIES_LOW = 8

-- ceil(ns / 1000) from the decimal text, exactly (ns does not fit a double).
local function series_score(ns)
  local us = tonumber(string.sub(ns, 1, -4))
  if string.sub(ns, -3) ~= '000' then us = us + 1 end
  return us
end

-- Whether the decimal time `a` is later than `b` (texts without leading zeros; a double
-- would round them).
local function series_later(a, b)
  return #a > #b or (#a == #b and a > b)
end

-- A series' record, decoded; `tail` is nil for a record without a spec (the plain one).
local function series_get(S, name)
  local rec = redis.call('HGET', S.series, name)
  if not rec then return nil end
  local version, runs, head_ns, head_text, last_ns, tail, rule =
    string.match(rec, '^(%d+)|(%d+)|(%d*)|([^|]*)|(%d*)|(:[^\31]*\31[^\31]*)\31|(.*)$')
  if not version then
    version, runs, head_ns, head_text, last_ns, rule =
      string.match(rec, '^(%d+)|(%d+)|(%d*)|([^|]*)|(%d*)|(.*)$')
  end
  return {version = version, runs = tonumber(runs), head_ns = head_ns,
          head_text = head_text, last_ns = last_ns, tail = tail, rule = rule}
end

local function series_put(S, name, s)
  local spec = ''
  if s.tail then spec = s.tail .. '\31|' end
  redis.call('HSET', S.series, name, s.version .. '|' .. s.runs .. '|' .. s.head_ns .. '|' ..
    s.head_text .. '|' .. s.last_ns .. '|' .. spec .. s.rule)
end

-- Whether `id` is the pending occurrence of its series, which cancel.lua and
-- reschedule.lua leave alone (the series would have none, or an occurrence out of turn).
local function series_is_head(S, id)
  local name = string.match(id, '^([^@]+)@')
  if not name then return false end
  local s = series_get(S, name)
  return s ~= nil and s.head_text ~= '' and name .. '@' .. s.head_text == id
end

local function series_list(text)
  local list = {}
  for ns, t in string.gmatch(text or '', '(%d+)=([^,]+)') do list[#list + 1] = {ns, t} end
  return list
end

-- The series' stored next occurrences: (go, list).
local function series_next_of(S, name)
  local text = redis.call('HGET', S.series_next, name) or ''
  local go, rest = string.match(text, '^!(%d+);(.*)$')
  if go then return tonumber(go), series_list(rest) end
  return 0, series_list(text)
end

-- Stores `list` from `from` on as the series' next occurrences, `go` of its head's run
-- without counting.
local function series_put_next(S, name, go, list, from)
  local rest = {}
  for j = from, #list do rest[#rest + 1] = list[j][1] .. '=' .. list[j][2] end
  local prefix = ''
  if go > 0 then prefix = '!' .. go .. ';' end
  redis.call('HSET', S.series_next, name, prefix .. table.concat(rest, ','))
end

-- Whether a spec tail's key has a limit or a rate (a gated job: gates.lua's `job_gate`,
-- written inline since series.lua also goes where gates.lua does not, the recurring
-- scripts). A series never adopts one: its gate would not know the job as its head, and
-- the recurring scripts cannot keep a gate.
local function series_gated(tail)
  local lim, rs = string.match(tail or '', '\30(%d+):(%d+):')
  return lim ~= nil and (lim ~= '0' or rs ~= '0')
end

-- Gives the pending head `id` (meta `meta`, not gated) the spec tail `tail` (a series set
-- again with its recurrence kept): a job whose spec changed, moved to the due set of its
-- new level and counted pending of its new kind. Returns the head's score, its due set,
-- and whether it moved to that set.
local function series_respec(S, id, meta, tail)
  local state, attempt, token, run_ns, old = job_parse(meta)
  local p, kind = job_level(tail)
  local key = due_key(S.due, p, kind)
  local old_p, old_kind = job_level(old)
  local old_key = due_key(S.due, old_p, old_kind)
  -- As every script scores a run_at (schedule.lua: ceil(ns / 1000)).
  local score = series_score(run_ns)
  if old == tail then return score, key, false end
  redis.call('HSET', S.meta, id, state .. ':' .. attempt .. ':' .. token .. ':' .. run_ns .. tail)
  if old_key ~= key then
    redis.call('ZREM', old_key, id)
    redis.call('ZADD', key, score, id)
    level_note(S.levels, p, kind)
    level_tidy(S.levels, S.due, old_p, old_kind)
    local counted = {}
    tally(counted, 'pending', old_kind, -1)
    tally(counted, 'pending', kind, 1)
    tally_flush(S.counts, counted)
  end
  return score, key, old_key ~= key
end

-- Deletes the job `id` if it is pending (a series' head that is replaced or cancelled).
-- A gated job is never a head (`series_place`); one is left alone, as its own job, rather
-- than leave its gate's members behind.
local function series_drop(S, id)
  local state, _, _, _, tail = job_parse(redis.call('HGET', S.meta, id))
  if state == 'p' and not series_gated(tail) then
    -- Its own level and counters: the series' spec's, or an adopted job's.
    local p, kind = job_level(tail)
    redis.call('HDEL', S.meta, id)
    redis.call('HDEL', S.payload, id)
    redis.call('ZREM', due_key(S.due, p, kind), id)
    local counted = {}
    tally(counted, 'pending', kind, -1)
    tally_flush(S.counts, counted)
    level_tidy(S.levels, S.due, p, kind)
  end
end

-- Whether the pending job of spec tail `tail` may be adopted as a head of `s`: of the
-- series' priority and kind (a head is claimed by the consumers of its kind: one of
-- another would hand the series' occurrences to those of that kind), and with no key (a
-- gated job's gate admits and counts it, which a head would bypass, `series_gated`; a
-- series' own occurrences have none).
local function series_adopts(s, tail)
  local p, kind = job_level(tail or '')
  local sp, skind = job_level(s.tail or '')
  return p == sp and kind == skind and not string.find(tail or '', '\30', 1, true)
end

-- Makes the first entry of `list` from `from` after the series' last delivered occurrence
-- whose id is free (or a never-delivered pending job's of the series' level, attempt 0,
-- without a key: `series_adopts`) the head of `s`: creates its job with `payload` and the
-- series' spec tail, in its level's due set, counted pending of its kind. Writes the rest
-- of the list after it and the record. Returns the head's score, or nil if the list held
-- none (head left empty). `go`: of list[from] and after, how many run without counting (0
-- for none), less those passed over.
local function series_place(S, name, s, list, from, payload, go)
  local i = from
  while i <= #list do
    local id = name .. '@' .. list[i][2]
    -- Only after the last delivery: a list computed before a claim moved the series may
    -- hold that occurrence, whose job may be acked and gone (a free id proves nothing).
    local later = s.last_ns == '' or series_later(list[i][1], s.last_ns)
    local meta = later and redis.call('HGET', S.meta, id)
    if later and not meta then
      local tail = s.tail or ''
      local p, kind = job_level(tail)
      redis.call('HSET', S.meta, id, 'p:0:0:' .. list[i][1] .. tail)
      redis.call('HSET', S.payload, id, payload)
      redis.call('ZADD', due_key(S.due, p, kind), series_score(list[i][1]), id)
      level_note(S.levels, p, kind)
      local counted = {}
      tally(counted, 'pending', kind, 1)
      tally_flush(S.counts, counted)
      break
    end
    -- A never-delivered pending job (attempt 0) becomes the head as it is. Any other (a
    -- job of that id delivered already, running or retrying) is never made twice, and its
    -- claims are no first claims that could move the series: the next time instead. So is
    -- one the claim running this leased already (`S.taken`): its meta is written at the
    -- claim's end and still reads pending here.
    -- Only a job of the series' level, in the due set of its occurrences, and without a
    -- key (`series_adopts`).
    local taken = S.taken and S.taken[id]
    if later and not taken and string.sub(meta, 1, 4) == 'p:0:' then
      local _, _, _, _, tail = job_parse(meta)
      if series_adopts(s, tail) then break end
    end
    i = i + 1
  end
  series_put_next(S, name, math.max((go or 0) - (i - from), 0), list, i + 1)
  if i <= #list then
    s.head_ns, s.head_text = list[i][1], list[i][2]
  else
    s.head_ns, s.head_text = '', ''
  end
  series_put(S, name, s)
  if i <= #list then return series_score(list[i][1]) end
  return nil
end

-- The first claim of the pending job `id` at `now` (microseconds): if it is the head of its
-- series, moves the head by series.rs's `on_due`, its later occurrences read from the list.
-- Returns the id to deliver: `id`, or a later occurrence that superseded it (`id` deleted)
-- and is due too, made (or adopted) pending here and delivered by this claim: left for a
-- later claim, it could be superseded in turn whenever claims come further apart than the
-- interval, forever. Returns nil to deliver nothing: superseded by one not yet due, or the
-- list ran out before `now` (left pending, for Rust to decide: noted in `notes`). Also
-- notes a list running low, for Rust to top up.
local function series_due(S, id, now, notes)
  local name = string.match(id, '^([^@]+)@')
  if not name then return id end
  local s = series_get(S, name)
  if not s or s.head_text == '' or name .. '@' .. s.head_text ~= id then return id end
  local go, list = series_next_of(S, name)
  local payload = redis.call('HGET', S.series_payload, name)
  if go > 0 then
    -- Decided by the fill after a dry note: this head runs, and go - 1 after it.
    s.last_ns = s.head_ns
    series_place(S, name, s, list, 1, payload, go - 1)
    if #list < SERIES_LOW then
      notes[#notes + 1] = {name, 'low', s.version, s.head_ns, s.runs, s.rule}
    end
    return id
  end
  local due = 0
  while due < #list and series_score(list[due + 1][1]) <= now do due = due + 1 end
  if due == #list then
    notes[#notes + 1] = {name, 'dry', s.version, s.head_ns, s.runs, s.rule}
    return nil
  end
  -- `due` later occurrences are due too; the head and they are the missed ones.
  local deliver, to = true, 1
  if due > 0 and s.runs == 0 then
    -- None: the first at or after now.
    deliver, to = false, due + 1
    if list[due][1] == string.format('%.0f', now) .. '000' then to = due end
  elseif due + 1 > s.runs and due > 0 then
    -- More than `runs` due: the oldest of the `runs` most recent.
    deliver, to = false, due + 1 - s.runs
  end
  if deliver then
    s.last_ns = s.head_ns
  else
    series_drop(S, id)
  end
  local score = series_place(S, name, s, list, to, payload, 0)
  if not deliver and score and score <= now then
    -- Within the policy's count, so its own step delivers it: at most one more round.
    return series_due(S, name .. '@' .. s.head_text, now, notes)
  end
  if #list - to < SERIES_LOW then
    notes[#notes + 1] = {name, 'low', s.version, s.head_ns, s.runs, s.rule}
  end
  if deliver then return id end
  return nil
end
