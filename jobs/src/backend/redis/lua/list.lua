-- list.lua: a page of one partition's jobs in one state, after a position, in the state's
-- order: pending (from the due index) and running (from the running index) by (score, id)
-- ascending; dead (from the dead index) descending.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] errors (see schedule.lua, claim.lua)
-- KEYS[4] the state's index: due (pending), running or dead (see claim.lua)
-- ARGV[1] 'pending' | 'running' | 'dead', ARGV[2] how many jobs at most (at most 1,001)
-- ARGV[3] the position's score ("" for the first page), ARGV[4] the position's id
-- ARGV[5] '1' to return payloads, '0' for none ('' each: a listing that shows no payload
--         reads and sends none)
--
-- Returns per job: id, score, meta, last error (false if none), payload. The position is
-- found in O(log n) whatever is left of its job: entries with its score hold the ranks
-- [ZCOUNT(-inf, (score), ZCOUNT(-inf, score)), in bytewise order of their ids, so a binary
-- search by rank finds the first id past it (not a ZRANK of its job, which may be gone or
-- moved, and not a walk over equal scores: a batch scheduled with one delay shares one).
-- Then one range read of the page, read on past the entries of no job in the page's state
-- (the running index's pin, see claim.lua). A script, so the page is one moment.
local mode, limit, score, after = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local index = KEYS[4]

-- a < b, bytewise (Lua's `<` on strings follows the server's LC_COLLATE, not Redis's order).
local function less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The first rank whose entry sorts after (score, after), or at-or-after it with `inclusive`.
local function rank_after(inclusive)
  local lo = redis.call('ZCOUNT', index, '-inf', '(' .. score)
  local hi = redis.call('ZCOUNT', index, '-inf', score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local id = redis.call('ZRANGE', index, mid, mid)[1]
    local past
    if inclusive then past = not less(id, after) else past = less(after, id) end
    if past then hi = mid else lo = mid + 1 end
  end
  return lo
end

local descending = mode == 'dead'
local from = 0
if score ~= '' then
  if descending then
    -- Ranks below the first entry at or after the position, from the top down.
    from = redis.call('ZCARD', index) - rank_after(true)
  else
    from = rank_after(false)
  end
end
local out = {}
local found = 0
while found < limit do
  local want = limit - found
  local range
  if descending then
    range = redis.call('ZREVRANGE', index, from, from + want - 1, 'WITHSCORES')
  else
    range = redis.call('ZRANGE', index, from, from + want - 1, 'WITHSCORES')
  end
  if #range == 0 then break end
  from = from + #range / 2
  local ids = {}
  for i = 1, #range, 2 do ids[#ids + 1] = range[i] end
  local metas = redis.call('HMGET', KEYS[1], unpack(ids))
  local keep, keep_scores, keep_metas = {}, {}, {}
  for i, id in ipairs(ids) do
    local meta = metas[i]
    if meta and (mode ~= 'pending' or string.sub(meta, 1, 1) == 'p') then
      keep[#keep + 1] = id
      keep_scores[#keep_scores + 1] = range[2 * i]
      keep_metas[#keep_metas + 1] = meta
    end
  end
  if #keep > 0 then
    local errors = redis.call('HMGET', KEYS[3], unpack(keep))
    local payloads = {}
    if ARGV[5] == '1' then payloads = redis.call('HMGET', KEYS[2], unpack(keep)) end
    for i, id in ipairs(keep) do
      out[#out + 1] = id
      out[#out + 1] = keep_scores[i]
      out[#out + 1] = keep_metas[i]
      out[#out + 1] = errors[i]
      out[#out + 1] = payloads[i] or ''
    end
    found = found + #keep
  end
end
return out
