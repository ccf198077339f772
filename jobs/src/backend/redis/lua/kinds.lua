-- kinds.lua: a job's spec in its meta string, and the per-kind indexes and counters. Not a
-- script of its own: prepended to every script that reads a job's spec or moves a job
-- between states, so they cannot drift.
--
-- A job's meta is "state:attempt:token:run_at_ns" and then, for a job stored with its spec
-- (every job `schedule` and `import` write), the tail
-- ":priority:max_attempts:lease_ns:backoff_first_ns:backoff_max_ns", then ":hold_off_ns" for
-- a job of `Dedup::HoldOff` with a hold-off (held.lua; a tail without it holds nothing off,
-- as every tail written before it was), then for a job with a key the byte 0x1e and
-- "limit:starts:per_ns:key" (gates.lua), then the byte 0x1f (US,
-- which no kind holds: kinds have no control characters) and the kind, last since it may
-- hold ':'. So a meta ending in 0x1f is of kind "", one byte read (acks.lua). A meta without
-- a tail (an occurrence of a series stored without a spec, series.lua, or a job written by
-- format 1) is a job of the queue's plain spec: kind "", priority 0, the queue's attempts
-- and lease.
--
-- Indexes, all under the partition's hash tag, named from the keys the script is given:
--   due            zset  pending ids of kind "" and priority 0 (the plain level; format 1's
--                        one due index), scored by run_at in microseconds
--   due:<p>:<kind> zset  the same for every other (priority, kind) with pending jobs
--   running        zset  running ids of kind "" scored by lease end (and claim.lua's pin)
--   running:<kind> zset  the same for every other kind with running jobs
--   dead           zset  dead ids of kind "" scored by death time in microseconds
--   dead:<kind>    zset  the same for every other kind with dead jobs
--   levels         zset  which of the above exist besides the plain ones: "d:<p>:<kind>"
--                        scored <p> for a due level, "r:<kind>" scored 1000 for a running
--                        set, "x:<kind>" scored 2000 for a dead set; a member goes with the
--                        last job of its index, so a claim reads the levels in use only (and
--                        by score, no dead set's)
-- Counters: the counts hash's `pending`, `running`, `dead` count every job, and
-- `pending:<kind>`, `running:<kind>`, `dead:<kind>` those of each kind but "" (whose counts
-- are the totals less the other kinds': so format 1's counters stay right as they are).
--
-- These scripts name the level and kind keys from the `due`, `running` and `levels` keys
-- they are passed: the one exception to "every key in KEYS", and each such key carries the
-- partition's hash tag, so the script still touches one cluster slot.

-- Not a job (longer than any id, 256 bytes, and than zset-max-listpack-value): a member
-- that keeps a running set skiplist-encoded from the first lease on. A set this small
-- (a partition's running jobs, mostly under 128) is otherwise a listpack, in which a lease,
-- added at the tail (the latest end), costs a walk over every entry: 3 µs per job with 50
-- running, against 0.4 µs in a skiplist, the most of a claim and ack's index work.
-- (260 '=' after the text, written out: string.rep built it a byte at a time at every
-- script call, some 16k instructions, half of what defining this file costs.)
local PIN_FILL = '===================================================='
local RUNNING_PIN = 'skiplist pin, not a job (see claim.lua) ' .. PIN_FILL .. PIN_FILL .. PIN_FILL
  .. PIN_FILL .. PIN_FILL

-- state, attempt, token, run_ns (texts), tail ("" for the plain spec), of a meta string.
local function job_parse(meta)
  return string.match(meta or '', '^(%a):(%d+):(%d+):(%d+)(.*)$')
end

-- floor(ns / 1000) of a decimal text of nanoseconds.
local function ns_us(ns)
  if #ns <= 3 then return 0 end
  return tonumber(string.sub(ns, 1, -4))
end

-- priority, kind, max_attempts, lease in microseconds of a tail; `plain` (the queue's
-- plain tail, as Rust sends it) stands for an empty one. Parsed once per tail per script.
local SPECS = {}
local function job_spec(tail, plain)
  if tail == '' then tail = plain end
  local spec = SPECS[tail]
  if not spec then
    local p, max, lease, kind = string.match(tail, '^:(%-?%d+):(%d+):(%d+):%d+:%d+[^\31]*\31(.*)$')
    spec = {tonumber(p), kind, tonumber(max), ns_us(lease)}
    SPECS[tail] = spec
  end
  return spec[1], spec[2], spec[3], spec[4]
end

-- priority and kind of a tail ("" is priority 0, kind ""). A batch's jobs mostly share
-- one tail: each is parsed once per script.
local LEVELS = {}
local function job_level(tail)
  if tail == '' then return 0, '' end
  local level = LEVELS[tail]
  if not level then
    local p, kind = string.match(tail, '^:(%-?%d+):%d+:%d+:%d+:%d+[^\31]*\31(.*)$')
    level = {tonumber(p), kind}
    LEVELS[tail] = level
  end
  return level[1], level[2]
end

local function due_key(due, p, kind)
  if p == 0 and kind == '' then return due end
  return due .. ':' .. p .. ':' .. kind
end

local function running_key(running, kind)
  if kind == '' then return running end
  return running .. ':' .. kind
end

local function dead_key(dead, kind)
  if kind == '' then return dead end
  return dead .. ':' .. kind
end

-- Records that the due level (p, kind) has jobs.
local function level_note(levels, p, kind)
  if p ~= 0 or kind ~= '' then redis.call('ZADD', levels, p, 'd:' .. p .. ':' .. kind) end
end

-- Forgets the due level (p, kind) if it has no job left.
local function level_tidy(levels, due, p, kind)
  if (p ~= 0 or kind ~= '') and redis.call('ZCARD', due_key(due, p, kind)) == 0 then
    redis.call('ZREM', levels, 'd:' .. p .. ':' .. kind)
  end
end

-- Records that the kind has running jobs.
local function running_note(levels, kind)
  if kind ~= '' then redis.call('ZADD', levels, 1000, 'r:' .. kind) end
end

-- Forgets the kind's running set if it holds no job (only the pin, at +inf: removing it
-- deletes the set).
local function running_tidy(levels, running, kind)
  if kind == '' then return end
  local key = running_key(running, kind)
  if redis.call('ZCOUNT', key, '-inf', '(+inf') == 0 then
    redis.call('ZREM', key, RUNNING_PIN)
    redis.call('ZREM', levels, 'r:' .. kind)
  end
end

-- Records that the kind has dead jobs.
local function dead_note(levels, kind)
  if kind ~= '' then redis.call('ZADD', levels, 2000, 'x:' .. kind) end
end

-- Forgets the kind's dead set if it holds no job.
local function dead_tidy(levels, dead, kind)
  -- ZCARD, not EXISTS: a queue's ACL (guide/redis.md) allows the former only.
  if kind ~= '' and redis.call('ZCARD', dead_key(dead, kind)) == 0 then
    redis.call('ZREM', levels, 'x:' .. kind)
  end
end

-- The kinds with a dead set of their own, from `levels`.
local function dead_kinds(levels)
  local kinds = {}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', levels, 2000, 2000)) do
    kinds[#kinds + 1] = string.sub(m, 3)
  end
  return kinds
end

-- a < b, bytewise (Lua's `<` on strings follows the server's LC_COLLATE, not Redis's order).
local function less_bytes(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Whether Lua's `<` on strings is bytewise here: strcoll under the LC_COLLATE redis-server
-- took from its environment, which is bytewise under C, POSIX and C.UTF-8 (the usual), and
-- there some twenty times cheaper than the loop above (a claim merging kinds compares ids of
-- one due time many times). Any locale ordering by dictionary rules fails these probes
-- (case before letter, punctuation ignored, high bytes apart) and keeps the loop.
local BYTEWISE = ('B' < 'a') and ('Z' < '_') and ('a-c' < 'ab') and ('a c' < 'a-b')
  and ('a\0b' < 'a\1') and ('z' < '\128') and ('\127' < '\255') and ('ab' < 'abc')
  and not ('abc' < 'ab') and not ('a' < 'a')

local function less_lua(a, b)
  return a < b
end

local less = less_bytes
if BYTEWISE then less = less_lua end

-- The first entries (at most `n`), by (score, id) ascending, of the sorted sets `keys`
-- merged: returns `out`, `got`, where out[2i - 1], out[2i] are the id and key of the ith of
-- the `got` entries (flat: no table per entry). `read(key, from, count)` returns up to
-- `count` entries of `key` from its `from`th on (0-based), in that order, as a WITHSCORES
-- reply. A k-way merge: each set is read a chunk at a time (8 entries, then twice as many
-- each refill, never past what is still wanted), so the entries read are O(k + n) whatever
-- the sets hold beyond what is taken. `caps`, if given, maps a key to the most entries
-- taken from it (claim.lua: its kind's room). `kept`, if given, gets kept[key] = true for
-- each set read past what was taken from it: it holds more than the entries returned.
--
-- The least head is found by a scan of the k heads, inline, not a heap: a claim merges the
-- kinds of one priority (a few), and in Lua a heap's compare calls cost more than the
-- scan's compares up to some 16 sets (Ir counted under callgrind, 4 sets: 5.7k
-- instructions per entry against 13k for the heap with a compare function, and 16 sets:
-- about the same; past that the scan's O(k) per entry costs more than the heap's O(log k):
-- a claim of dozens of kinds at one priority, or remove_dead/revive over dozens of kinds,
-- pays more than it did). Scores are compared as the texts the reply holds while equal (a
-- string compare; many jobs share a due time), and read as numbers only when they differ:
-- tonumber costs more than the rest of a step.
local function merge(keys, n, read, caps, kept)
  local out, got = {}, 0
  if n <= 0 then return out, 0 end
  local lt = less
  local bytewise = BYTEWISE
  -- Cursors in parallel arrays, by slot: key, buffer, position of the head in it, head
  -- id, head score text, its number (nil until compared with another text), entries read,
  -- next chunk, most, whether the set has no more due entries.
  local K, B, A, ID, S, NUM, F, CH, CAP, DONE = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
  local function fill(j, want)
    local count = math.min(CH[j], want, CAP[j] - F[j])
    if count <= 0 then return false end
    local buf = read(K[j], F[j], count)
    B[j] = buf
    F[j] = F[j] + #buf / 2
    A[j] = 1
    CH[j] = CH[j] * 2
    DONE[j] = #buf < count * 2
    if #buf == 0 then return false end
    ID[j], S[j], NUM[j] = buf[1], buf[2], nil
    return true
  end
  local live = 0
  for _, key in ipairs(keys) do
    live = live + 1
    K[live], F[live], CH[live], CAP[live] = key, 0, 8, (caps and caps[key]) or n
    if not fill(live, n) then live = live - 1 end
  end
  while got < n and live > 0 do
    local m = 1
    local ms, mid = S[1], ID[1]
    for j = 2, live do
      local s, id = S[j], ID[j]
      local first
      if s == ms then
        if bytewise then first = id < mid else first = lt(id, mid) end
      else
        local u, v = NUM[j], NUM[m]
        if not u then
          u = tonumber(s)
          NUM[j] = u
        end
        if not v then
          v = tonumber(ms)
          NUM[m] = v
        end
        if u ~= v then
          first = u < v
        elseif bytewise then
          first = id < mid
        else
          first = lt(id, mid)
        end
      end
      if first then m, ms, mid = j, s, id end
    end
    got = got + 1
    out[2 * got - 1] = mid
    out[2 * got] = K[m]
    local at = A[m] + 2
    A[m] = at
    local buf = B[m]
    if at <= #buf then
      ID[m] = buf[at]
      local s = buf[at + 1]
      if s ~= ms then S[m], NUM[m] = s, nil end
    elseif DONE[m] or not fill(m, n - got) then
      -- Exhausted, or at its most: the last cursor takes its slot.
      K[m], B[m], A[m], ID[m], S[m], NUM[m], F[m], CH[m], CAP[m], DONE[m] =
        K[live], B[live], A[live], ID[live], S[live], NUM[live], F[live], CH[live], CAP[live],
        DONE[live]
      live = live - 1
    end
  end
  if kept then
    for j = 1, live do
      if A[j] <= #B[j] then kept[K[j]] = true end
    end
  end
  return out, got
end

-- Counter deltas, written once per script by tally_flush: t[field] += d, and the kind's own.
local function tally(t, field, kind, d)
  t[field] = (t[field] or 0) + d
  if kind ~= '' then
    local f = field .. ':' .. kind
    t[f] = (t[f] or 0) + d
  end
end

-- A kind's counter at 0 goes, so the hash holds the kinds in use only. Two fields (a plain
-- batch's `pending` and `running`) are an HINCRBY each; more (a batch of several kinds: a
-- total and a field per kind for each state it moved) are read with one HMGET and written
-- with one HSET (and one HDEL for the kinds' fields that reached 0), since each command a
-- script calls costs about as much as a small command's own work. (A counter edited by hand
-- to a non-integer is read as 0 there, and so overwritten with the delta, where HINCRBY
-- fails the script: the counters are the scripts' own, a hand edit is not guarded.)
local function tally_flush(counts, t)
  local fields, deltas = {}, {}
  for f, d in pairs(t) do
    if d ~= 0 then
      fields[#fields + 1] = f
      deltas[#deltas + 1] = d
    end
  end
  if #fields <= 2 then
    for i, f in ipairs(fields) do
      local left = redis.call('HINCRBY', counts, f, deltas[i])
      if left == 0 and string.find(f, ':', 1, true) then redis.call('HDEL', counts, f) end
    end
    return
  end
  local was = redis.call('HMGET', counts, unpack(fields))
  local sets, gone = {}, {}
  for i, f in ipairs(fields) do
    local left = (tonumber(was[i]) or 0) + deltas[i]
    if left == 0 and string.find(f, ':', 1, true) then
      gone[#gone + 1] = f
    else
      sets[#sets + 1] = f
      sets[#sets + 1] = string.format('%d', left)
    end
  end
  if #sets > 0 then redis.call('HSET', counts, unpack(sets)) end
  if #gone > 0 then redis.call('HDEL', counts, unpack(gone)) end
end

-- The most values one command takes from a table (`call_many`): Lua's unpack fails past
-- about 8,000 ("too many results to unpack", LUAI_MAXCSTACK), and a script that fails keeps
-- the writes it made before. Even, so ZADD's (score, member) pairs stay whole.
local ARGS_PER_CALL = 1000

-- redis.call(cmd, key, every value of `args`), in slices of at most ARGS_PER_CALL values:
-- for tables no bound on a script's jobs keeps small (a flush of many gates' promotions).
local function call_many(cmd, key, args)
  local n = #args
  for i = 1, n, ARGS_PER_CALL do
    redis.call(cmd, key, unpack(args, i, math.min(n, i + ARGS_PER_CALL - 1)))
  end
end

-- Grouped writes: g[key] gets the arguments of one command, run once per key by g_run.
local function g_push(g, key, a, b)
  local list = g[key]
  if not list then
    list = {}
    g[key] = list
  end
  list[#list + 1] = a
  if b ~= nil then list[#list + 1] = b end
end

local function g_run(g, cmd)
  for key, list in pairs(g) do call_many(cmd, key, list) end
end

-- Whether `score` is at or before the head of the index `key` (just written: the job
-- became its level's first due, so maybe the partition's).
local function is_head(key, score)
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return head[2] ~= nil and tonumber(head[2]) >= score
end
