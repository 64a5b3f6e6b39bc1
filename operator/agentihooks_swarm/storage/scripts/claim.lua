-- KEYS: owners, index, then every hash of LAUNCHED. ARGV: execution, the claim, now, and '1'
-- when the claimant is known to have launched under this name (records without an owner are then
-- its own: a failover dropped its claim).
-- Returns the owner's record: the claim when it is stored now, an earlier one, or '' when the
-- name has records without an owner (written before owners existed, or a claim a failover lost).
local owner = redis.call('HGET', KEYS[1], ARGV[1])
if owner then return owner end
if ARGV[4] ~= '1' then
  for i = 3, #KEYS do
    if redis.call('HEXISTS', KEYS[i], ARGV[1]) == 1 then return '' end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return ARGV[2]
