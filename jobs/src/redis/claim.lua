-- claim.lua: lease up to ARGV[1] due jobs (redelivering expired leases, killing jobs out of
-- attempts) and report the server's time and the next due time.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- KEYS[5] seq     string  lease token counter (INCR: a token is never handed out twice)
-- KEYS[6] dead    zset    dead ids, score 0
-- ARGV[1] max jobs, ARGV[2] lease in microseconds, ARGV[3] max attempts
--
-- Returns {now_us, next_due_us ("" if none), then per delivered job: id, payload, attempt,
-- run_at_ns, token}. The range read has a LIMIT, so a claim's cost is bounded whatever the
-- backlog. Atomic: two consumers never lease the same job, and "now" is the server's TIME,
-- so clients with skewed clocks neither deliver early nor late.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = tonumber(ARGV[2])
local max_attempts = tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local out = {now, ''}
for _, id in ipairs(ids) do
  local meta = redis.call('HGET', KEYS[1], id)
  local state, attempt, _, run_ns = string.match(meta, '^(%a):(%d+):(%d+):(%d+)$')
  attempt = tonumber(attempt)
  local from = (state == 'p') and 'pending' or 'leased'
  if attempt >= max_attempts then
    redis.call('HSET', KEYS[1], id, 'd:' .. attempt .. ':0:' .. run_ns)
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZADD', KEYS[6], 0, id)
    redis.call('HINCRBY', KEYS[4], from, -1)
    redis.call('HINCRBY', KEYS[4], 'dead', 1)
  else
    attempt = attempt + 1
    local token = redis.call('INCR', KEYS[5])
    redis.call('HSET', KEYS[1], id, 'l:' .. attempt .. ':' .. token .. ':' .. run_ns)
    redis.call('ZADD', KEYS[3], now + lease, id)
    if from == 'pending' then
      redis.call('HINCRBY', KEYS[4], 'pending', -1)
      redis.call('HINCRBY', KEYS[4], 'leased', 1)
    end
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', KEYS[2], id)
    out[#out + 1] = attempt
    out[#out + 1] = run_ns
    out[#out + 1] = token
  end
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if head[2] then out[2] = head[2] end
return out
