-- uses: owner_uid, tombstone
-- KEYS: index, journal, tombstones, their index, owners, retained, then every other swept hash.
-- ARGV: cutoff, now, batch, the tombstones' horizon, their batch.
-- An execution with a journal entry (cleanup unfinished) or without a retained record (still
-- running) is kept and looked at again one retention later; its index score moves to now. One
-- removed leaves its tombstone, as a forget does.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local removed, kept = 0, 0
for _, execution in ipairs(due) do
  if redis.call('HEXISTS', KEYS[2], execution) == 1 or redis.call('HEXISTS', KEYS[6], execution) == 0 then
    redis.call('ZADD', KEYS[1], ARGV[2], execution)
    kept = kept + 1
  else
    local owner = redis.call('HGET', KEYS[5], execution)
    for i = 5, #KEYS do redis.call('HDEL', KEYS[i], execution) end
    redis.call('ZREM', KEYS[1], execution)
    tombstone(KEYS[3], KEYS[4], execution, owner, tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]))
    removed = removed + 1
  end
end
return {removed, kept, #due}
