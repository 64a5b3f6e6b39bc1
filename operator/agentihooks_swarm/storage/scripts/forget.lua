-- uses: owner_uid, tombstone
-- KEYS: index, tombstones, their index, owners, journal, then every other hash of RECORDS. ARGV:
-- execution, force ('1'), now, the tombstones' horizon, their batch. Removes every record of the
-- execution and leaves its tombstone; refuses (-1) while a journal entry exists, unless forced.
if ARGV[2] ~= '1' and redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then return -1 end
local owner = redis.call('HGET', KEYS[4], ARGV[1])
local removed = 0
for i = 4, #KEYS do removed = removed + redis.call('HDEL', KEYS[i], ARGV[1]) end
redis.call('ZREM', KEYS[1], ARGV[1])
tombstone(KEYS[2], KEYS[3], ARGV[1], owner, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
return removed
