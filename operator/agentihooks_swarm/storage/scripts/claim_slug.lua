-- KEYS: the swarm's namespace key. ARGV: the namespace claiming the swarm's slug.
-- Returns the namespace that owns the slug: ARGV[1] when claimed now or before, else the other.
local owner = redis.call('GET', KEYS[1])
if owner then return owner end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
