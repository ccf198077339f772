-- ack.lua: leased jobs are done: delete them (many acks batched in one call).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua)
-- ARGV pairs: id, lease token
--
-- Returns one 1|0 per pair: 1 if the lease was held (the job is gone), 0 if the token is
-- stale (redelivered to someone else, or gone): then nothing changes for that job. Atomic
-- with claim, so a late ack can never delete a job another consumer now holds (the
-- duplicate-run bug of bullmq#3183).
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local meta = redis.call('HGET', KEYS[1], id)
  local done = 0
  if meta then
    local state, token = string.match(meta, '^(%a):%d+:(%d+):')
    if state == 'l' and token == ARGV[i + 1] then
      redis.call('HDEL', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      redis.call('HINCRBY', KEYS[4], 'leased', -1)
      done = 1
    end
  end
  out[#out + 1] = done
end
return out
