-- ack.lua: running jobs are done: delete them (many acks batched in one call; see
-- acks.lua, prepended, for the rules), or hand each over to its successor.
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] counts (see schedule.lua)
-- KEYS[4] errors, KEYS[5] running (see claim.lua: a running job is in running only),
-- KEYS[6] levels (see kinds.lua, prepended), KEYS[7] held, KEYS[8] held_until (see
-- held.lua, prepended: an acked job with a hold-off leaves its tombstone), KEYS[9] due,
-- KEYS[10] next, KEYS[11] next_payload (see next.lua, prepended: an acked job's successor
-- becomes the pending job), KEYS[12] gate_timers (see gates.lua, prepended: an acked
-- gated job gives its key's slot back)
-- ARGV[1] wake channel, ARGV[2] 'PUBLISH' | 'SPUBLISH' (see schedule.lua), then pairs: id,
-- lease token (at most 512 pairs)
--
-- Returns one 1|0 per pair (see acks.lua).
local N = {meta = KEYS[1], payload = KEYS[2], due = KEYS[9], levels = KEYS[6], counts = KEYS[3],
           next = KEYS[10],
           next_payload = KEYS[11], wake = ARGV[1], publish = ARGV[2],
           G = gate_ctx(KEYS[12], KEYS[9], KEYS[6], nil, ARGV[1], ARGV[2])}
return apply_acks(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  {held = KEYS[7], held_until = KEYS[8]}, ARGV, 3, N)
