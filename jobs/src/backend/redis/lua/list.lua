-- list.lua: a page of one partition's jobs in one state, after a position, in the state's
-- order: pending (from the due index) and running (from the running index) by (score, id)
-- ascending; dead (from the dead index) descending.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] errors (see schedule.lua, claim.lua)
-- KEYS[4] the state's index: due (pending), running or dead (see claim.lua); jobs of other
-- levels and kinds are in the sets named after it (kinds.lua)
-- KEYS[5] levels (see kinds.lua), which says which of those exist
-- KEYS[6] gate_timers (see gates.lua): pending jobs waiting for their key's slot are in
-- the per-kind sets named after it, scored by run_at as the due sets are
-- ARGV[1] 'pending' | 'running' | 'dead', ARGV[2] how many jobs at most (at most 1,001)
-- ARGV[3] the position's score ("" for the first page), ARGV[4] the position's id
-- ARGV[5] '1' to return payloads, '0' for none ('' each: a listing that shows no payload
--         reads and sends none)
-- ARGV[6] '*' for every kind, or '=' then the one kind to list
--
-- Returns per job: id, score, meta, last error (false if none), payload. The position is
-- found in O(log n) whatever is left of its job: entries with its score hold the ranks
-- [ZCOUNT(-inf, (score), ZCOUNT(-inf, score)), in bytewise order of their ids, so a binary
-- search by rank finds the first id past it (not a ZRANK of its job, which may be gone or
-- moved, and not a walk over equal scores: a batch scheduled with one delay shares one).
-- Then one range read of the page, read on past the entries of no job in the page's state
-- (the running index's pin, see claim.lua). Pending and running jobs: a page from each set
-- of the kinds listed (one per level or kind in use, kinds.lua), merged by (score, id):
-- O(sets × limit). Dead jobs: one set per kind (kinds.lua), so a kind's page reads that
-- kind's only, never past other kinds' dead jobs. A script, so the page is one moment.
local mode, limit, score, after = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local only = nil
if ARGV[6] ~= '*' then only = string.sub(ARGV[6], 2) end
-- The first rank of `index` whose entry sorts after (score, after), or at-or-after it with
-- `inclusive`.
local function rank_after(index, inclusive)
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
-- Up to `limit` entries {id, score, meta} of `index` past the position, in its order.
local function page(index)
  local from = 0
  if score ~= '' then
    if descending then
      -- Ranks below the first entry at or after the position, from the top down.
      from = redis.call('ZCARD', index) - rank_after(index, true)
    else
      from = rank_after(index, false)
    end
  end
  local found = {}
  while #found < limit do
    local want = limit - #found
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
    for i, id in ipairs(ids) do
      local state, _, _, _, tail = job_parse(metas[i])
      local _, kind = job_level(tail or '')
      if state and (mode ~= 'pending' or state == 'p') and (only == nil or kind == only) then
        found[#found + 1] = {id, range[2 * i], metas[i]}
      end
    end
  end
  return found
end
-- The sets to read: the plain one and those of the levels or kinds in use.
local indexes = {}
if only == nil or only == '' then indexes[1] = KEYS[4] end
for _, m in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  local p, kind = string.match(m, '^d:(%-?%d+):(.*)$')
  if mode == 'pending' and p and (only == nil or kind == only) then
    indexes[#indexes + 1] = due_key(KEYS[4], tonumber(p), kind)
  end
  kind = string.match(m, '^w:(.*)$')
  if mode == 'pending' and kind and (only == nil or kind == only) then
    -- The kind's jobs waiting for their key's slot (gates.lua): pending too.
    indexes[#indexes + 1] = string.sub(KEYS[6], 1, -7) .. 'l:' .. kind
  end
  kind = string.match(m, '^r:(.*)$')
  if mode == 'running' and kind and (only == nil or kind == only) then
    indexes[#indexes + 1] = running_key(KEYS[4], kind)
  end
  kind = string.match(m, '^x:(.*)$')
  if mode == 'dead' and kind and (only == nil or kind == only) then
    indexes[#indexes + 1] = dead_key(KEYS[4], kind)
  end
end
local entries = {}
for _, index in ipairs(indexes) do
  for _, e in ipairs(page(index)) do entries[#entries + 1] = e end
end
if #indexes > 1 then
  table.sort(entries, function(a, b)
    if descending then a, b = b, a end
    local x, y = tonumber(a[2]), tonumber(b[2])
    if x ~= y then return x < y end
    return less(a[1], b[1])
  end)
end
local keep = {}
for i = 1, math.min(limit, #entries) do keep[i] = entries[i][1] end
local out = {}
if #keep > 0 then
  local errors = redis.call('HMGET', KEYS[3], unpack(keep))
  local payloads = {}
  if ARGV[5] == '1' then payloads = redis.call('HMGET', KEYS[2], unpack(keep)) end
  for i, id in ipairs(keep) do
    out[#out + 1] = id
    out[#out + 1] = entries[i][2]
    out[#out + 1] = entries[i][3]
    out[#out + 1] = errors[i]
    out[#out + 1] = payloads[i] or ''
  end
end
return out
