-- claim_name(keys, first, execution, claim, now, launched): claim an execution name's records.
-- keys[first] is the tombstones, keys[first + 1] owners, keys[first + 2] the index, the rest
-- every hash of LAUNCHED. launched is
-- '1' when the claimant is known to have launched under this name (records without an owner are
-- then its own: a failover dropped its claim).
-- Returns the owner's record: the claim when it is stored now, an earlier one, or '' when the
-- name has records without an owner (written before owners existed, or a claim a failover lost),
-- or 'forgotten' when the claimant's life was forgotten (it is not claimed again).
local function claim_name(keys, first, execution, claim, now, launched)
  if forgotten(keys[first], execution, owner_uid(claim)) then return 'forgotten' end
  first = first + 1
  local owner = redis.call('HGET', keys[first], execution)
  if owner then return owner end
  if launched ~= '1' then
    for i = first + 2, #keys do
      if redis.call('HEXISTS', keys[i], execution) == 1 then return '' end
    end
  end
  redis.call('HSET', keys[first], execution, claim)
  redis.call('ZADD', keys[first + 1], now, execution)
  return claim
end
