-- counts.lua: one partition's jobs per state, its paused flag and its next pending run_at.
--
-- KEYS[1] meta, KEYS[2] due, KEYS[3] counts (see schedule.lua)
--
-- Returns {pending, running, dead, paused (1|0), next pending run_at_ns or ""}. The numbers
-- are the counters every script keeps in `counts`, never a scan; the next run_at is the
-- first pending entry of the due index, which holds pending jobs only, but for what an
-- older version left there (running jobs' lease ends, and those jobs once acked: see
-- claim.lua), read past 16 at a time. A script so that all of it is one moment.
local c = redis.call('HMGET', KEYS[3], 'pending', 'leased', 'dead', 'paused')
local out = {tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0, c[4] and 1 or 0, ''}
local from = 0
while true do
  local ids = redis.call('ZRANGE', KEYS[2], from, from + 15)
  if #ids == 0 then break end
  local metas = redis.call('HMGET', KEYS[1], unpack(ids))
  for i = 1, #ids do
    local state, run_ns = string.match(metas[i] or '', '^(%a):%d+:%d+:(%d+)$')
    if state == 'p' then
      out[5] = run_ns
      return out
    end
  end
  from = from + 16
end
return out
