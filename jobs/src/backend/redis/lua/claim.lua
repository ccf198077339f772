-- claim.lua: lease up to ARGV[1] due jobs and expired leases (redelivering them, killing
-- jobs out of attempts) and report the server's time and the next due time.
--
-- Mirrors core/state `Machine::claim` (attempts counted at claim; a job whose attempts reached
-- max_attempts dies instead) and `Machine::claim_error` ("lease expired" for a job taken from
-- an ended lease), checked on the same cases by backend/redis/agreement.rs; a series head's first
-- claim mirrors series.rs `on_due` (series.lua).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] due, KEYS[4] counts (see schedule.lua; its field
-- `paused`, set by pause.lua, stops every claim: nothing claimed, nothing reported due)
-- KEYS[5] seq     string  lease token counter (INCRBY: a token is never handed out twice)
-- KEYS[6] dead    zset    dead ids scored by the death time in microseconds (server TIME;
--                         0 for jobs that died before this score was kept: the oldest)
-- KEYS[7] series, KEYS[8] series_payload, KEYS[9] series_next (see series.lua, prepended)
-- KEYS[10] errors hash    id -> the job's last error (a failure's message, or "lease
--                         expired", which a claim records for a job whose lease ended)
-- KEYS[11] running zset   running ids scored by their lease end in microseconds; a running
--                         job is here only, not in due (one index per state, so a claim
--                         moves each job from due to running and an ack removes it from
--                         running: one sorted-set write each, as when due held both); and
--                         RUNNING_PIN, below, scored +inf
-- ARGV[1] max jobs (at most 512), ARGV[2] lease in microseconds, ARGV[3] max attempts,
-- then pairs id, lease token: the consumer's acks folded into this claim (at most 512
-- pairs), applied first exactly as ack.lua applies them (acks.lua, prepended), so a
-- steady consumer pays one request per job instead of a claim and an ack
--
-- Returns {now_us, next_due_us ("" if none), notes, how many jobs it killed, the folded
-- acks' answers (one 1|0 per pair, see acks.lua), then per delivered job: id, payload,
-- attempt, run_at_ns, token}; next_due_us is the first of due's
-- head and running's (a lease end wakes consumers too); notes are series.lua's {name,
-- 'low' | 'dry', version, head_ns, runs, rule}. The first claim of a recurring series' head
-- creates its next occurrence here (series_due), so claiming one and creating the next are
-- one step; a head superseded by a later occurrence that is due too is deleted and that
-- one leased instead. Expired leases and due jobs are taken together in score order; the range reads
-- have a LIMIT, so a claim's cost is bounded whatever the backlog. Atomic: two consumers
-- never lease the same job, and "now" is the server's TIME, so clients with skewed clocks
-- neither deliver early nor late. One HMGET each for the states and payloads, one INCRBY
-- for a block of tokens, then one write per structure.
--
-- An index entry whose job is gone or in another state is dropped when read: the scripts
-- never leave one, but a key edited by hand must not fail every claim.

-- Not a job (longer than any id, 256 bytes, and than zset-max-listpack-value): a member
-- that keeps the running set skiplist-encoded from the first lease on. A set this small
-- (a partition's running jobs, mostly under 128) is otherwise a listpack, in which a lease,
-- added at the tail (the latest end), costs a walk over every entry: 3 µs per job with 50
-- running, against 0.4 µs in a skiplist, the most of a claim and ack's index work.
local RUNNING_PIN = 'skiplist pin, not a job (see claim.lua) ' .. string.rep('=', 260)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease = tonumber(ARGV[2])
local max_attempts = tonumber(ARGV[3])
-- Before the pause check: a paused queue still takes acks.
local acked = apply_acks(KEYS[1], KEYS[2], KEYS[4], KEYS[10], KEYS[11], ARGV, 4)
if redis.call('HEXISTS', KEYS[4], 'paused') == 1 then return {now, '', {}, 0, acked} end
local max = tonumber(ARGV[1])
-- Expired leases are few: the common claim reads due alone, without scores.
local ids = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
if #ids == 0 then
  ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, max)
