-- ack.lua: leased jobs are done: delete them (many acks batched in one call).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] counts (see schedule.lua)
-- KEYS[4] errors, KEYS[5] running (see claim.lua: a running job is in running only; an
-- older version's lease also left in due is dropped by the claim that next reads it)
-- ARGV pairs: id, lease token (at most 512 pairs)
--
-- Returns one 1|0 per pair: 1 if the lease was held (the job is gone), 0 if the token is
-- stale (redelivered to someone else, or gone, or acked earlier in this batch): then
-- nothing changes for that job. Atomic with claim, so a late ack can never delete a job
-- another consumer now holds (the duplicate-run bug of bullmq#3183). One HMGET reads every
-- job, then one HDEL, HDEL, HDEL, ZREM and HINCRBY delete the done ones together.
local ids = {}
for i = 1, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local metas = redis.call('HMGET', KEYS[1], unpack(ids))
local out = {}
local done = {}
local seen = {}
for i, id in ipairs(ids) do
  local ok = 0
  local meta = metas[i]
  if meta and not seen[id] then
    local state, token = string.match(meta, '^(%a):%d+:(%d+):')
    if state == 'l' and token == ARGV[2 * i] then
      seen[id] = true
      done[#done + 1] = id
      ok = 1
    end
  end
  out[i] = ok
end
if #done > 0 then
  redis.call('HDEL', KEYS[1], unpack(done))
  redis.call('HDEL', KEYS[2], unpack(done))
  redis.call('HDEL', KEYS[4], unpack(done))
  redis.call('ZREM', KEYS[5], unpack(done))
  redis.call('HINCRBY', KEYS[3], 'leased', -#done)
end
return out
