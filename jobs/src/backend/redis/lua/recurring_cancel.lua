-- recurring_cancel.lua: delete a recurring series and its pending occurrence.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- KEYS[5] series, KEYS[6] series_payload, KEYS[7] series_next (see series.lua, prepended),
-- KEYS[8] levels (see kinds.lua, prepended)
-- ARGV[1] name
--
-- Returns 1 if the series existed. Atomic with claims: either the head was claimed first
-- (it runs; its successor is deleted here) or it is deleted here and never delivered.
local S = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], counts = KEYS[4], levels = KEYS[8],
           series = KEYS[5], series_payload = KEYS[6], series_next = KEYS[7]}
local s = series_get(S, ARGV[1])
if not s then return 0 end
if s.head_text ~= '' then series_drop(S, ARGV[1] .. '@' .. s.head_text) end
redis.call('HDEL', S.series, ARGV[1])
redis.call('HDEL', S.series_payload, ARGV[1])
redis.call('HDEL', S.series_next, ARGV[1])
return 1
