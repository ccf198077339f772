-- recurring_set.lua: create a recurring series, or replace its recurrence, payload, catch-up
-- policy, spec and pending occurrence (series.lua, prepended, has the record's layout).
-- Given the same recurrence, the pending occurrence stays (with the new payload and spec:
-- moved to its new level's due set and kind's counters) and ARGV[5] is unused; given
-- another, an old pending occurrence already due may stay as an ordinary job
-- (jobs/src/series.rs `keeps_due_head`) and the new head is placed from ARGV[5].
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- KEYS[5] series, KEYS[6] series_payload, KEYS[7] series_next (see series.lua, prepended),
-- KEYS[8] levels (see kinds.lua, prepended)
-- KEYS[9] seq (the version counter, shared with lease tokens: every value is new)
-- ARGV[1] name, ARGV[2] the recurrence's text, ARGV[3] runs (catch-up), ARGV[4] payload,
-- ARGV[5] "ns=text,..." the first occurrences after the server time Rust read, the head
-- first, ARGV[6] wake channel, ARGV[7] 'PUBLISH' | 'SPUBLISH' (as schedule.lua), ARGV[8]
-- the spec tail of its occurrences (kinds.lua, `scripts::spec_tail`: no key, no hold-off);
-- absent or "" (a caller from before series had a spec), the series is stored without
-- one: of the queue's plain spec
--
-- Returns {created (1|0), head_ns ("" if none), last_ns ("" if none)}: head_ns is empty
-- too if every entry was at or before the series' last delivery (the server's clock went
-- back; Rust sends a list after last_ns). The head is the first entry after the script's
-- own TIME (a claim may have moved the series since Rust read the time), or if none is,
-- the first after the last delivery. Atomic: the old head goes and the new one comes in
-- one step, so no claim ever sees the series with two pending occurrences or none.
local S = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], counts = KEYS[4], levels = KEYS[8],
           series = KEYS[5], series_payload = KEYS[6], series_next = KEYS[7]}
local name = ARGV[1]
local old = series_get(S, name)
local tail = ARGV[8]
if tail == '' then tail = nil end
local s = {version = redis.call('INCR', KEYS[9]), runs = ARGV[3], last_ns = '', rule = ARGV[2],
           tail = tail}
local t = redis.call('TIME')
local now_ns = t[1] .. string.format('%06d', tonumber(t[2])) .. '000'
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', S.series_payload, name, ARGV[4])
if old then
  s.last_ns = old.last_ns
  if old.head_text ~= '' then
    local id = name .. '@' .. old.head_text
    local meta = redis.call('HGET', S.meta, id)
    if old.rule == ARGV[2] and meta and string.sub(meta, 1, 4) == 'p:0:' then
      -- The same recurrence: the head stays (its claim decides any catch-up), with the
      -- new payload and spec; its list of next occurrences is still right.
      redis.call('HSET', S.payload, id, ARGV[4])
      local score, key, moved = series_respec(S, id, meta, tail or '')
      s.head_ns, s.head_text = old.head_ns, old.head_text
      series_put(S, name, s)
      -- Maybe the first due of the level it moved to.
      if moved and is_head(key, score) then
        redis.call(ARGV[7], ARGV[6], string.format('%.0f', score))
      end
      return {0, s.head_ns, s.last_ns}
    end
    -- Another recurrence: an old head already due runs (left pending, an ordinary job)
    -- unless the old policy is None and its successor is due too (series.rs's
    -- `keeps_due_head`); a list with no successor is a recurrence at its end.
    local _, next_list = series_next_of(S, name)
    local successor = next_list[1]
    local keep = old.rule ~= ARGV[2] and series_score(old.head_ns) <= now_us and
      (old.runs > 0 or not successor or series_score(successor[1]) > now_us)
    if not keep then series_drop(S, id) end
  end
end
local list = series_list(ARGV[5])
local from = 1
while from <= #list and not series_later(list[from][1], now_ns) do from = from + 1 end
if from > #list then from = 1 end
local score = series_place(S, name, s, list, from, ARGV[4], 0)
if score then
  local p, kind = job_level(tail or '')
  if is_head(due_key(KEYS[3], p, kind), score) then
    redis.call(ARGV[7], ARGV[6], string.format('%.0f', score))
  end
end
local created = 1
if old then created = 0 end
return {created, s.head_ns, s.last_ns}
