-- recurring_fill.lua: give a series its next occurrences, computed in Rust after a claim
-- noted its list running low ('low': the head stays) or out ('dry': Rust decided the catch-up
-- with series.rs's `on_due` and the server's time, and the head may move).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- KEYS[5] series, KEYS[6] series_payload, KEYS[7] series_next (see series.lua, prepended),
-- KEYS[8] levels (see kinds.lua, prepended)
-- ARGV[1] name, ARGV[2] version, ARGV[3] head_ns the note saw ("" for none),
-- ARGV[4] "ns=text,..." the new head, then the occurrences after it, ARGV[5] go: how many
-- of them from the head run without counting (series.lua's "!go;"); or ARGV[5] 'detach'
-- (ARGV[4] empty): the recurrence no longer parses in Rust, and the series lets go of its
-- head, which stays pending and runs as an ordinary job (series.rs `unparsable`)
--
-- Returns 1 if applied, 0 if the series changed since the note (another claim moved the
-- head, or it was set or cancelled): a stale fill never applies. Atomic with every claim,
-- so the head moves in one step: the old one deleted if still pending, the new one created.
local S = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], counts = KEYS[4], levels = KEYS[8],
           series = KEYS[5], series_payload = KEYS[6], series_next = KEYS[7]}
local name = ARGV[1]
local s = series_get(S, name)
if not s or s.version ~= ARGV[2] or s.head_ns ~= ARGV[3] then return 0 end
if ARGV[5] == 'detach' then
  if s.head_ns ~= '' then s.last_ns = s.head_ns end
  s.head_ns, s.head_text = '', ''
  series_put(S, name, s)
  redis.call('HSET', S.series_next, name, '')
  return 1
end
local list = series_list(ARGV[4])
local go = tonumber(ARGV[5])
if s.head_text ~= '' then
  if #list > 0 and list[1][1] == s.head_ns then
    -- The head stays: only its list is new.
    series_put_next(S, name, go, list, 2)
    return 1
  end
  series_drop(S, name .. '@' .. s.head_text)
end
series_place(S, name, s, list, 1, redis.call('HGET', S.series_payload, name), go)
return 1
