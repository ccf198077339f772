-- claim.lua: lease up to ARGV[1] due jobs (redelivering expired leases, killing jobs out of
-- attempts) and report the server's time and the next due time.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua; its field
-- `paused`, set by pause.lua, stops every claim: nothing leased, nothing reported due)
-- KEYS[5] seq     string  lease token counter (INCRBY: a token is never handed out twice)
-- KEYS[6] dead    zset    dead ids scored by the death time in microseconds (server TIME;
--                         0 for jobs that died before this score was kept: the oldest)
-- KEYS[7] series, KEYS[8] series_payload, KEYS[9] series_next (see series.lua, prepended)
-- KEYS[10] errors hash    id -> the job's last error (a failure's message, or "lease
--                         expired", which a claim records for a job whose lease ended)
-- KEYS[11] running zset   running ids scored by their lease end in microseconds, as in due
--                         (the running jobs alone, to list them)
-- ARGV[1] max jobs (at most 512), ARGV[2] lease in microseconds, ARGV[3] max attempts
--
-- Returns {now_us, next_due_us ("" if none), notes, how many jobs it killed, then per
-- delivered job: id, payload, attempt, run_at_ns, token}; notes are series.lua's {name, 'low' | 'dry', version,
-- head_ns, runs, rule}. The first claim of a recurring series' head creates its next
-- occurrence here (series_due), so claiming one and creating the next are one step. The range read has a LIMIT, so a claim's cost is bounded whatever the
-- backlog. Atomic: two consumers never lease the same job, and "now" is the server's TIME,
-- so clients with skewed clocks neither deliver early nor late. One HMGET each for the
-- states and payloads, one INCRBY for a block of tokens, then one write per structure.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = tonumber(ARGV[2])
local max_attempts = tonumber(ARGV[3])
if redis.call('HEXISTS', KEYS[4], 'paused') == 1 then return {now, '', {}, 0} end
local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local S = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], counts = KEYS[4],
           series = KEYS[7], series_payload = KEYS[8], series_next = KEYS[9]}
local notes = {}
local out = {now, '', notes, 0}
if #ids > 0 then
  local metas = redis.call('HMGET', KEYS[1], unpack(ids))
  local jobs = {}
  local leasing = 0
  for i, id in ipairs(ids) do
    local state, attempt, _, run_ns = string.match(metas[i], '^(%a):(%d+):(%d+):(%d+)$')
    attempt = tonumber(attempt)
    jobs[i] = {state, attempt, run_ns}
    if attempt < max_attempts then leasing = leasing + 1 end
  end
  local token = 0
  if leasing > 0 then token = redis.call('INCRBY', KEYS[5], leasing) - leasing end
  local payloads = redis.call('HMGET', KEYS[2], unpack(ids))
  local meta_writes = {}
  local leases = {}
  local died = {}
  local died_scores = {}
  local expired = {}
  local stopped = {}
  local from_pending, died_pending, died_leased = 0, 0, 0
  for i, id in ipairs(ids) do
    local state, attempt, run_ns = jobs[i][1], jobs[i][2], jobs[i][3]
    if attempt == 0 and string.find(id, '@', 1, true) and not series_due(S, id, now, notes) then
      -- A series' head that was superseded (deleted) or awaits its list: not delivered.
    elseif attempt >= max_attempts then
      if state == 'l' then
        expired[#expired + 1] = id
        expired[#expired + 1] = 'lease expired'
      end
      meta_writes[#meta_writes + 1] = id
      meta_writes[#meta_writes + 1] = 'd:' .. attempt .. ':0:' .. run_ns
      died[#died + 1] = id
      died_scores[#died_scores + 1] = now
      died_scores[#died_scores + 1] = id
      if state == 'p' then
        died_pending = died_pending + 1
      else
        died_leased = died_leased + 1
        stopped[#stopped + 1] = id
      end
    else
      if state == 'l' then
        expired[#expired + 1] = id
        expired[#expired + 1] = 'lease expired'
      end
      attempt = attempt + 1
      token = token + 1
      meta_writes[#meta_writes + 1] = id
      meta_writes[#meta_writes + 1] = 'l:' .. attempt .. ':' .. token .. ':' .. run_ns
      leases[#leases + 1] = now + lease
      leases[#leases + 1] = id
      if state == 'p' then from_pending = from_pending + 1 end
      out[#out + 1] = id
      out[#out + 1] = payloads[i]
      out[#out + 1] = attempt
      out[#out + 1] = run_ns
      out[#out + 1] = token
    end
  end
  if #meta_writes > 0 then redis.call('HSET', KEYS[1], unpack(meta_writes)) end
  if #expired > 0 then redis.call('HSET', KEYS[10], unpack(expired)) end
  if #leases > 0 then redis.call('ZADD', KEYS[3], unpack(leases)) end
  if #leases > 0 then redis.call('ZADD', KEYS[11], unpack(leases)) end
  if #stopped > 0 then redis.call('ZREM', KEYS[11], unpack(stopped)) end
  out[4] = #died
  if #died > 0 then
    redis.call('ZREM', KEYS[3], unpack(died))
    redis.call('ZADD', KEYS[6], unpack(died_scores))
    redis.call('HINCRBY', KEYS[4], 'dead', #died)
  end
  if from_pending + died_pending > 0 then
    redis.call('HINCRBY', KEYS[4], 'pending', -(from_pending + died_pending))
  end
  if from_pending - died_leased ~= 0 then
    redis.call('HINCRBY', KEYS[4], 'leased', from_pending - died_leased)
  end
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if head[2] then out[2] = head[2] end
return out
