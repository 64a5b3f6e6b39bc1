-- uses: journal_version, forgotten
-- The journal→retained move: one script, so no other command comes between its steps; legal on
-- a cluster (one slot). A script that fails midway keeps what it wrote before (Redis has no
-- rollback), so the evidence is written first and the journal entry goes last: at worst both
-- are there, and :meth:`AsyncStore.clear_journal` (or the next retain) removes the entry later.
-- KEYS: retained, journal, index, tombstones. ARGV: execution, the retained record, now, the
-- journal version the writer read ('' when it read no entry: a pass that pinned nothing writes
-- none), the writer's Execution UID. The first retain wins: {0, stored} when one is there already
-- (an entry left beside it goes, as the pin script does); {-1} when the journal changed (or went,
-- or came) since it was read; {-2} when the life was forgotten; {1} when this one is stored.
if forgotten(KEYS[4], ARGV[1], ARGV[5]) then return {-2} end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then
  redis.call('HDEL', KEYS[2], ARGV[1])
  return {0, stored}
end
local current = redis.call('HGET', KEYS[2], ARGV[1])
if ARGV[4] == '' then
  if current then return {-1} end
elseif not current or version_of(current) ~= tonumber(ARGV[4]) then
  return {-1}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {1}