else
  -- Both in score order, merged (a job is in one of them only).
  local ended = ids
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max)
  local i, j = 1, 1
  ids = {}
  while #ids < max and (i <= #ended or j <= #due) do
    if j > #due or (i <= #ended and tonumber(ended[i + 1]) <= tonumber(due[j + 1])) then
      ids[#ids + 1], i = ended[i], i + 2
    else
      ids[#ids + 1], j = due[j], j + 2
    end
  end
end
-- The ids this claim leased so far: a series head superseded by a hand-made job of a later
-- occurrence adopts it, which the same batch may hold under its own entry too (either
-- first); its meta is written at the end, so without this it would be leased twice.
local taken = {}
local S = {meta = KEYS[1], payload = KEYS[2], due = KEYS[3], counts = KEYS[4],
           series = KEYS[7], series_payload = KEYS[8], series_next = KEYS[9], taken = taken}
local notes = {}
local out = {now, '', notes, 0, acked}
if #ids > 0 then
  local metas = redis.call('HMGET', KEYS[1], unpack(ids))
  local jobs = {}
  local leasing = 0
  for i, id in ipairs(ids) do
    local state, attempt, _, run_ns = string.match(metas[i] or '', '^([pr]):(%d+):(%d+):(%d+)$')
    attempt = tonumber(attempt)
    jobs[i] = {state, attempt, run_ns}
    if state and attempt < max_attempts then leasing = leasing + 1 end
  end
  local token = 0
  if leasing > 0 then token = redis.call('INCRBY', KEYS[5], leasing) - leasing end
  local payloads = redis.call('HMGET', KEYS[2], unpack(ids))
  local meta_writes = {}
  local leases = {'+inf', RUNNING_PIN}
  local leased = {}
  local stale = {}
  local died = {}
  local died_scores = {}
  local expired = {}
  local from_pending, died_pending, died_running = 0, 0, 0
  for i, due_id in ipairs(ids) do
    local id, state, attempt, run_ns = due_id, jobs[i][1], jobs[i][2], jobs[i][3]
    local payload = payloads[i]
    if taken[due_id] then
      -- Leased already by this claim, as the occurrence that superseded a series' head.
      id = nil
    elseif state and attempt == 0 and string.find(id, '@', 1, true) then
      id = series_due(S, id, now, notes)
      if id and id ~= due_id and taken[id] then
        id = nil
      elseif id and id ~= due_id then
        -- A later occurrence superseded this series head and runs instead: made pending
        -- just now (or adopted), it is leased like the head would have been.
        run_ns = string.match(redis.call('HGET', KEYS[1], id), '^p:0:%d+:(%d+)$')
        payload = redis.call('HGET', KEYS[2], id)
      end
    end
    if not state then
      -- An index entry of no pending or running job (see the header): dropped.
      stale[#stale + 1] = id
    elseif not id then
      -- A series' head that was superseded (deleted) or awaits its list: not delivered.
    elseif attempt >= max_attempts then
      if state == 'r' then
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
        died_running = died_running + 1
      end
    else
      if state == 'r' then
        expired[#expired + 1] = id
        expired[#expired + 1] = 'lease expired'
      end
      attempt = attempt + 1
      token = token + 1
      meta_writes[#meta_writes + 1] = id
      meta_writes[#meta_writes + 1] = 'r:' .. attempt .. ':' .. token .. ':' .. run_ns
      leases[#leases + 1] = now + lease
      leases[#leases + 1] = id
      leased[#leased + 1] = id
      taken[id] = true
      if state == 'p' then from_pending = from_pending + 1 end
      out[#out + 1] = id
      out[#out + 1] = payload
      out[#out + 1] = attempt
      out[#out + 1] = run_ns
      out[#out + 1] = token
    end
  end
  if #meta_writes > 0 then redis.call('HSET', KEYS[1], unpack(meta_writes)) end
  if #expired > 0 then redis.call('HSET', KEYS[10], unpack(expired)) end
  if #leased > 0 then
    redis.call('ZREM', KEYS[3], unpack(leased))
    redis.call('ZADD', KEYS[11], unpack(leases))
  end
  if #stale > 0 then
    redis.call('ZREM', KEYS[3], unpack(stale))
    redis.call('ZREM', KEYS[11], unpack(stale))
  end
  out[4] = #died
  if #died > 0 then
    redis.call('ZREM', KEYS[3], unpack(died))
    redis.call('ZREM', KEYS[11], unpack(died))
    redis.call('ZADD', KEYS[6], unpack(died_scores))
    redis.call('HINCRBY', KEYS[4], 'dead', #died)
  end
  if from_pending + died_pending > 0 then
    redis.call('HINCRBY', KEYS[4], 'pending', -(from_pending + died_pending))
  end
  if from_pending - died_running ~= 0 then
    redis.call('HINCRBY', KEYS[4], 'running', from_pending - died_running)
  end
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
local first = redis.call('ZRANGE', KEYS[11], 0, 0, 'WITHSCORES')
local lease_end = first[1] ~= RUNNING_PIN and first[2]
if lease_end and (not head or tonumber(lease_end) < tonumber(head)) then head = lease_end end
if head then out[2] = head end
return out
