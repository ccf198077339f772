-- counts.lua: one partition's jobs per state (in all and per kind), its paused flag and its
-- next pending run_at.
--
-- KEYS[1] meta, KEYS[2] due, KEYS[3] counts, KEYS[4] levels (see schedule.lua, kinds.lua)
--
-- Returns {pending, running, dead, paused (1|0), next pending run_at_ns or "", then pairs
-- "<state>:<kind>", count: each kind's counters but those of kind "" (the totals less the
-- others', kinds.lua)}. The numbers are the counters every script keeps in `counts`, never
-- a scan (one field per kind in use and state); the next run_at is that of the first entry
-- among the due sets' heads (one per level in use: they hold pending jobs only). A script so
-- that all of it is one moment.
local c = redis.call('HMGET', KEYS[3], 'pending', 'running', 'dead', 'paused')
local out = {tonumber(c[1]) or 0, tonumber(c[2]) or 0, tonumber(c[3]) or 0, c[4] and 1 or 0, ''}
local first, score = nil, nil
local function sooner(key)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if head[1] and (not score or tonumber(head[2]) < score) then
    first, score = head[1], tonumber(head[2])
  end
end
sooner(KEYS[2])
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', 1000)) do
  local p, kind = string.match(m, '^d:(%-?%d+):(.*)$')
  if p then sooner(KEYS[2] .. ':' .. p .. ':' .. kind) end
end
if first then
  local state, _, _, run_ns = string.match(redis.call('HGET', KEYS[1], first) or '', '^(%a):(%d+):(%d+):(%d+)')
  if state == 'p' then out[5] = run_ns end
end
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  if string.find(all[i], ':', 1, true) then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
