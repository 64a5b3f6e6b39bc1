-- claim_slug(key, namespace): claim a swarm's slug (its namespace key) for namespace unless another
-- one owns it; the namespace that owns it.
local function claim_slug(key, namespace)
  local owner = redis.call('GET', key)
  if owner then return owner end
  redis.call('SET', key, namespace)
  return namespace
end
