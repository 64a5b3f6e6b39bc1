-- KEYS: owners, index, then every hash of LAUNCHED. ARGV: execution, the claim, now.
-- Returns the owner's record: the claim when it is stored now, an earlier one, or '' when the
-- name has records without an owner (written before owners existed).
local owner = redis.call('HGET', KEYS[1], ARGV[1])
if owner then return owner end
for i = 3, #KEYS do
  if redis.call('HEXISTS', KEYS[i], ARGV[1]) == 1 then return '' end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return ARGV[2]
