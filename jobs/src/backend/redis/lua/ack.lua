-- ack.lua: running jobs are done: delete them (many acks batched in one call; see
-- acks.lua, prepended, for the rules).
--
-- KEYS[1] meta, KEYS[2] payload, KEYS[3] counts (see schedule.lua)
-- KEYS[4] errors, KEYS[5] running (see claim.lua: a running job is in running only),
-- KEYS[6] levels (see kinds.lua, prepended), KEYS[7] held, KEYS[8] held_until (see
-- held.lua, prepended: an acked job with a hold-off leaves its tombstone)
-- ARGV pairs: id, lease token (at most 512 pairs)
--
-- Returns one 1|0 per pair (see acks.lua).
return apply_acks(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  {held = KEYS[7], held_until = KEYS[8]}, ARGV, 1)
