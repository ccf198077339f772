-- counts.lua: one partition's jobs per state, its paused flag and its next pending run_at.
--
-- KEYS[1] meta, KEYS[2] due, KEYS[3] counts (see schedule.lua)
--
-- Returns {pending, running, dead, paused (1|0), next pending run_at_ns or ""}. The numbers
-- are the counters every script keeps in `counts`, never a scan; the next run_at is that
-- of the due index's first entry (it holds pending jobs only). A script so that all of it
-- is one moment.
local c = redis.call('HMGET', KEYS[3], 'pending', 'running', 'dead', 'paused')
local out = {tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0, c[4] and 1 or 0, ''}
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if first then
  local run_ns = string.match(redis.call('HGET', KEYS[1], first) or '', '^p:%d+:%d+:(%d+)$')
  if run_ns then out[5] = run_ns end
end
return out
