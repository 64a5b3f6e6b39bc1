-- uses: owner_uid, tombstone
-- A restore after Redis changed its primary (:mod:`failover`): compare-and-set on the stored value,
-- and only for the life that wrote the record. KEYS: the record's hash, retained, journal, index,
-- owners, tombstones. ARGV: execution, the value the restore read, the record to write, now, '1'
-- when it read none, the record's kind, the owner claim (JSON) stored when the record was written
-- ('' for none). The claim must still be the owner, or the name have none and that life (or, for a
-- record written without an owner, the name) no tombstone: else 'owner_changed' or 'forgotten'.
-- An owner claim missing on the new primary goes back with the record. A journal entry is never
-- written beside a retained record; a restored retained record ends the journal entry, as a retain does.
local uid = owner_uid(ARGV[7])
local owner = redis.call('HGET', KEYS[5], ARGV[1])
if owner then
  if owner_uid(owner) ~= uid or uid == '' then return 'owner_changed' end
else
  local mark = ARGV[1]
  if uid ~= '' then mark = ARGV[1] .. '|' .. uid end
  if redis.call('HEXISTS', KEYS[6], mark) == 1 then return 'forgotten' end
end
if ARGV[6] == 'journal' and redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 'retained' end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[5] == '1' then
  if stored then return 'changed' end
elseif stored ~= ARGV[2] then
  return 'changed'
end
if not owner and uid ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[7]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
if ARGV[6] == 'retained' then redis.call('HDEL', KEYS[3], ARGV[1]) end
return 'written'
